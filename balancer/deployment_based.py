"""The deployment-based balancers (Orleans' ``DeploymentBasedQueueBalancer``): static over a fixed
list of workers, dynamic over live membership, and the best-fit distributions both use.

Best-fit distributions of queues over workers: pure functions, no I/O, no state.

Every function here depends only on the *sets* it is given (inputs are sorted first), so each
worker computes the same answer from the same facts, and every result puts each queue with
exactly one worker, with loads that differ by at most one.

- :func:`ideal_distribution`: sort workers and queues, deal contiguous runs; the first
  ``Q mod W`` workers get one more (Orleans' ``BestFitBalancer`` ideal distribution).
- :func:`best_fit_distribution`: active workers keep their ideal queues; the queues of the
  inactive ones go, one by one, to the least loaded active worker (Orleans'
  ``BestFitBalancer.GetDistribution``).
- :func:`sticky_distribution`: the same targets, but every worker keeps as much of what it
  held before as its target allows (the Kafka assignor's rule; with nothing held before it
  is the ideal distribution).

The static balancer: a fixed list of workers, each owning its ideal share for good
(Orleans' ``StaticClusterConfigDeploymentBalancer``).

The best-fit balancer over live membership (Orleans' ``DynamicClusterConfigDeploymentBalancer``,
``DeploymentBasedQueueBalancer`` with ``IsFixed = false``).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from balancer.base import BalancerOptions, QueueBalancerBase
from balancer.leases import QueueOwnership
from balancer.protocols import LeaseProvider, MemberRecord, MembershipOracle
from streams.core.clock import Clock
from streams.core.errors import ConfigurationError


class _Sortable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...

    def __hash__(self) -> int: ...


W = TypeVar("W", bound=_Sortable)  # a worker (a name, or a (name, member id) pair)
R = TypeVar("R", bound=_Sortable)  # a resource (a QueueId, or a Kafka TopicPartition)

Distribution = dict[W, list[R]]


def _targets(ranked: list[W], resource_count: int) -> dict[W, int]:
    """``floor(Q/W)`` for everyone, plus one for the first ``Q mod W`` in ``ranked``."""
    base, extra = divmod(resource_count, len(ranked))
    return {worker: base + (1 if i < extra else 0) for i, worker in enumerate(ranked)}


def ideal_distribution(workers: Iterable[W], resources: Iterable[R]) -> Distribution[W, R]:
    """Deal sorted resources to sorted workers in contiguous runs.

    >>> ideal_distribution(["b", "a", "c"], range(8))
    {'a': [0, 1, 2], 'b': [3, 4, 5], 'c': [6, 7]}
    """
    ranked = sorted(set(workers))
    pool = sorted(set(resources))
    if not ranked:
        return {}
    distribution: Distribution[W, R] = {}
    start = 0
    for worker, count in _targets(ranked, len(pool)).items():
        distribution[worker] = pool[start : start + count]
        start += count
    return distribution


def best_fit_distribution(workers: Iterable[W], active: Iterable[W], resources: Iterable[R]) -> Distribution[W, R]:
    """Active workers keep their ideal resources; the inactive workers' resources go one at
    a time (in order) to the least loaded active worker (ties: the first by name).

    ``workers`` is every worker there may be; ``active`` must be a subset of it.

    >>> best_fit_distribution(["a", "b", "c"], ["a", "c"], range(8))
    {'a': [0, 1, 2, 4], 'c': [6, 7, 3, 5]}
    """
    ideal = ideal_distribution(workers, resources)
    live = set(active)
    unknown = live - ideal.keys()
    if unknown:
        raise ValueError(f"active workers {sorted(unknown)!r} are not among the workers")
    distribution = {worker: list(ideal[worker]) for worker in sorted(live)}
    if not distribution:
        return {}
    orphans = sorted(r for worker, owned in ideal.items() if worker not in live for r in owned)
    loads = [(len(owned), worker) for worker, owned in distribution.items()]
    heapq.heapify(loads)
    for resource in orphans:
        load, worker = heapq.heappop(loads)
        distribution[worker].append(resource)
        heapq.heappush(loads, (load + 1, worker))
    return distribution


def sticky_distribution(
    workers: Iterable[W],
    resources: Iterable[R],
    previous: Mapping[W, Collection[R]],
) -> Distribution[W, R]:
    """Balanced targets, keeping each worker's previous resources where the target allows.

    A resource claimed by several workers goes to the first claimant by name; the ``Q mod W``
    larger targets go to the workers keeping the most. The resources nobody keeps are dealt
    in order to the workers still under target, in name order. So the number of resources
    that move is the least any balanced distribution allows, and with no ``previous`` the
    result is :func:`ideal_distribution`.

    >>> sticky_distribution(["a", "b", "c"], range(6), {"a": [0, 1, 2], "b": [3, 4, 5]})
    {'a': [0, 1], 'b': [3, 4], 'c': [2, 5]}
    """
    names = sorted(set(workers))
    pool = sorted(set(resources))
    if not names:
        return {}
    valid = set(pool)
    claimed: dict[W, list[R]] = {}
    taken: set[R] = set()
    for worker in names:
        mine = sorted(set(previous.get(worker, ())) & valid - taken)
        claimed[worker] = mine
        taken.update(mine)
    ranked = sorted(names, key=lambda worker: -len(claimed[worker]))  # stable: ties by name
    targets = _targets(ranked, len(pool))
    distribution: Distribution[W, R] = {w: claimed[w][: targets[w]] for w in names}
    kept = {r for owned in distribution.values() for r in owned}
    spare = iter(r for r in pool if r not in kept)
    for worker in names:
        owned = distribution[worker]
        while len(owned) < targets[worker]:
            owned.append(next(spare))
    return distribution


class StaticBalancer(QueueBalancerBase):
    """Each worker of ``workers`` owns its part of :func:`~balancer.deployment_based.ideal_distribution`,
    whoever else is up: the queues of a worker that is down wait for it.

    >>> import anyio
    >>> from streams.core.ids import QueueId
    >>> balancer = StaticBalancer(["w1", "w2", "w3"])
    >>> anyio.run(balancer.initialize, "w2", [QueueId(n) for n in range(8)])
    >>> sorted(q.number for q in balancer.get_my_queues())
    [3, 4, 5]

    ``lease_provider``, ``clock`` and ``options``: see :class:`~balancer.base.QueueBalancerBase`.
    """

    def __init__(
        self,
        workers: Sequence[str],
        *,
        lease_provider: LeaseProvider | None = None,
        clock: Clock | None = None,
        options: BalancerOptions | None = None,
    ) -> None:
        super().__init__(lease_provider=lease_provider, clock=clock, options=options)
        names = list(workers)
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ConfigurationError(f"workers is a non-empty list of worker names, not {workers!r}")
        if len(set(names)) != len(names):
            raise ConfigurationError(f"worker names must be unique: {sorted(names)!r}")
        self.workers = tuple(sorted(names))

    def _check_worker(self, worker: str) -> None:
        super()._check_worker(worker)
        if worker not in self.workers:
            raise ConfigurationError(
                f"worker {worker!r} is not in the static balancer's worker list "
                f"{list(self.workers)!r}; add it there or use another name"
            )

    async def _rebalance(self, ownership: QueueOwnership) -> None:
        await ownership.converge(ideal_distribution(self.workers, self.queues)[self.worker])


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
    least loaded active ones (:func:`~balancer.deployment_based.best_fit_distribution`).

    ``workers`` is every worker name the deployment may run (Orleans' deployment
    configuration); by default, every name the membership table has ever seen. Name workers
    stably (``worker-0`` … ``worker-N``): a worker that comes back gets its own queues back,
    and only those move. A never-seen name changes the ideal distribution itself, so for
    fleets of throwaway names use :class:`~balancer.leases.LeaseBasedQueueBalancer`. (A
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
