"""Membership and leases in the embedded store (``path/headrace.db``), for several worker
processes on one machine.

Tables (area prefixes ``lease_`` and ``membership_``)::

    lease_queues(category, queue, owner, epoch, expires_at)   -- one row per queue, never deleted
    membership_workers(worker, incarnation, joined_at, last_heartbeat, left_at)

Each call is one ``BEGIN IMMEDIATE`` transaction in a worker thread (the store's pool), so
processes that race for a lease or a name are serialized by SQLite; the decisions themselves
are the pure rules of :mod:`balancer.leases` and :mod:`balancer.membership`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from balancer.leases import LeaseChange, TableLeaseProvider
from balancer.membership import DEFAULT_SUSPICION_TIMEOUT, MemberChange, TableMembership
from balancer.protocols import Lease, MemberRecord
from streams.backends.embedded.store import EmbeddedStore, Schema
from streams.core.clock import Clock
from streams.core.ids import QueueId

LEASE_SCHEMA: Schema = [
    "CREATE TABLE IF NOT EXISTS lease_queues("
    " category TEXT NOT NULL,"
    " queue INTEGER NOT NULL,"
    " owner TEXT,"
    " epoch INTEGER NOT NULL,"
    " expires_at REAL NOT NULL,"
    " PRIMARY KEY (category, queue))"
]

MEMBERSHIP_SCHEMA: Schema = [
    "CREATE TABLE IF NOT EXISTS membership_workers("
    " worker TEXT PRIMARY KEY,"
    " incarnation TEXT NOT NULL,"
    " joined_at REAL NOT NULL,"
    " last_heartbeat REAL NOT NULL,"
    " left_at REAL)"
]


class SqliteLeaseTable:
    """The rows of one lease category in ``lease_queues``."""

    def __init__(self, store: EmbeddedStore, category: str) -> None:
        store.require_schema("lease", LEASE_SCHEMA)
        self._store = store
        self.category = category

    async def update(self, queues: Sequence[QueueId], change: LeaseChange) -> list[Lease]:
        return await self._store.write(lambda conn: self._update(conn, queues, change), urgent=True)

    def _update(self, conn: sqlite3.Connection, queues: Sequence[QueueId], change: LeaseChange) -> list[Lease]:
        stored = []
        for queue in queues:
            row = conn.execute(
                "SELECT owner, epoch, expires_at FROM lease_queues WHERE category = ? AND queue = ?",
                (self.category, queue.number),
            ).fetchone()
            new = change(queue, Lease(queue, *row) if row else None)
            if new is None:
                continue
            conn.execute(
                "INSERT INTO lease_queues(category, queue, owner, epoch, expires_at)"
                " VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(category, queue) DO UPDATE SET owner = excluded.owner,"
                " epoch = excluded.epoch, expires_at = excluded.expires_at",
                (self.category, queue.number, new.owner, new.epoch, new.expires_at),
            )
            stored.append(new)
        return stored


class SqliteLeaseProvider(TableLeaseProvider):
    """Queue leases in the embedded store, shared by every process that opens it.

    ``category`` keeps the leases of different stream providers apart (one category each).

    >>> import anyio, tempfile
    >>> leases = SqliteLeaseProvider(EmbeddedStore(tempfile.mkdtemp()))
    >>> [lease.epoch for lease in anyio.run(leases.acquire, [QueueId(0)], "w1", 60.0)]
    [1]
    """

    def __init__(self, store: EmbeddedStore, *, category: str = "default", clock: Clock | None = None) -> None:
        self.table = SqliteLeaseTable(store, category)
        super().__init__(self.table, clock=clock)

    def fence_condition(self, lease: Lease) -> tuple[str, dict[str, Any]]:
        """An SQL condition, and its named parameters, that holds only while ``lease`` is
        still the queue's current tenure: ``AND`` it into a checkpoint write in the same
        store, and a stale owner's write changes no row.

        >>> import tempfile
        >>> leases = SqliteLeaseProvider(EmbeddedStore(tempfile.mkdtemp()))
        >>> sql, params = leases.fence_condition(Lease(QueueId(2), "w1", 3, 0.0))
        >>> params["lease_epoch"]
        3
        """
        sql = (
            "EXISTS (SELECT 1 FROM lease_queues WHERE category = :lease_category"
            " AND queue = :lease_queue AND owner = :lease_owner AND epoch = :lease_epoch)"
        )
        params = {
            "lease_category": self.table.category,
            "lease_queue": lease.queue.number,
            "lease_owner": lease.owner,
            "lease_epoch": lease.epoch,
        }
        return sql, params


class SqliteMemberTable:
    """The rows of ``membership_workers``."""

    _COLUMNS = "worker, incarnation, joined_at, last_heartbeat, left_at"

    def __init__(self, store: EmbeddedStore) -> None:
        store.require_schema("membership", MEMBERSHIP_SCHEMA)
        self._store = store

    async def update(self, worker: str, change: MemberChange) -> MemberRecord | None:
        return await self._store.write(lambda conn: self._update(conn, worker, change), urgent=True)

    def _update(self, conn: sqlite3.Connection, worker: str, change: MemberChange) -> MemberRecord | None:
        row = conn.execute(f"SELECT {self._COLUMNS} FROM membership_workers WHERE worker = ?", (worker,)).fetchone()
        current = MemberRecord(*row) if row else None
        new = change(current)
        if new is None:
            return current
        conn.execute(
            f"INSERT OR REPLACE INTO membership_workers({self._COLUMNS}) VALUES (?, ?, ?, ?, ?)",
            (new.worker, new.incarnation, new.joined_at, new.last_heartbeat, new.left_at),
        )
        return new

    async def read_all(self) -> list[MemberRecord]:
        rows = await self._store.read(
            lambda conn: conn.execute(f"SELECT {self._COLUMNS} FROM membership_workers").fetchall(), urgent=True
        )
        return [MemberRecord(*row) for row in rows]


class SqliteMembership(TableMembership):
    """Membership in the embedded store: the worker processes of one machine.

    >>> import anyio, tempfile
    >>> membership = SqliteMembership(EmbeddedStore(tempfile.mkdtemp()))
    >>> anyio.run(membership.join, "worker-1").worker
    'worker-1'
    """

    def __init__(
        self,
        store: EmbeddedStore,
        *,
        clock: Clock | None = None,
        suspicion_timeout: float = DEFAULT_SUSPICION_TIMEOUT,
    ) -> None:
        super().__init__(SqliteMemberTable(store), clock=clock, suspicion_timeout=suspicion_timeout)
