"""The best-fit balancer over live membership (Orleans' ``DynamicClusterConfigDeploymentBalancer``,
``DeploymentBasedQueueBalancer`` with ``IsFixed = false``)."""

from __future__ import annotations

from collections.abc import Sequence

from balancer.base import BalancerOptions, QueueBalancerBase
from balancer.best_fit import best_fit_distribution
from balancer.clock import Clock
from balancer.ownership import QueueOwnership
from balancer.protocols import LeaseProvider, MemberRecord, MembershipOracle
from streams.core.errors import ConfigurationError

DEFAULT_MATURITY_PERIOD = 120.0


def mature_workers(live: Sequence[MemberRecord], now: float, maturity_period: float) -> set[str]:
    """The live workers that count for balancing at ``now``.

    A worker counts once it has been a member for ``maturity_period``, so one that restarts
    again and again (a restart storm) never pulls queues to itself. The founders count at
    once: those that joined before any live worker had matured (a cold start, or every
    mature worker gone), as nobody else could take the queues.

    >>> from balancer.protocols import MemberRecord
    >>> old, new = MemberRecord("a", "i", 0.0, 500.0), MemberRecord("b", "i", 400.0, 500.0)
    >>> sorted(mature_workers([old, new], now=500.0, maturity_period=120.0))
    ['a']
    >>> sorted(mature_workers([old, new], now=520.0, maturity_period=120.0))
    ['a', 'b']
    """
    if not live:
        return set()
    first_maturity = min(r.joined_at for r in live) + maturity_period
    return {r.worker for r in live if r.joined_at < first_maturity or now - r.joined_at >= maturity_period}


class BestFitBalancer(QueueBalancerBase):
    """Active workers keep their ideal queues; the queues of workers that are down go to the
    least loaded active ones (:func:`~balancer.best_fit.best_fit_distribution`).

    ``workers`` is every worker name the deployment may run (Orleans' deployment
    configuration); by default, every name the membership table has ever seen. Name workers
    stably (``worker-0`` … ``worker-N``): a worker that comes back gets its own queues back,
    and only those move. A never-seen name changes the ideal distribution itself, so for
    fleets of throwaway names use :class:`~balancer.lease_based.LeaseBasedQueueBalancer`. (A
    name that never comes back leaves its ideal share to the others as orphans: still balanced,
    within one queue.)

    A newly joined worker counts only after ``maturity_period`` (see :func:`mature_workers`).

    >>> import anyio
    >>> from balancer.membership import MemoryMembership
    >>> from streams.core.ids import QueueId
    >>> balancer = BestFitBalancer(MemoryMembership(), workers=["w1", "w2"])
    >>> anyio.run(balancer.initialize, "w1", [QueueId(n) for n in range(4)])
    >>> sorted(q.number for q in balancer.get_my_queues())  # w2 is down: w1 has them all
    [0, 1, 2, 3]
    """

    def __init__(
        self,
        membership: MembershipOracle,
        *,
        workers: Sequence[str] | None = None,
        maturity_period: float = DEFAULT_MATURITY_PERIOD,
        lease_provider: LeaseProvider | None = None,
        clock: Clock | None = None,
        options: BalancerOptions | None = None,
    ) -> None:
        super().__init__(lease_provider=lease_provider, membership=membership, clock=clock, options=options)
        if maturity_period < 0:
            raise ConfigurationError(f"maturity_period is zero or positive seconds, not {maturity_period!r}")
        if workers is not None and not workers:
            raise ConfigurationError("workers, when given, lists at least one worker name")
        self.workers = frozenset(workers) if workers is not None else None
        self.maturity_period = maturity_period

    def _check_worker(self, worker: str) -> None:
        super()._check_worker(worker)
        if self.workers is not None and worker not in self.workers:
            raise ConfigurationError(
                f"worker {worker!r} is not in the balancer's worker list "
                f"{sorted(self.workers)!r}; add it there or use another name"
            )

    async def _rebalance(self, ownership: QueueOwnership) -> None:
        snapshot = await self._membership_snapshot()
        universe = self.workers if self.workers is not None else frozenset(snapshot.members)
        active = mature_workers(snapshot.live_members(), snapshot.taken_at, self.maturity_period)
        distribution = best_fit_distribution(universe, active & universe, self.queues)
        await ownership.converge(distribution.get(self.worker, []))
