"""Queue leases with fencing epochs.

The rules (:func:`grant`, :func:`extend`, :func:`vacate`) are pure functions of a lease row
and the time. :class:`TableLeaseProvider` applies them to any :class:`LeaseTable` that can
update a batch of rows atomically: a dict here (:class:`MemoryLeaseProvider`, for tests and one
process), SQLite in :mod:`streams.backends.embedded.balancer` (several processes on one machine).

The leases one worker holds: acquiring, renewing on time, handing back after a drain.

Every balancer decides *which* queues this worker should own; :class:`QueueOwnership` is the
one place that turns that decision into leases, so every balancer hands queues over the same
way (see :mod:`balancer.protocols`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from balancer.protocols import Lease, LeaseProvider
from streams.core.clock import Clock, WallClock
from streams.core.ids import QueueId

DEFAULT_LEASE_LENGTH = 60.0
# Half the length, less a second: a renewal that fails can be tried once more in time
# (Orleans' LeaseBasedQueueBalancerOptions.DefaultLeaseRenewPeriod).
DEFAULT_RENEW_PERIOD = 29.0

LeaseChange = Callable[[QueueId, Lease | None], Lease | None]


def grant(
    current: Lease | None,
    queue: QueueId,
    owner: str,
    now: float,
    length: float,
    *,
    reclaim: bool = False,
) -> Lease | None:
    """The new lease of ``owner`` on ``queue``, with the next epoch; ``None`` while someone
    holds it.

    With ``reclaim``, a lease still held under ``owner``'s own name is granted too: the
    caller is a new process of that name whose predecessor died holding it (the membership
    let it in, so the predecessor is dead). The next epoch fences anything it may still try
    to write.

    >>> grant(None, QueueId(0), "w1", now=0.0, length=60.0)
    Lease(queue=QueueId(number=0), owner='w1', epoch=1, expires_at=60.0)
    >>> held = Lease(QueueId(0), "w1", 4, expires_at=50.0)
    >>> grant(held, QueueId(0), "w1", now=10.0, length=60.0) is None
    True
    >>> grant(held, QueueId(0), "w1", now=10.0, length=60.0, reclaim=True)
    Lease(queue=QueueId(number=0), owner='w1', epoch=5, expires_at=70.0)
    """
    if current is not None and current.is_held_at(now) and not (reclaim and current.owner == owner):
        return None
    epoch = current.epoch + 1 if current is not None else 1
    return Lease(queue, owner, epoch, now + length)


def _same_tenure(current: Lease, lease: Lease) -> bool:
    return current.owner == lease.owner and current.epoch == lease.epoch


def extend(current: Lease | None, lease: Lease, now: float, length: float) -> Lease | None:
    """``lease`` renewed until ``now + length``; ``None`` if it expired or moved on."""
    if current is None or not _same_tenure(current, lease) or not current.is_held_at(now):
        return None
    return dataclasses.replace(current, expires_at=now + length)


def vacate(current: Lease | None, lease: Lease, now: float) -> Lease | None:
    """The row freed by ``lease``'s holder (the epoch stays); ``None`` if it is no longer
    theirs."""
    if current is None or not _same_tenure(current, lease):
        return None
    return dataclasses.replace(current, owner=None, expires_at=now)


class LeaseTable(Protocol):
    """Storage of lease rows, one row per queue."""

    async def update(self, queues: Sequence[QueueId], change: LeaseChange) -> list[Lease]:
        """In one atomic step, for each queue in order: read its row, pass it to ``change``,
        and store the result (``None``: leave the row as it is). Return the rows stored, in
        order."""
        ...


class TableLeaseProvider:
    """A :class:`~balancer.protocols.LeaseProvider` over a :class:`LeaseTable`."""

    def __init__(self, table: LeaseTable, *, clock: Clock | None = None) -> None:
        self._table = table
        self._clock = clock or WallClock()

    async def acquire(
        self,
        queues: Sequence[QueueId],
        owner: str,
        length: float,
        *,
        limit: int | None = None,
        reclaim: bool = False,
    ) -> list[Lease]:
        if not queues or (limit is not None and limit <= 0):
            return []
        now = self._clock.now()
        granted = 0

        def take(queue: QueueId, current: Lease | None) -> Lease | None:
            nonlocal granted
            if limit is not None and granted >= limit:
                return None
            lease = grant(current, queue, owner, now, length, reclaim=reclaim)
            granted += lease is not None
            return lease

        return await self._table.update(queues, take)

    async def renew(self, leases: Sequence[Lease], length: float) -> list[Lease]:
        if not leases:  # most rounds renew nothing: no transaction for them
            return []
        now = self._clock.now()
        mine = {lease.queue: lease for lease in leases}
        return await self._table.update(list(mine), lambda queue, current: extend(current, mine[queue], now, length))

    async def release(self, leases: Sequence[Lease]) -> None:
        if not leases:
            return
        now = self._clock.now()
        mine = {lease.queue: lease for lease in leases}
        await self._table.update(list(mine), lambda queue, current: vacate(current, mine[queue], now))


class MemoryLeaseTable:
    """Lease rows in a dict: shared by the workers of one process."""

    def __init__(self) -> None:
        self._rows: dict[QueueId, Lease] = {}

    async def update(self, queues: Sequence[QueueId], change: LeaseChange) -> list[Lease]:
        # No await inside: the whole batch is atomic on the event loop.
        stored = []
        for queue in queues:
            new = change(queue, self._rows.get(queue))
            if new is not None:
                self._rows[queue] = new
                stored.append(new)
        return stored


class MemoryLeaseProvider(TableLeaseProvider):
    """Leases within one process (tests, single-process workers).

    >>> import anyio
    >>> leases = MemoryLeaseProvider()
    >>> [lease.epoch for lease in anyio.run(leases.acquire, [QueueId(0)], "w1", 60.0)]
    [1]
    >>> anyio.run(leases.acquire, [QueueId(0)], "w2", 60.0)
    []
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__(MemoryLeaseTable(), clock=clock)


class QueueOwnership:
    """The leases of ``worker``: those it owns (in the order acquired, oldest first) and
    those it is handing back (still renewed until :meth:`release`).

    >>> import anyio
    >>> from streams.core.clock import ManualClock
    >>> from balancer.leases import MemoryLeaseProvider
    >>> clock = ManualClock()
    >>> ownership = QueueOwnership(MemoryLeaseProvider(clock=clock), "w1", clock=clock)
    >>> sorted(q.number for q in anyio.run(ownership.acquire, [QueueId(0), QueueId(1)]))
    [0, 1]
    """

    def __init__(
        self,
        provider: LeaseProvider,
        worker: str,
        *,
        clock: Clock,
        lease_length: float = DEFAULT_LEASE_LENGTH,
        renew_period: float = DEFAULT_RENEW_PERIOD,
    ) -> None:
        self._provider = provider
        self.worker = worker
        self._clock = clock
        self.lease_length = lease_length
        self.renew_period = renew_period
        self._owned: dict[QueueId, Lease] = {}  # insertion order = acquisition order
        self._releasing: dict[QueueId, Lease] = {}
        self._just_lost: frozenset[QueueId] = frozenset()
        # True while this worker's first round takes back what a dead predecessor of its
        # name still holds (see leases.grant).
        self.reclaim = False

    @property
    def owned(self) -> frozenset[QueueId]:
        return frozenset(self._owned)

    @property
    def releasing(self) -> frozenset[QueueId]:
        return frozenset(self._releasing)

    def lease(self, queue: QueueId) -> Lease | None:
        """The lease on ``queue`` while this worker holds it (owned, or being handed back)."""
        return self._owned.get(queue) or self._releasing.get(queue)

    def oldest(self, count: int) -> list[QueueId]:
        """The ``count`` owned queues acquired longest ago."""
        return list(self._owned)[: max(count, 0)]

    async def acquire(self, candidates: Iterable[QueueId], *, limit: int | None = None) -> frozenset[QueueId]:
        """Try for leases on ``candidates`` (in order; at most ``limit`` of them), skipping
        queues held already, being handed back, or lost in the latest renewal round (their
        old agent may still be stopping)."""
        busy = self._owned.keys() | self._releasing.keys() | self._just_lost
        wanted = [q for q in dict.fromkeys(candidates) if q not in busy]
        if not wanted:
            return frozenset()
        granted = await self._provider.acquire(
            wanted, self.worker, self.lease_length, limit=limit, reclaim=self.reclaim
        )
        for lease in granted:
            self._owned[lease.queue] = lease
        return frozenset(lease.queue for lease in granted)

    async def renew_due(self) -> frozenset[QueueId]:
        """Renew the leases due (held for ``renew_period`` since their last grant); drop
        those past expiry and those the provider refused. Returns the queues lost."""
        now = self._clock.now()
        held = {**self._owned, **self._releasing}
        expired = {q for q, lease in held.items() if not lease.is_held_at(now)}
        due = [
            lease
            for q, lease in held.items()
            if q not in expired and now >= lease.expires_at - self.lease_length + self.renew_period
        ]
        renewed = {lease.queue: lease for lease in await self._provider.renew(due, self.lease_length)}
        lost = frozenset(expired | {lease.queue for lease in due} - renewed.keys())
        for table in (self._owned, self._releasing):
            for queue in list(table):
                if queue in lost:
                    del table[queue]
                elif queue in renewed:
                    table[queue] = renewed[queue]  # keeps its place: the order is by acquisition
        self._just_lost = lost
        return lost

    def relinquish(self, queues: Collection[QueueId]) -> None:
        """Stop owning ``queues`` but keep their leases until :meth:`release`, so nobody else
        reads them while their agents drain."""
        for queue in queues:
            lease = self._owned.pop(queue, None)
            if lease is not None:
                self._releasing[queue] = lease

    async def converge(self, target: Sequence[QueueId]) -> None:
        """Own exactly ``target``: relinquish the rest, try for the missing ones."""
        keep = set(target)
        self.relinquish([q for q in self._owned if q not in keep])
        await self.acquire(target)

    async def release(self, queue: QueueId) -> None:
        """Free ``queue``'s lease (owned or being handed back); no-op if already gone."""
        lease = self._releasing.pop(queue, None) or self._owned.pop(queue, None)
        if lease is not None:
            await self._provider.release([lease])

    async def release_all(self) -> None:
        """Free every lease at once."""
        leases = [*self._owned.values(), *self._releasing.values()]
        self._owned.clear()
        self._releasing.clear()
        if leases:
            await self._provider.release(leases)
