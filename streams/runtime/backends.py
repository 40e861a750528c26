"""What a provider runs on: the :class:`Backend` protocol and its three kinds.

A backend builds the queue adapter factory, the queue mapper, the default balancer, the pub-sub
and dead-letter stores and the Spark handoff sinks; the provider asks it for each part and
probes nothing. :class:`MemoryBackend`, :class:`EmbeddedBackend` and :class:`KafkaBackend` are
the three kinds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import anyio

import spark_sink
from balancer.base import BalancerOptions
from balancer.kafka.group import KafkaGroupBalancer, group_balancer
from balancer.lease_based import LeaseBasedQueueBalancer
from balancer.protocols import QueueBalancer
from balancer.sqlite_store import SqliteLeaseProvider, SqliteMembership
from spark_sink.mark_retention import MarkRetention
from streams.adapters.mapper import HashRingQueueMapper
from streams.adapters.memory import GeneratorAdapterFactory, GeneratorConfig, MemoryAdapterFactory
from streams.adapters.protocols import QueueAdapterFactory, QueueMapper
from streams.adapters.retention import RetentionPolicy
from streams.core.deadletters import DeadLetterStore, MemoryDeadLetterStore
from streams.core.errors import ConfigurationError
from streams.core.pubsub import MemoryPubSubStore, PubSubStore
from streams.core.records import RecordFormat
from streams.embedded.adapter import EmbeddedAdapterFactory
from streams.embedded.deadletters import EmbeddedDeadLetterStore
from streams.embedded.pubsub import EmbeddedPubSubStore
from streams.embedded.queues import replay_horizon
from streams.embedded.store import EmbeddedStore, Synchronous
from streams.kafka.adapter import KafkaAdapterFactory
from streams.kafka.deadletters import KafkaDeadLetterStore
from streams.kafka.pubsub import KafkaPubSubStore
from streams.kafka.settings import KeyField


class Backend(Protocol):
    """The queues below a provider and the stores beside them.

    >>> from streams.runtime.backends import MemoryBackend
    >>> from streams.adapters.memory import MemoryAdapterFactory
    >>> backend: Backend = MemoryBackend(MemoryAdapterFactory(4))
    >>> len(backend.queue_mapper().get_all_queues()), backend.balances, backend.store
    (4, False, None)
    """

    @property
    def factory(self) -> QueueAdapterFactory:
        """The queue adapter factory (the adapter is made when the provider starts)."""
        ...

    @property
    def store(self) -> EmbeddedStore | None:
        """The local store beside the queues (status, durable pub-sub), if there is one."""
        ...

    @property
    def balances(self) -> bool:
        """Whether the workers balance the queues by default (``balancer_options`` apply)."""
        ...

    def queue_mapper(self) -> QueueMapper: ...

    def pubsub_store(self) -> PubSubStore: ...

    def dead_letter_store(self) -> DeadLetterStore: ...

    def queue_balancer(self, options: BalancerOptions | None) -> QueueBalancer | None:
        """A fresh default balancer for one run of a worker; ``None``: read every queue."""
        ...

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The sink of one handoff stream that consumer type ``owner`` declares (the
        provider closes it); ConfigurationError where the backend keeps no handoff log."""
        ...


# The memory backend: queues in this process (memory or generated), pub-sub and dead letters
# in memory, no default balancer (the worker reads every queue) and no handoff log.


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


# A worker's handoff sinks: one per Spark handoff stream that its consumer types declare,
# opened by its backend.


async def open_handoff_sinks(
    backend: Backend, consumer_types: Iterable[type], stack: contextlib.AsyncExitStack
) -> dict[str, spark_sink.HandoffSink]:
    """handoff stream name -> its sink, for every consumer type that declares a handoff
    (checked against its ``event_time``); each sink is closed when ``stack`` is.

    >>> import anyio
    >>> from streams.runtime.backends import MemoryBackend
    >>> async def none_declared():
    ...     async with contextlib.AsyncExitStack() as stack:
    ...         return await open_handoff_sinks(MemoryBackend.open(), [int, str], stack)
    >>> anyio.run(none_declared)
    {}
    """
    types = list(consumer_types)
    if not any(hasattr(cls, "handoff") for cls in types):
        return {}  # nothing hands off: do not load Spark's side (pyspark, pyarrow) at all
    sinks: dict[str, spark_sink.HandoffSink] = {}
    for cls in types:
        handoff = spark_sink.handoff_of(cls)
        if handoff is None:
            continue
        spark_sink.check_handoff(cls, handoff)
        if handoff.stream in sinks:
            continue
        sink = await backend.open_handoff_sink(cls.__qualname__, handoff)
        stack.push_async_callback(sink.close)
        sinks[handoff.stream] = sink
    return sinks


# The embedded backend: queues, checkpoints, pub-sub, dead letters, leases and the handoff
# log all in one SQLite store; the workers sharing the store balance its queues by leases.


class EmbeddedBackend:
    """The embedded store of ``factory`` and what lives beside its queues.

    >>> import tempfile
    >>> backend = EmbeddedBackend.open(tempfile.mkdtemp(), queues=4)
    >>> backend.queue_mapper().queue_count, backend.balances
    (4, True)
    """

    balances = True

    def __init__(self, factory: EmbeddedAdapterFactory) -> None:
        self.factory = factory

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        queues: int | None = None,
        *,
        retention: RetentionPolicy | None = None,
        synchronous: Synchronous = "NORMAL",
    ) -> EmbeddedBackend:
        """The store under ``path`` with ``queues`` queues (made on first use; by default an
        existing store's count, else 8)."""
        return cls(EmbeddedAdapterFactory(path, queues, retention=retention, synchronous=synchronous))

    @property
    def store(self) -> EmbeddedStore:
        return self.factory.store

    def queue_mapper(self) -> HashRingQueueMapper:
        return self.factory.get_queue_mapper()

    def pubsub_store(self) -> EmbeddedPubSubStore:
        return self.factory.create_pubsub_store()

    def dead_letter_store(self) -> EmbeddedDeadLetterStore:
        return self.factory.create_dead_letter_store()

    def queue_balancer(self, options: BalancerOptions | None) -> LeaseBasedQueueBalancer:
        """The balancer of the worker processes sharing this store: lease-based, over
        membership and leases kept in the store; the adapter's checkpoints are fenced by
        those leases. A worker silent for half a lease (and at least three balancing rounds)
        is dead to the others, so its queues move as soon as its leases expire."""
        options = options or BalancerOptions()
        leases = SqliteLeaseProvider(self.store)
        balancer = LeaseBasedQueueBalancer(
            SqliteMembership(self.store, suspicion_timeout=options.suspicion_timeout),
            leases,
            options=options,
        )
        self.factory.fence_with_leases(leases, balancer.get_lease)
        return balancer

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The handoff log in the store (its tables are made here: in a worker thread). The
        queues' retention policy bounds it too (:mod:`spark_sink.retention`)."""
        # Through the package's lazy attribute: pyarrow loads only when something hands off.
        sink: spark_sink.HandoffSink = await anyio.to_thread.run_sync(
            spark_sink.EmbeddedHandoffSink,
            self.store,
            handoff,
            MarkRetention(replay_horizon),
            self.factory.retention,
        )
        return sink


# The Kafka backend: queues on a Kafka topic, the workers members of a Kafka consumer group,
# the handoff log, dead letters and durable subscriptions in Kafka topics (or, with ``store=``,
# pub-sub and dead letters in a store local to this machine).


class KafkaBackend:
    """The topic of ``factory``, and ``store`` (a store on this machine for pub-sub and dead
    letters; ``None``, the default: they live in the cluster, in topics beside the queues).

    >>> backend = KafkaBackend.open("127.0.0.1:9092", "sensors", queues=4)
    >>> backend.queue_mapper().queue_count, backend.store is None
    (4, True)
    """

    balances = True

    def __init__(self, factory: KafkaAdapterFactory, store: EmbeddedStore | None = None) -> None:
        self.factory = factory
        self.store = store

    @classmethod
    def open(
        cls,
        bootstrap_servers: str | Sequence[str],
        topic: str | None = None,
        queues: int = 8,
        *,
        group_id: str = "headrace",
        start: Literal["earliest", "latest"] = "earliest",
        store: str | os.PathLike[str] | None = None,
        records: str | RecordFormat = "headrace",
        namespace: str | None = None,
        key_field: KeyField | None = None,
        topics: Mapping[str, str] | None = None,
        kafka: Mapping[str, Any] | None = None,
    ) -> KafkaBackend:
        """What ``StreamProvider.kafka`` runs on (its arguments, documented there)."""
        if topic is None:
            if not topics:
                raise ConfigurationError("StreamProvider.kafka needs a topic, or topics={namespace: topic}")
            topic = next(iter(topics.values()))
        foreign = {"records": records, "namespace": namespace, "key_field": key_field, "topics": topics}
        settings = {**{k: v for k, v in foreign.items() if v is not None}, **(kafka or {})}
        factory = KafkaAdapterFactory(bootstrap_servers, topic, queues, group_id, start, **settings)
        return cls(factory, None if store is None else EmbeddedStore(store))

    def queue_mapper(self) -> QueueMapper:
        return self.factory.get_queue_mapper()

    def pubsub_store(self) -> PubSubStore:
        """The subscriptions topic (:mod:`streams.kafka.pubsub`), or the local store's table."""
        if self.store is not None:
            return EmbeddedPubSubStore(self.store)
        pubsub = KafkaPubSubStore(self.factory.settings, self.factory.outage)
        self.factory.close_with(pubsub.log)
        return pubsub

    def dead_letter_store(self) -> DeadLetterStore:
        """The dead-letter topic (:mod:`streams.kafka.deadletters`), or the local store's table."""
        if self.store is not None:
            return EmbeddedDeadLetterStore(self.store)
        letters = KafkaDeadLetterStore(self.factory.settings, self.factory.outage)
        self.factory.close_with(letters.log)
        return letters

    def queue_balancer(self, options: BalancerOptions | None) -> KafkaGroupBalancer | None:
        """The workers reading this topic are the members of a Kafka consumer group
        (:func:`~balancer.kafka.group.group_balancer`); ``None`` when ``group_membership``
        is off: each reads everything."""
        return group_balancer(self.factory.settings, options)

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The handoff stream's topics on the cluster (``<handoff_prefix>.handoff.<stream>``)."""
        sink: spark_sink.HandoffSink = await spark_sink.KafkaHandoffSink.open(self.factory.settings, handoff)
        return sink
