"""Membership: who is alive, by heartbeats and a suspicion timeout.

The rules (:func:`admit`, :func:`beat`, :func:`depart`) are pure functions of a member's row
and the time. :class:`TableMembership` applies them to any :class:`MemberTable` that can
update one row atomically: a dict here (:class:`MemoryMembership`, for tests and one process),
SQLite in :mod:`balancer.sqlite_store` (several processes on one machine).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from balancer.clock import Clock, SystemClock
from balancer.instances import instance_is_dead, new_instance_id
from balancer.protocols import MemberRecord, MembershipSnapshot
from streams.core.errors import ConfigurationError, WorkerNameInUseError

DEFAULT_SUSPICION_TIMEOUT = 30.0

MemberChange = Callable[[MemberRecord | None], MemberRecord | None]


def admit(
    current: MemberRecord | None,
    worker: str,
    incarnation: str,
    now: float,
    suspicion_timeout: float,
    is_dead: Callable[[str], bool] = lambda incarnation: False,
) -> MemberRecord:
    """The row of ``worker`` joining as ``incarnation``; the current row if that incarnation
    is already live (joining again is harmless).

    Raises :class:`WorkerNameInUseError` while another incarnation of the name is live,
    unless ``is_dead`` knows that incarnation's process is gone (a restart after a hard stop).
    """
    if current is not None and current.is_live(now, suspicion_timeout):
        if current.incarnation == incarnation:
            return current
        if is_dead(current.incarnation):
            return MemberRecord(worker, incarnation, joined_at=now, last_heartbeat=now)
        silent = now - current.last_heartbeat
        raise WorkerNameInUseError(
            f"worker name {worker!r} is in use by a live worker (last heartbeat {silent:.1f} s "
            f"ago); give this worker another name, or, if that worker has died, start again "
            f"after the suspicion timeout ({suspicion_timeout - silent:.1f} s from now)"
        )
    return MemberRecord(worker, incarnation, joined_at=now, last_heartbeat=now)


def beat(
    current: MemberRecord | None,
    worker: str,
    incarnation: str,
    now: float,
    suspicion_timeout: float,
) -> MemberRecord:
    """The row after a heartbeat. A member the others had declared dead comes back as newly
    joined, so its maturity period starts again.

    Raises :class:`WorkerNameInUseError` if the row now belongs to another incarnation.
    """
    if current is None or current.incarnation != incarnation or current.left_at is not None:
        raise WorkerNameInUseError(
            f"worker {worker!r} lost its membership: it missed heartbeats for longer than the "
            f"suspicion timeout ({suspicion_timeout} s) and another process joined under the "
            "name, or it had left; stop this worker"
        )
    if not current.is_live(now, suspicion_timeout):
        return dataclasses.replace(current, joined_at=now, last_heartbeat=now)
    return dataclasses.replace(current, last_heartbeat=now)


def depart(current: MemberRecord | None, incarnation: str, now: float) -> MemberRecord | None:
    """The row after a graceful leave; ``None`` (no change) if it is not this incarnation's."""
    if current is None or current.incarnation != incarnation:
        return None
    return dataclasses.replace(current, left_at=now)


class MemberTable(Protocol):
    """Storage of member rows, one row per worker name."""

    async def update(self, worker: str, change: MemberChange) -> MemberRecord | None:
        """Atomically read ``worker``'s row, pass it to ``change`` and store the result
        (``None``: leave the row as it is); return the row as it now is. Exceptions raised
        by ``change`` propagate and nothing is written."""
        ...

    async def read_all(self) -> list[MemberRecord]: ...


class TableMembership:
    """A :class:`~balancer.protocols.MembershipOracle` over a :class:`MemberTable`.

    Each oracle object joins under its own incarnation id (``host/pid/nonce``:
    :mod:`balancer.instances`), so it tells its own members from another process's members
    of the same name, and a name held by a process of this machine that is gone is taken at
    once. ``is_dead`` judges an incarnation (default: :func:`~balancer.instances.instance_is_dead`).
    """

    def __init__(
        self,
        table: MemberTable,
        *,
        clock: Clock | None = None,
        suspicion_timeout: float = DEFAULT_SUSPICION_TIMEOUT,
        is_dead: Callable[[str], bool] = instance_is_dead,
    ) -> None:
        if suspicion_timeout <= 0:
            raise ConfigurationError(f"suspicion_timeout is positive seconds, not {suspicion_timeout!r}")
        self._table = table
        self._clock = clock or SystemClock()
        self.suspicion_timeout = suspicion_timeout
        self._is_dead = is_dead
        self._incarnations: dict[str, str] = {}
        self._joins: Counter[str] = Counter()

    async def join(self, worker: str) -> MemberRecord:
        if not isinstance(worker, str) or not worker:
            raise ConfigurationError(f"a worker name is a non-empty str, not {worker!r}")
        incarnation = self._incarnations.get(worker) or new_instance_id()
        now, timeout = self._clock.now(), self.suspicion_timeout
        record = await self._table.update(
            worker, lambda current: admit(current, worker, incarnation, now, timeout, self._is_dead)
        )
        assert record is not None
        self._incarnations[worker] = incarnation
        self._joins[worker] += 1
        return record

    async def heartbeat(self, worker: str) -> MemberRecord:
        incarnation = self._incarnation(worker)
        now, timeout = self._clock.now(), self.suspicion_timeout
        record = await self._table.update(worker, lambda current: beat(current, worker, incarnation, now, timeout))
        assert record is not None
        return record

    async def leave(self, worker: str) -> None:
        incarnation = self._incarnation(worker)
        self._joins[worker] -= 1
        if self._joins[worker] > 0:
            return  # another balancer of this worker still counts on the membership
        del self._joins[worker], self._incarnations[worker]
        now = self._clock.now()
        await self._table.update(worker, lambda current: depart(current, incarnation, now))

    async def snapshot(self) -> MembershipSnapshot:
        records = await self._table.read_all()
        return MembershipSnapshot({r.worker: r for r in records}, self._clock.now(), self.suspicion_timeout)

    def _incarnation(self, worker: str) -> str:
        try:
            return self._incarnations[worker]
        except KeyError:
            raise ConfigurationError(
                f"worker {worker!r} has not joined through this membership oracle; call join() first"
            ) from None


class MemoryMemberTable:
    """Member rows in a dict: shared by the workers of one process."""

    def __init__(self) -> None:
        self._rows: dict[str, MemberRecord] = {}

    async def update(self, worker: str, change: MemberChange) -> MemberRecord | None:
        # No await between the read and the write: atomic on the event loop.
        current = self._rows.get(worker)
        new = change(current)
        if new is None:
            return current
        self._rows[worker] = new
        return new

    async def read_all(self) -> list[MemberRecord]:
        return list(self._rows.values())


class MemoryMembership(TableMembership):
    """Membership within one process (tests, single-process workers).

    >>> import anyio
    >>> from balancer.clock import ManualClock
    >>> clock = ManualClock()
    >>> membership = MemoryMembership(clock=clock, suspicion_timeout=30)
    >>> _ = anyio.run(membership.join, "worker-1")
    >>> clock.advance(31)
    >>> anyio.run(membership.snapshot).is_live("worker-1")
    False
    """

    def __init__(self, *, clock: Clock | None = None, suspicion_timeout: float = DEFAULT_SUSPICION_TIMEOUT) -> None:
        super().__init__(MemoryMemberTable(), clock=clock, suspicion_timeout=suspicion_timeout)
