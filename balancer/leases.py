"""Queue leases with fencing epochs.

The rules (:func:`grant`, :func:`extend`, :func:`vacate`) are pure functions of a lease row
and the time. :class:`TableLeaseProvider` applies them to any :class:`LeaseTable` that can
update a batch of rows atomically: a dict here (:class:`MemoryLeaseProvider`, for tests and one
process), SQLite in :mod:`balancer.sqlite_store` (several processes on one machine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from balancer.clock import Clock, SystemClock
from balancer.protocols import Lease
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
        self._clock = clock or SystemClock()

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
