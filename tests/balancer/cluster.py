"""A few balancers sharing membership, leases and a manual clock, each with a stand-in agent
manager that records what it is told and hands queues back as told."""

from __future__ import annotations

from collections import Counter

from balancer import QueueBalancerBase, QueueDistributionChange
from streams.core.ids import QueueId


def queues(n: int) -> list[QueueId]:
    return [QueueId(i) for i in range(n)]


def numbers(qs) -> list[int]:
    return sorted(q.number for q in qs)


class Worker:
    """A balancer and a stand-in agent manager. With ``drains=True`` a queue is released as
    soon as it is removed (an instant drain); otherwise it waits for :meth:`finish_drain`."""

    def __init__(self, name: str, balancer: QueueBalancerBase, *, drains: bool = True) -> None:
        self.name = name
        self.balancer = balancer
        self.drains = drains
        self.changes: list[QueueDistributionChange] = []
        self.draining: set[QueueId] = set()
        balancer.subscribe(self.on_change)

    async def on_change(self, change: QueueDistributionChange) -> None:
        self.changes.append(change)
        self.draining |= change.removed
        self.draining -= change.lost
        for queue in change.lost:
            await self.balancer.release(queue)
        if self.drains:
            await self.finish_drain()

    async def finish_drain(self) -> None:
        for queue in sorted(self.draining):
            await self.balancer.release(queue)
        self.draining.clear()

    @property
    def owned(self) -> frozenset[QueueId]:
        return self.balancer.get_my_queues()


class Cluster:
    def __init__(self, workers: list[Worker] | None = None) -> None:
        self.workers: list[Worker] = workers or []

    def __getitem__(self, name: str) -> Worker:
        return next(w for w in self.workers if w.name == name)

    async def start(self, worker: Worker, queue_list: list[QueueId]) -> Worker:
        self.workers.append(worker)
        await worker.balancer.initialize(worker.name, queue_list)
        self.check_exclusive()
        return worker

    def stop(self, name: str) -> None:
        """The worker dies: it does nothing more (no leave, no release)."""
        self.workers.remove(self[name])

    async def tick(self, rounds: int = 1) -> None:
        for _ in range(rounds):
            for worker in self.workers:
                await worker.balancer.tick()
                self.check_exclusive()

    async def run_for(self, clock, seconds: float, step: float = 5.0) -> None:
        """Let ``seconds`` of time pass, a round every ``step`` (as ``run`` would)."""
        for _ in range(round(seconds / step)):
            clock.advance(step)
            await self.tick()

    def check_exclusive(self) -> None:
        """No queue is ever owned, or still draining, at two workers at once."""
        held = Counter(q for w in self.workers for q in w.owned | w.draining)
        assert not [q for q, n in held.items() if n > 1], f"queues held twice: {held}"

    def shares(self) -> dict[str, list[int]]:
        return {w.name: numbers(w.owned) for w in self.workers}

    def all_owned(self) -> list[int]:
        return sorted(q.number for w in self.workers for q in w.owned)
