"""The embedded backend: queues, checkpoints, pub-sub, dead letters, leases, the handoff log and
the status board, all in one SQLite store under a directory; the workers sharing the store
balance its queues by leases. :class:`LocalStore` is such a store beside queues kept elsewhere."""

from __future__ import annotations

import os
import sqlite3
from functools import partial
from pathlib import Path

import anyio

import spark_sink
from balancer.base import BalancerOptions
from balancer.lease_based import LeaseBasedQueueBalancer
from streams.adapters.mapper import HashRingQueueMapper
from streams.adapters.protocols import SavedStateRow
from streams.adapters.retention import RetentionPolicy
from streams.adapters.status import ClusterStatus
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from streams.backends.embedded.balancer import SqliteLeaseProvider, SqliteMembership
from streams.backends.embedded.deadletters import EmbeddedDeadLetterStore
from streams.backends.embedded.mark_retention import MarkRetention
from streams.backends.embedded.pubsub import EmbeddedPubSubStore
from streams.backends.embedded.queue_tables import every_state, replay_horizon
from streams.backends.embedded.retained import StoreRecords
from streams.backends.embedded.status import EmbeddedStatusBoard, read_status
from streams.backends.embedded.store import EmbeddedStore, Synchronous


class EmbeddedBackend:
    """The embedded store of ``factory`` and what lives beside its queues.

    >>> import tempfile
    >>> backend = EmbeddedBackend.open(tempfile.mkdtemp(), queues=4)
    >>> backend.queue_mapper().queue_count, backend.balances
    (4, True)
    """

    balances = True
    position_names = ("queue", "sequence")
    cluster_away = False  # the store is on this machine
    durable = True

    def __init__(self, factory: EmbeddedAdapterFactory) -> None:
        self.factory = factory
        self.local = LocalStore(factory.store)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        queues: int | None = None,
        *,
        retention: RetentionPolicy | None = None,
        synchronous: Synchronous = "NORMAL",
        file_mode: int = 0o600,
    ) -> EmbeddedBackend:
        """The store under ``path`` with ``queues`` queues (made on first use; by default an
        existing store's count, else 8); its new files get ``file_mode``."""
        return cls(
            EmbeddedAdapterFactory(path, queues, retention=retention, synchronous=synchronous, file_mode=file_mode)
        )

    @property
    def store(self) -> EmbeddedStore:
        return self.factory.store

    def queue_mapper(self) -> HashRingQueueMapper:
        return self.factory.get_queue_mapper()

    def pubsub_store(self) -> EmbeddedPubSubStore:
        return self.local.pubsub_store()

    def dead_letter_store(self) -> EmbeddedDeadLetterStore:
        return self.local.dead_letter_store()

    def dead_letter_archive(self) -> EmbeddedDeadLetterStore:
        return self.local.dead_letter_store()

    async def check_reachable(self, within: float) -> None:
        pass  # the store is on this machine

    def status_board(self) -> EmbeddedStatusBoard:
        return self.local.status_board()

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus:
        return await self.local.read_status(suspicion_timeout=suspicion_timeout, everyone=everyone)

    async def saved_states(self) -> list[SavedStateRow]:
        return await self.local.saved_states()

    async def retained_records(self) -> StoreRecords:
        return await self.local.retained_records()

    def queue_balancer(self, options: BalancerOptions | None) -> LeaseBasedQueueBalancer:
        """The balancer of the worker processes sharing this store: lease-based, over
        membership and leases kept in the store; the adapter's checkpoints are fenced by
        those leases. A worker silent for half a lease (and at least three balancing rounds)
        is dead to the others, so its queues move as soon as its leases expire."""
        options = options or BalancerOptions()
        leases = SqliteLeaseProvider(self.store)
        balancer = LeaseBasedQueueBalancer(
            SqliteMembership(self.store, suspicion_timeout=options.suspicion_timeout),
            leases,
            options=options,
        )
        self.factory.fence_with_leases(leases, balancer.get_tenure)
        return balancer

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The handoff log in the store (its tables are made here: in a worker thread). The
        queues' retention policy bounds it too (:mod:`streams.backends.embedded.handoff_retention`)."""
        # pyarrow loads only when something hands off
        from streams.backends.embedded.handoff_sink import EmbeddedHandoffSink

        sink: spark_sink.HandoffSink = await anyio.to_thread.run_sync(
            EmbeddedHandoffSink,
            self.store,
            handoff,
            MarkRetention(replay_horizon),
            self.factory.retention,
        )
        return sink


class LocalStore:
    """An embedded store as the place of what is not on the queues: durable pub-sub, dead
    letters, the status board and the saved state, read back for the CLI.

    >>> import tempfile
    >>> local = LocalStore(EmbeddedStore(tempfile.mkdtemp()))
    >>> type(local.status_board()).__name__, type(local.dead_letter_store()).__name__
    ('EmbeddedStatusBoard', 'EmbeddedDeadLetterStore')
    """

    def __init__(self, store: EmbeddedStore) -> None:
        self.store = store

    @property
    def path(self) -> Path:
        return self.store.path

    def pubsub_store(self) -> EmbeddedPubSubStore:
        return EmbeddedPubSubStore(self.store)

    def dead_letter_store(self) -> EmbeddedDeadLetterStore:
        return EmbeddedDeadLetterStore(self.store)

    def dead_letter_archive(self) -> EmbeddedDeadLetterStore:
        """The dead letters with their ids (closing it leaves the store open: :meth:`close`
        closes that)."""
        return EmbeddedDeadLetterStore(self.store)

    def status_board(self) -> EmbeddedStatusBoard:
        return EmbeddedStatusBoard(self.store)

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus:
        # In a worker thread: it counts the events of up to a queue's lag, and a worker's
        # status page reads it every few seconds while the worker runs on this loop.
        read = partial(read_status, self.store, suspicion_timeout=suspicion_timeout, everyone=everyone)
        return await anyio.to_thread.run_sync(read)

    async def saved_states(self) -> list[SavedStateRow]:
        return await self.store.read(self._every_state)

    def _every_state(self, conn: sqlite3.Connection) -> list[SavedStateRow]:
        self.store.check_layout(conn)  # a newer layout's tables are not read as this one's
        return every_state(conn)

    async def retained_records(self) -> StoreRecords:
        return StoreRecords(self.store)

    def close(self) -> None:
        self.store.close()
