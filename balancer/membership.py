"""Membership: who is alive, by heartbeats and a suspicion timeout.

The rules (:func:`admit`, :func:`beat`, :func:`depart`) are pure functions of a member's row
and the time. :class:`TableMembership` applies them to any :class:`MemberTable` that can
update one row atomically: a dict here (:class:`MemoryMembership`, for tests and one process),
SQLite in :mod:`streams.backends.embedded.balancer` (several processes on one machine).

Which process a worker's membership row belongs to, and whether that process is gone.

A worker joins under an *instance id*, ``host/pid/nonce``: the name says which worker, the
instance id which process is it. A worker restarted under its own name after a hard stop
finds its name held by the old instance, still "live" by its last heartbeat. When that
instance ran on this machine and its process no longer exists, nobody will heartbeat for it
again: the new process takes the name (and the name's leases) at once instead of waiting
out the suspicion timeout. An instance on another machine, or an id of another form, is
never judged dead here: only the timeout can tell.

>>> me = new_instance_id()
>>> instance_is_dead(me), instance_is_dead("3f2a9c")  # this process; an id of another form
(False, False)
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple, Protocol

from balancer.protocols import MemberRecord, MembershipSnapshot
from streams.core.clock import Clock, WallClock
from streams.core.errors import ConfigurationError, WorkerNameInUseError


class Instance(NamedTuple):
    host: str
    pid: int


def new_instance_id() -> str:
    """``host/pid/nonce`` of this process (the nonce tells two joins of one process apart)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


def parse_instance(instance_id: str) -> Instance | None:
    """The host and pid of an instance id; ``None`` for an id of another form.

    >>> parse_instance("vm-1/4242/3f2a9c0d1e2f")
    Instance(host='vm-1', pid=4242)
    """
    host, sep, rest = instance_id.rpartition("/")
    host, sep2, pid = host.rpartition("/")
    if not (sep and sep2 and host and pid.isdigit()):
        return None
    return Instance(host, int(pid))


def instance_is_dead(instance_id: str) -> bool:
    """Whether the process of ``instance_id`` is known to be gone: it ran on this machine
    and no process (or only its unreaped remains) has its pid."""
    instance = parse_instance(instance_id)
    if instance is None or instance.host != socket.gethostname():
        return False
    if instance.pid == os.getpid():
        return False
    try:
        os.kill(instance.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user has the pid: it exists
        return False
    return _is_zombie(instance.pid)


def _is_zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet still answers ``kill(pid, 0)``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


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
    :mod:`balancer.membership`), so it tells its own members from another process's members
    of the same name, and a name held by a process of this machine that is gone is taken at
    once. ``is_dead`` judges an incarnation (default: :func:`~balancer.membership.instance_is_dead`).
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
        self._clock = clock or WallClock()
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
    >>> from streams.core.clock import ManualClock
    >>> clock = ManualClock()
    >>> membership = MemoryMembership(clock=clock, suspicion_timeout=30)
    >>> _ = anyio.run(membership.join, "worker-1")
    >>> clock.advance(31)
    >>> anyio.run(membership.snapshot).is_live("worker-1")
    False
    """

    def __init__(self, *, clock: Clock | None = None, suspicion_timeout: float = DEFAULT_SUSPICION_TIMEOUT) -> None:
        super().__init__(MemoryMemberTable(), clock=clock, suspicion_timeout=suspicion_timeout)
