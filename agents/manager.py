"""The agent manager: the pulling agents of one worker (Orleans' ``PersistentStreamPullingManager``).

It starts one :class:`PullingAgent` per queue this worker owns and stops them on the way out.
Which queues are owned is the balancer's decision; with none, a worker owns every queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import anyio
from anyio.abc import TaskGroup

from cache.protocols import QueueCache
from streams.adapters.protocols import QueueAdapter
from streams.ids import QueueId

from .context import AgentContext
from .pulling_agent import PullingAgent

log = logging.getLogger("headrace.agent")


class AgentManager:
    def __init__(
        self,
        adapter: QueueAdapter,
        context: AgentContext,
        cache_factory: Callable[[QueueId], QueueCache],
    ) -> None:
        self.adapter = adapter
        self.context = context
        self._cache_factory = cache_factory
        self._agents: dict[QueueId, PullingAgent] = {}
        self._tg: TaskGroup | None = None

    async def start(self, tg: TaskGroup, queues: Iterable[QueueId]) -> None:
        self._tg = tg
        for queue in queues:
            await self.add_queue(queue)

    async def add_queue(self, queue: QueueId) -> PullingAgent:
        """Start an agent for a queue this worker now owns."""
        assert self._tg is not None, "the agent manager is not started"
        if queue in self._agents:
            return self._agents[queue]
        agent = PullingAgent(
            queue, self.adapter.create_receiver(queue), self._cache_factory(queue), self.context
        )
        self._agents[queue] = agent
        await self._tg.start(agent.run)
        log.info("%s: agent started", queue)
        return agent

    async def remove_queue(self, queue: QueueId) -> None:
        """Stop the agent of a queue this worker no longer owns: drain, checkpoint, release."""
        agent = self._agents.pop(queue, None)
        if agent is not None:
            await agent.stop()
            log.info("%s: agent stopped", queue)

    def agent_for(self, queue: QueueId) -> PullingAgent | None:
        return self._agents.get(queue)

    @property
    def agents(self) -> list[PullingAgent]:
        return list(self._agents.values())

    async def drain(self) -> None:
        async with anyio.create_task_group() as tg:
            for agent in self._agents.values():
                tg.start_soon(agent.drain)

    async def stop(self) -> None:
        async with anyio.create_task_group() as tg:
            for queue in list(self._agents):
                tg.start_soon(self.remove_queue, queue)
