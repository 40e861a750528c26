"""The memory backend: queues in this process (memory or generated), pub-sub and dead letters
in memory, no default balancer (the worker reads every queue) and no handoff log."""

from __future__ import annotations

import spark_sink
from balancer.base import BalancerOptions
from balancer.protocols import QueueBalancer
from streams.adapters.generator import GeneratorAdapterFactory, GeneratorConfig
from streams.adapters.memory import MemoryAdapterFactory
from streams.adapters.protocols import QueueAdapterFactory, QueueMapper
from streams.core.deadletters import DeadLetterStore, MemoryDeadLetterStore
from streams.core.errors import ConfigurationError
from streams.core.pubsub import MemoryPubSubStore, PubSubStore
from streams.embedded.store import EmbeddedStore


class MemoryBackend:
    """Any in-process queue adapter factory (``MemoryAdapterFactory``,
    ``GeneratorAdapterFactory``, one of your own) with everything else in memory.

    >>> MemoryBackend.open(queues=2).queue_mapper().get_all_queues()
    [QueueId(number=0), QueueId(number=1)]
    """

    balances = False
    store: EmbeddedStore | None = None

    def __init__(self, factory: QueueAdapterFactory) -> None:
        self.factory = factory

    @classmethod
    def open(cls, queues: int = 8) -> MemoryBackend:
        """``queues`` queues in this process's memory."""
        return cls(MemoryAdapterFactory(queues))

    @classmethod
    def generator(cls, config: GeneratorConfig | None = None, queues: int = 8) -> MemoryBackend:
        """Queues that make their own test data (see :class:`GeneratorConfig`)."""
        return cls(GeneratorAdapterFactory(config, queues))

    def queue_mapper(self) -> QueueMapper:
        return self.factory.get_queue_mapper()

    def pubsub_store(self) -> PubSubStore:
        return MemoryPubSubStore()

    def dead_letter_store(self) -> DeadLetterStore:
        return MemoryDeadLetterStore()

    def queue_balancer(self, options: BalancerOptions | None) -> QueueBalancer | None:
        return None

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        raise ConfigurationError(
            f"{owner} hands off to Spark ({handoff.stream!r}): that needs "
            "durable queues, StreamProvider.embedded(path) or StreamProvider.kafka(...)"
        )
