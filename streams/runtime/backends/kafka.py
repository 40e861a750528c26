"""The Kafka backend: queues on a Kafka topic, the workers members of a Kafka consumer group,
the handoff log, dead letters and durable subscriptions in Kafka topics (or, with ``store=``,
pub-sub and dead letters in a store local to this machine)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import spark_sink
from balancer.base import BalancerOptions
from balancer.kafka.group import KafkaGroupBalancer, group_balancer
from streams.adapters.protocols import QueueMapper
from streams.core.deadletters import DeadLetterStore
from streams.core.errors import ConfigurationError
from streams.core.pubsub import PubSubStore
from streams.core.records import RecordFormat
from streams.embedded.deadletters import EmbeddedDeadLetterStore
from streams.embedded.pubsub import EmbeddedPubSubStore
from streams.embedded.store import EmbeddedStore
from streams.kafka.adapter import KafkaAdapterFactory
from streams.kafka.deadletters import KafkaDeadLetterStore
from streams.kafka.pubsub import KafkaPubSubStore
from streams.kafka.settings import KeyField


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
