"""The memory backend: queues in this process (memory or generated), pub-sub and dead letters
in memory, no default balancer (the worker reads every queue), no handoff log and no status
board (nothing outside the process could read them)."""

from __future__ import annotations

import spark_sink
from balancer.base import BalancerOptions
from balancer.protocols import QueueBalancer
from streams.adapters.protocols import QueueAdapterFactory, QueueMapper, SavedStateRow
from streams.adapters.retention import RetainedRecords
from streams.adapters.status import ClusterStatus
from streams.backends.memory.adapter import GeneratorAdapterFactory, GeneratorConfig, MemoryAdapterFactory
from streams.backends.memory.stores import MemoryDeadLetterStore, MemoryPubSubStore
from streams.core.deadletters import DeadLetterArchive, DeadLetterStore
from streams.core.errors import ConfigurationError
from streams.core.pubsub import PubSubStore


class MemoryBackend:
    """Any in-process queue adapter factory (``MemoryAdapterFactory``,
    ``GeneratorAdapterFactory``, one of your own) with everything else in memory.

    >>> MemoryBackend.open(queues=2).queue_mapper().get_all_queues()
    [QueueId(number=0), QueueId(number=1)]
    """

    balances = False
    store = None
    position_names = ("queue", "sequence")
    cluster_away = False
    durable = False

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

    async def check_reachable(self, within: float) -> None:
        pass  # the queues are in this process

    def dead_letter_archive(self) -> DeadLetterArchive:
        raise ConfigurationError(
            "keeps its dead letters in this process's memory (MemoryDeadLetterStore): nothing outside it can list them"
        )

    def status_board(self) -> None:
        return None

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus:
        raise ConfigurationError("its provider keeps no local store (memory queues): nothing to read")

    async def saved_states(self) -> list[SavedStateRow]:
        raise ConfigurationError("its provider keeps its state in this process's memory: nothing to read")

    async def retained_records(self) -> RetainedRecords:
        raise ConfigurationError("its provider keeps no local store (memory queues): nothing to read")
