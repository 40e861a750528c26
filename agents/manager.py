"""The agent manager: the pulling agents of one worker (Orleans' ``PersistentStreamPullingManager``).

It runs one :class:`PullingAgent` per queue this worker owns. Which queues are owned is the
queue balancer's decision; with none, a worker owns every queue. With one, the manager
follows the balancer's changes (see :mod:`balancer.protocols` for the hand-off rules):

- a queue *added*: start its agent, which reads from the checkpoint;
- a queue *removed*: stop its agent (no more reads; in-flight deliveries finish within
  ``shutdown_timeout``; what was delivered is acknowledged and checkpointed), and only then
  :meth:`~balancer.protocols.QueueBalancer.release` the queue to its next owner;
- a queue *lost* (its lease is already gone): abandon its agent at once, without
  acknowledging or checkpointing; the lease's epoch fences any write it still attempts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import anyio
from anyio.abc import TaskGroup

from agents.context import AgentContext
from agents.gc_policy import POLICY as GC_POLICY
from agents.pulling_agent import PullingAgent
from balancer.protocols import QueueBalancer, QueueDistributionChange
from cache.protocols import QueueCache
from streams.adapters.protocols import QueueAdapter
from streams.core.errors import QueueFailedError
from streams.core.ids import QueueId

log = logging.getLogger("headrace.agent")


class AgentManager:
    """The agents of one worker, following ``balancer`` when there is one. Use::

    manager = AgentManager(adapter, context, cache_factory, balancer)
    await manager.start(task_group, "worker-1", mapper.get_all_queues())
    ...                     # agents come and go as the balancer moves queues
    await manager.stop()    # agents stopped and checkpointed, then the leases freed
    """

    def __init__(
        self,
        adapter: QueueAdapter,
        context: AgentContext,
        cache_factory: Callable[[QueueId], QueueCache],
        balancer: QueueBalancer | None = None,
    ) -> None:
        self.adapter = adapter
        self.context = context
        self.balancer = balancer
        self._cache_factory = cache_factory
        self._agents: dict[QueueId, PullingAgent] = {}
        self._leaving: dict[QueueId, PullingAgent] = {}  # stopping, lease not yet released
        self._all_left = anyio.Event()
        self._all_left.set()
        self._stopping = False
        self._tg: TaskGroup | None = None
        self._gc_tuned = False
        self._sweeps: anyio.CancelScope | None = None  # the collector's sweeps while tuned

    async def start(self, tg: TaskGroup, worker: str, queues: Sequence[QueueId]) -> None:
        """Start reading in ``tg``: every one of ``queues`` with no balancer; otherwise join
        the balancer as ``worker``, start agents for its first share and keep following it
        (its maintenance loop runs in ``tg``)."""
        self._tg = tg
        if GC_POLICY.wanted(self.context.options.tune_gc) and not self._gc_tuned:
            self._gc_tuned = True
            GC_POLICY.enter()
            self._sweeps = anyio.CancelScope()
            tg.start_soon(self._keep_swept, self._sweeps)
        if self.balancer is None:
            await self.add_queues(queues)
            return
        self.balancer.subscribe(self.on_queue_distribution_change)
        try:
            await self.balancer.initialize(worker, queues)  # the first share comes as a change
        except BaseException:
            self.balancer.unsubscribe(self.on_queue_distribution_change)
            raise
        tg.start_soon(self.balancer.run)

    async def on_queue_distribution_change(self, change: QueueDistributionChange) -> None:
        """The balancer's listener. Quick, as it holds up the balancer's next round: hand-backs
        run in the task group."""
        for queue in change.lost:
            await self._abandon(queue)
        for queue in change.removed:
            self._hand_back(queue)
        if self._stopping:
            return  # leaving: a queue picked up now is released with the rest at shutdown
        await self.add_queues(change.added)

    async def add_queues(self, queues: Iterable[QueueId]) -> None:
        """Start agents for ``queues`` side by side. An agent is started once its receiver
        is connected and positioned (and its saved states loaded), which takes round trips to
        the broker; one after the other, the last queue was read a round trip per queue
        late, and a worker's first queues were drained before its last were read at all."""
        adding = list(queues)
        if len(adding) == 1:
            await self.add_queue(adding[0])
            return
        try:
            async with anyio.create_task_group() as starting:
                for queue in adding:
                    starting.start_soon(self.add_queue, queue)
        except BaseExceptionGroup as group:  # one failure raises as it did one at a time
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def add_queue(self, queue: QueueId) -> PullingAgent:
        """Start an agent for a queue this worker now owns."""
        assert self._tg is not None, "the agent manager is not started"
        if queue in self._agents:
            return self._agents[queue]
        agent = PullingAgent(
            queue,
            self.adapter.create_receiver(queue, self.context.options.max_event_size),
            self._cache_factory(queue),
            self.context,
        )
        self._agents[queue] = agent
        await self._tg.start(agent.run)
        log.info("%s: agent started", queue)
        return agent

    async def remove_queue(self, queue: QueueId) -> None:
        """Stop the agent of a queue this worker no longer owns: no more reads, in-flight
        deliveries finish (within ``shutdown_timeout``), acknowledge and checkpoint; then,
        with a balancer, release the queue."""
        agent = self._agents.pop(queue, None)
        if agent is None:
            return
        self._leaving[queue] = agent
        self._all_left = anyio.Event()
        try:
            await agent.stop()
            log.info("%s: agent stopped", queue)
        finally:
            try:
                if self.balancer is not None:
                    await self.balancer.release(queue)
            finally:
                del self._leaving[queue]
                if not self._leaving:
                    self._all_left.set()

    def _hand_back(self, queue: QueueId) -> None:
        assert self._tg is not None, "the agent manager is not started"
        if queue in self._agents:
            self._tg.start_soon(self.remove_queue, queue)

    async def _abandon(self, queue: QueueId) -> None:
        agent = self._agents.pop(queue, None) or self._leaving.get(queue)
        if agent is not None:
            await agent.abandon()
            log.warning("%s: lease lost; agent abandoned without a checkpoint", queue)

    @property
    def readers(self) -> Mapping[QueueId, PullingAgent]:
        """The agents by queue, kept current as queues come and go: a producer in this process
        wakes the agent of a queue it wrote to through it, looking it up itself."""
        return self._agents

    @property
    def agents(self) -> list[PullingAgent]:
        return list(self._agents.values())

    @property
    def queues(self) -> frozenset[QueueId]:
        """The queues this worker's agents are reading now."""
        return frozenset(self._agents)

    async def drain(self) -> None:
        """Return once every agent has drained its queue, in a round where none read
        anything, by the drain's reads or its own (reading one queue may write to another's:
        the re-keying hop of :mod:`streams.backends.kafka.repartition`); raise one
        :class:`QueueFailedError` naming each queue that cannot be read on (the others
        drained)."""
        while True:
            failed: list[str] = []
            read: list[int] = []
            async with anyio.create_task_group() as tg:
                for agent in self._agents.values():
                    tg.start_soon(_drain, agent, read, failed)
            if failed:
                raise QueueFailedError("; ".join(sorted(failed)))
            if not sum(read):
                return

    async def stop(self) -> None:
        """Leave gracefully: stop every agent (as for a removed queue), wait for hand-backs
        under way, then shut the balancer down, which frees the leases at once so other
        workers take the queues over without waiting for them to expire."""
        self._stopping = True
        try:
            await self._stop_agents()
        finally:
            if self._gc_tuned:
                self._gc_tuned = False
                assert self._sweeps is not None
                self._sweeps.cancel()
                GC_POLICY.leave()

    @staticmethod
    async def _keep_swept(scope: anyio.CancelScope) -> None:
        with scope:
            await GC_POLICY.keep_swept()

    async def _stop_agents(self) -> None:
        # Shielded: a cancelled worker (Ctrl-C) still hands its queues back rather than
        # leaving them idle until the leases expire. Bounded by the agents' shutdown_timeout.
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for queue in list(self._agents):
                    tg.start_soon(self.remove_queue, queue)
            await self._all_left.wait()
            if self.balancer is not None:
                self.balancer.unsubscribe(self.on_queue_distribution_change)
                await self.balancer.shutdown()


async def _drain(agent: PullingAgent, read: list[int], failed: list[str]) -> None:
    """One agent's part of a drain round: what it read, or why its queue failed."""
    try:
        read.append(await agent.drain())
    except QueueFailedError as exc:
        failed.append(str(exc))
