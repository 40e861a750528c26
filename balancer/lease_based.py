"""The lease-based balancer: each worker leases its fair number of queues, whichever they are
(Orleans' ``LeaseBasedQueueBalancer``)."""

from __future__ import annotations

from collections.abc import Sequence

from balancer.base import BalancerOptions, QueueBalancerBase
from balancer.leases import QueueOwnership
from balancer.protocols import LeaseProvider, MembershipOracle
from streams.core.clock import Clock
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, stable_hash


def target_queue_count(queue_count: int, ranked: Sequence[str], worker: str) -> int:
    """``floor(Q/W)`` over the ``W`` live workers, plus one for the first ``Q mod W`` of
    ``ranked``.

    Ranking by seniority (not by name) means a newcomer never takes a larger share from a
    worker already running, so only the queues the newcomer needs move.

    >>> [target_queue_count(8, ["a", "b", "c"], w) for w in "abc"]
    [3, 3, 2]
    """
    if worker not in ranked:
        raise ValueError(f"worker {worker!r} is not among the ranked workers")
    base, extra = divmod(queue_count, len(ranked))
    return base + (1 if ranked.index(worker) < extra else 0)


def search_order(queues: Sequence[QueueId], worker: str) -> list[QueueId]:
    """The order in which ``worker`` tries for queues: all of them, starting from a place its
    name picks (stably), so workers looking at once mostly try different queues first.

    >>> [q.number for q in search_order([QueueId(n) for n in range(4)], "w1")]
    [1, 2, 3, 0]
    """
    start = stable_hash(worker.encode()) % len(queues)
    return [*queues[start:], *queues[:start]]


class LeaseBasedQueueBalancer(QueueBalancerBase):
    """Each live worker aims at :func:`target_queue_count` queues: it leases free queues
    while under target and, when over (a worker joined), hands back its oldest leases first,
    so a queue it has only just picked up (perhaps still catching up) does not move again.
    A queue whose renewal fails is dropped at once. A dead worker's queues go to the others
    once its leases expire.

    >>> import anyio
    >>> from balancer.leases import MemoryLeaseProvider
    >>> from balancer.membership import MemoryMembership
    >>> balancer = LeaseBasedQueueBalancer(MemoryMembership(), MemoryLeaseProvider())
    >>> anyio.run(balancer.initialize, "w1", [QueueId(n) for n in range(4)])
    >>> len(balancer.get_my_queues())
    4

    ``clock`` and ``options``: see :class:`~balancer.base.QueueBalancerBase`.
    """

    def __init__(
        self,
        membership: MembershipOracle,
        lease_provider: LeaseProvider,
        *,
        clock: Clock | None = None,
        options: BalancerOptions | None = None,
    ) -> None:
        if lease_provider is None:
            raise ConfigurationError(
                "the lease-based balancer needs a lease provider shared by every worker "
                "(SqliteLeaseProvider for one machine, MemoryLeaseProvider in one process)"
            )
        super().__init__(lease_provider=lease_provider, membership=membership, clock=clock, options=options)

    async def _rebalance(self, ownership: QueueOwnership) -> None:
        snapshot = await self._membership_snapshot()
        ranked = [record.worker for record in snapshot.live_members()]
        if self.worker not in ranked:  # this worker is running, whatever the table says
            ranked.append(self.worker)
        excess = len(ownership.owned) - target_queue_count(len(self.queues), ranked, self.worker)
        if excess > 0:
            ownership.relinquish(ownership.oldest(excess))
        elif excess < 0:
            await ownership.acquire(search_order(self.queues, self.worker), limit=-excess)
