"""The Kafka backend: queues on a Kafka topic, the workers members of a Kafka consumer group, the
handoff log, dead letters, durable subscriptions, saved state and the workers' status in Kafka
topics. (A store on this machine for pub-sub, dead letters and status instead is the runtime's
:class:`~streams.runtime.backends.LocalStoreBeside`.)"""

from __future__ import annotations

import spark_sink
from balancer.base import BalancerOptions
from streams.adapters.protocols import QueueMapper, SavedStateRow
from streams.adapters.status import ClusterStatus
from streams.backends.kafka.adapter import KafkaAdapterFactory
from streams.backends.kafka.balancer import KafkaGroupBalancer, group_balancer
from streams.backends.kafka.changelog import KafkaChangelog, OpenLocalStates
from streams.backends.kafka.clients import check_reachable, kafka_outage_log
from streams.backends.kafka.deadletters import KafkaDeadLetterStore
from streams.backends.kafka.pubsub import KafkaPubSubStore
from streams.backends.kafka.retained import KafkaRecords
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.standby import StandbyReplicas
from streams.backends.kafka.status import KafkaStatusBoard, read_kafka_status
from streams.core.deadletters import DeadLetterStore
from streams.core.ids import QueueId
from streams.core.pubsub import PubSubStore


class KafkaBackend:
    """The topic of ``factory``, and the topics beside it.

    >>> backend = KafkaBackend.open(KafkaSettings("127.0.0.1:9092", "sensors", queues=4))
    >>> backend.queue_mapper().queue_count, backend.store is None
    (4, True)
    """

    balances = True
    store = None  # everything lives in the cluster
    position_names = ("partition", "offset")
    durable = True

    def __init__(self, factory: KafkaAdapterFactory) -> None:
        self.factory = factory

    @property
    def cluster_away(self) -> bool:
        return self.factory.outage.ongoing

    @classmethod
    def open(cls, settings: KafkaSettings, open_local: OpenLocalStates | None = None) -> KafkaBackend:
        """What ``StreamProvider.kafka`` runs on: the topic and the topics beside it that
        ``settings`` name; its workers keep a local state store opened by ``open_local``
        (:mod:`~streams.backends.kafka.changelog`)."""
        return cls(KafkaAdapterFactory(settings, open_local))

    def queue_mapper(self) -> QueueMapper:
        return self.factory.get_queue_mapper()

    def pubsub_store(self) -> PubSubStore:
        """The subscriptions topic (:mod:`streams.backends.kafka.pubsub`)."""
        pubsub = KafkaPubSubStore(self.factory.settings, self.factory.outage)
        self.factory.close_with(pubsub.log)
        return pubsub

    def dead_letter_store(self) -> DeadLetterStore:
        """The dead-letter topic (:mod:`streams.backends.kafka.deadletters`)."""
        letters = KafkaDeadLetterStore(self.factory.settings, self.factory.outage)
        self.factory.close_with(letters.log)
        return letters

    def dead_letter_archive(self) -> KafkaDeadLetterStore:
        """The dead-letter topic, read by a store of its own (the caller closes it)."""
        return KafkaDeadLetterStore(self.factory.settings, self.factory.outage)

    async def check_reachable(self, within: float) -> None:
        await check_reachable(self.factory.settings, within)

    def queue_balancer(self, options: BalancerOptions | None) -> KafkaGroupBalancer | None:
        """The workers reading this topic are the members of a Kafka consumer group
        (:func:`~streams.backends.kafka.balancer.group_balancer`); ``None`` when ``group_membership``
        is off: each reads everything. With ``standby_replicas`` and a local state store, the
        worker keeps standby copies too (:mod:`~streams.backends.kafka.standby`)."""
        settings, changelog = self.factory.settings, self.factory.changelog
        keeps = settings.standby_replicas > 0 and changelog.open_local is not None
        # The local state store is opened (and checked) while the join waits, not after it.
        warm_up = changelog.local_states if changelog.open_local is not None else None
        # The same store keeps this worker's membership, to rejoin as itself after a crash.
        return group_balancer(settings, options, StandbyReplicas(changelog) if keeps else None, warm_up, warm_up)

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The handoff stream's topics on the cluster (``<handoff_prefix>.handoff.<stream>``)."""
        from streams.backends.kafka.handoff_sink import KafkaHandoffSink  # pyarrow only when something hands off

        sink: spark_sink.HandoffSink = await KafkaHandoffSink.open(self.factory.settings, handoff)
        return sink

    def status_board(self) -> KafkaStatusBoard:
        """The cluster's status topic (:mod:`streams.backends.kafka.status`)."""
        board = KafkaStatusBoard(self.factory.settings, self.factory.outage)
        self.factory.close_with(board)
        return board

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus:
        return await read_kafka_status(self.factory.settings, suspicion_timeout=suspicion_timeout, everyone=everyone)

    async def saved_states(self) -> list[SavedStateRow]:
        """Every queue's newest states in the state changelog."""
        settings = self.factory.settings
        changelog = KafkaChangelog(settings, kafka_outage_log(settings))
        found: list[SavedStateRow] = []
        try:
            for number in range(settings.queues):
                saved = await changelog.load(QueueId(number))
                found += [(number, c, s, position, state) for (c, s), (position, state) in saved.items()]
        finally:
            await changelog.close()
        return sorted(found, key=lambda row: (row[1], row[2]))

    async def retained_records(self) -> KafkaRecords:
        return await KafkaRecords.read(self.factory.settings)
