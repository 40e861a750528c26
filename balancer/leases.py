"""Queue leases with fencing epochs.

The rules (:func:`grant`, :func:`extend`, :func:`vacate`) are pure functions of a lease row
and the time. :class:`TableLeaseProvider` applies them to any :class:`LeaseTable` that can
update a batch of rows atomically: a dict here (:class:`MemoryLeaseProvider`, for tests and one
process), SQLite in :mod:`streams.backends.embedded.balancer` (several processes on one machine).

The leases one worker holds: acquiring, renewing on time, handing back after a drain.

Two clocks (docs/event-time.md, "Which clock decides what"). A worker judges its own leases
by the monotonic time since it asked for them (:class:`QueueOwnership`), so a step of its
wall clock never makes it drop a queue. The expiries in the shared table are wall-clock
times other processes compare with theirs; :class:`LeaseTimes` reads the wall clock for them
so that a step in one worker costs at most a slower handover: it judges others' expiries by
the earlier of its wall clock and its steady one (the wall clock as it would be had it not
stepped), and writes its own from the later.

Every balancer decides *which* queues this worker should own; :class:`QueueOwnership` is the
one place that turns that decision into leases, so every balancer hands queues over the same
way (see :mod:`balancer.protocols`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from balancer.protocols import Lease, LeaseProvider, Tenure
from streams.core.clock import STEP_THRESHOLD, Clock, WallClock
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
    start: float | None = None,
) -> Lease | None:
    """The new lease of ``owner`` on ``queue``, with the next epoch; ``None`` while someone
    holds it.

    With ``reclaim``, a lease still held under ``owner``'s own name is granted too: the
    caller is a new process of that name whose predecessor died holding it (the membership
    let it in, so the predecessor is dead). The next epoch fences anything it may still try
    to write. The lease runs ``length`` from ``start`` (default: ``now``, at which the
    current lease is judged).

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
    return Lease(queue, owner, epoch, (now if start is None else start) + length)


def _same_tenure(current: Lease, lease: Lease) -> bool:
    return current.owner == lease.owner and current.epoch == lease.epoch


def extend(
    current: Lease | None, lease: Lease, now: float, length: float, *, start: float | None = None
) -> Lease | None:
    """``lease`` renewed until ``start + length`` (``start`` defaults to ``now``); ``None``
    if it expired at ``now`` or moved on.

    >>> held = Lease(QueueId(0), "w1", 4, expires_at=50.0)
    >>> extend(held, held, now=30.0, length=60.0, start=35.0).expires_at
    95.0
    >>> extend(held, held, now=50.0, length=60.0) is None
    True
    """
    if current is None or not _same_tenure(current, lease) or not current.is_held_at(now):
        return None
    return dataclasses.replace(current, expires_at=(now if start is None else start) + length)


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


class LeaseTimes:
    """The wall-clock times a worker compares with and writes into a shared lease table.

    The steady clock is the wall clock as it stood when last in step with the monotonic one,
    moved on by the monotonic time since. While the wall clock is stepped away from it,
    :meth:`read` gives the earlier of the two to judge others' expiries by (a lease is never
    taken early) and the later to write one's own from (a lease is never cut short); a step
    that lasts ``adopt_after`` seconds is taken as the clock's new right time.

    >>> from streams.core.clock import ManualClock
    >>> clock = ManualClock(1000.0)
    >>> times = LeaseTimes(clock)
    >>> clock.advance(10); clock.step(-600); times.read()
    (410.0, 1010.0)
    >>> clock.step(1200); times.read()
    (1010.0, 1610.0)
    """

    __slots__ = ("_adopt_after", "_clock", "_offset", "_stepped_since")

    def __init__(self, clock: Clock, *, adopt_after: float = DEFAULT_LEASE_LENGTH) -> None:
        self._clock = clock
        self._adopt_after = adopt_after
        self._offset = clock.now() - clock.monotonic()
        self._stepped_since: float | None = None

    def read(self) -> tuple[float, float]:
        """``(judge, write)``: the time to judge others' expiries at, and to write one's own from."""
        wall, elapsed = self._clock.now(), self._clock.monotonic()
        if abs(wall - elapsed - self._offset) <= STEP_THRESHOLD:
            self._offset, self._stepped_since = wall - elapsed, None  # in step: follow slow drift
        elif self._stepped_since is None:
            self._stepped_since = elapsed
        elif elapsed - self._stepped_since >= self._adopt_after:
            self._offset, self._stepped_since = wall - elapsed, None
        steady = elapsed + self._offset
        return min(wall, steady), max(wall, steady)


class TableLeaseProvider:
    """A :class:`~balancer.protocols.LeaseProvider` over a :class:`LeaseTable`."""

    def __init__(self, table: LeaseTable, *, clock: Clock | None = None) -> None:
        self._table = table
        self._clock = clock or WallClock()
        self._times = LeaseTimes(self._clock)

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
        now, start = self._times.read()
        granted = 0

        def take(queue: QueueId, current: Lease | None) -> Lease | None:
            nonlocal granted
            if limit is not None and granted >= limit:
                return None
            lease = grant(current, queue, owner, now, length, reclaim=reclaim, start=start)
            granted += lease is not None
            return lease

        return await self._table.update(queues, take)

    async def renew(self, leases: Sequence[Lease], length: float) -> list[Lease]:
        if not leases:  # most rounds renew nothing: no transaction for them
            return []
        now, start = self._times.read()
        mine = {lease.queue: lease for lease in leases}
        return await self._table.update(
            list(mine), lambda queue, current: extend(current, mine[queue], now, length, start=start)
        )

    async def release(self, leases: Sequence[Lease]) -> None:
        if not leases:
            return
        now = self._times.read()[0]
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
    those it is handing back (still renewed until :meth:`release`). It judges them by the
    monotonic time since it asked for each (a lease asked for at ``t`` is held until
    ``t + lease_length`` at the latest, whatever the wall clock does meanwhile).

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
        # Each held lease's tenure: held until lease_length after the latest grant or
        # renewal was asked for, by the monotonic clock.
        self._tenures: dict[QueueId, Tenure] = {}
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

    def tenure(self, queue: QueueId) -> Tenure | None:
        """This worker's tenure on ``queue`` while it holds the lease (owned, or being handed
        back), by the monotonic time since it was last granted or renewed: it stays current
        through renewals and ends when the lease is lost or released."""
        tenure = self._tenures.get(queue)
        return tenure if tenure is not None and tenure.held() else None

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
        asked = self._clock.monotonic()
        granted = await self._provider.acquire(
            wanted, self.worker, self.lease_length, limit=limit, reclaim=self.reclaim
        )
        for lease in granted:
            self._owned[lease.queue] = lease
            self._tenures[lease.queue] = Tenure(lease, asked + self.lease_length, self._clock)
        return frozenset(lease.queue for lease in granted)

    async def renew_due(self) -> frozenset[QueueId]:
        """Renew the leases due (``renew_period`` since their last grant or renewal, by the
        monotonic clock); drop those past ``lease_length`` since then and those the provider
        refused. Returns the queues lost."""
        asked = self._clock.monotonic()
        held = {**self._owned, **self._releasing}
        left = {q: self._left(q, asked) for q in held}  # of each lease, by the monotonic clock
        expired = {q for q in held if left[q] <= 0}
        due = [
            lease for q, lease in held.items() if q not in expired and left[q] <= self.lease_length - self.renew_period
        ]
        renewed = {lease.queue: lease for lease in await self._provider.renew(due, self.lease_length)}
        for queue, lease in renewed.items():
            tenure = self._tenures.get(queue)
            if tenure is not None:
                tenure.lease, tenure.held_until = lease, asked + self.lease_length
        lost = frozenset(expired | {lease.queue for lease in due} - renewed.keys())
        for table in (self._owned, self._releasing):
            for queue in list(table):
                if queue in lost:
                    del table[queue]
                    self._end(queue)
                elif queue in renewed:
                    table[queue] = renewed[queue]  # keeps its place: the order is by acquisition
        self._just_lost = lost
        return lost

    def _left(self, queue: QueueId, now: float) -> float:
        tenure = self._tenures.get(queue)
        return tenure.held_until - now if tenure is not None else -math.inf

    def _end(self, queue: QueueId) -> None:
        tenure = self._tenures.pop(queue, None)
        if tenure is not None:
            tenure.end()

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
        self._end(queue)
        if lease is not None:
            await self._provider.release([lease])

    async def release_all(self) -> None:
        """Free every lease at once."""
        leases = [*self._owned.values(), *self._releasing.values()]
        self._owned.clear()
        self._releasing.clear()
        for queue in list(self._tenures):
            self._end(queue)
        if leases:
            await self._provider.release(leases)
