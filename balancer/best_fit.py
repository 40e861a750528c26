"""Best-fit distributions of queues over workers: pure functions, no I/O, no state.

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
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol, TypeVar


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
