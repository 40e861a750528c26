"""The leases one worker holds: acquiring, renewing on time, handing back after a drain.

Every balancer decides *which* queues this worker should own; :class:`QueueOwnership` is the
one place that turns that decision into leases, so every balancer hands queues over the same
way (see :mod:`balancer.protocols`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from balancer.clock import Clock
from balancer.leases import DEFAULT_LEASE_LENGTH, DEFAULT_RENEW_PERIOD
from balancer.protocols import Lease, LeaseProvider
from streams.core.ids import QueueId


class QueueOwnership:
    """The leases of ``worker``: those it owns (in the order acquired, oldest first) and
    those it is handing back (still renewed until :meth:`release`).

    >>> import anyio
    >>> from balancer.clock import ManualClock
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
