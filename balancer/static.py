"""The static balancer: a fixed list of workers, each owning its ideal share for good
(Orleans' ``StaticClusterConfigDeploymentBalancer``)."""

from __future__ import annotations

from collections.abc import Sequence

from balancer.base import BalancerOptions, QueueBalancerBase
from balancer.best_fit import ideal_distribution
from balancer.clock import Clock
from balancer.ownership import QueueOwnership
from balancer.protocols import LeaseProvider
from streams.core.errors import ConfigurationError


class StaticBalancer(QueueBalancerBase):
    """Each worker of ``workers`` owns its part of :func:`~balancer.best_fit.ideal_distribution`,
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
