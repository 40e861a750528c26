"""What every Kafka client of headrace shares: the cluster, the topic(s) and how they are
read, and the timeouts of riding out an outage (:class:`KafkaSettings`). Its fields are the only
declaration of the Kafka settings: ``StreamProvider.kafka``'s keywords and ``[provider.kafka]``
of the configuration are these names, and the backend and its adapter factory take the
settings whole."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.registry import REGISTRY_FORMATS, RegistryFormat, SchemaRegistry
from streams.core.errors import ConfigurationError, did_you_mean
from streams.core.ids import QueueId, StreamId
from streams.core.records import HEADRACE, RecordFormat, record_format

if TYPE_CHECKING:
    from aiokafka import TopicPartition

Start = Literal["earliest", "latest"]
# What keys a record without a key: a field of its decoded value, or a function of it (a str
# or an int; None: no key, the record is dead-lettered).
KeyField = str | Callable[[Any], object]
# The codecs of Kafka's record batches; aiokafka reads and writes each (with cramjam).
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
COMPRESSIONS: tuple[Compression, ...] = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class KafkaSettings(KafkaConnection):
    """Everything headrace's Kafka clients share: the queue adapter's, the group balancer's
    and the handoff log's.

    How they connect (the address, TLS, SASL, ``client_options`` and ``consumer_options``)
    are the settings of :class:`~streams.backends.kafka.connection.KafkaConnection`, keyword
    arguments here: ``KafkaSettings("broker:9093", "sensors", security_protocol="SSL",
    ssl_cafile="ca.pem")``.

    ``records`` is the topic's record format: ``"headrace"`` (batch containers), or one event
    per record in ``"json"``, ``"msgpack"``, ``"text"``, ``"bytes"`` or a
    :class:`~streams.core.records.RecordFormat`. Such a topic's streams are
    ``StreamId(namespace, record key)`` (``namespace`` defaults to the topic's name;
    ``key_field`` names the value's field that keys records without a key, or is a function
    of the decoded value giving that key). ``topics``
    (namespace -> topic) reads several co-partitioned topics of one format together.

    >>> settings = KafkaSettings("127.0.0.1:9092", "sensors", queues=4)
    >>> settings.server, settings.client_kwargs()["request_timeout_ms"]
    ('Kafka at 127.0.0.1:9092', 5000)

    Queue ``i`` is partition ``i`` of ``topic`` (``queues`` partitions), its offsets committed
    under ``group_id``; with no committed offset a queue starts at ``start``.
    """

    topic: str
    queues: int = 8
    group_id: str = "headrace"
    start: Start = "earliest"
    replication_factor: int = 1  # for a topic the adapter creates
    idempotent: bool = True  # the broker keeps one copy of a record the producer retries
    # How headrace's own producers compress their record batches (readers need nothing:
    # every codec is read whatever this says). See docs/kafka.md for the trade-off.
    compression: Compression = "none"
    commit_interval: float = 1.0  # seconds between offset commits, at most
    poll_timeout: float = 0.1  # how long a fetch waits at the broker for new records (an empty read: two)
    outage_after: float = 3.0  # seconds without a fetch answer before calling it an outage
    give_up_after: float = 60.0  # seconds of failed attempts before an enqueue etc. raises
    # Workers share the partitions through a Kafka consumer group (KafkaGroupBalancer). Off:
    # each worker reads every partition, for a worker known to run alone (it then starts
    # without waiting for the group's first rebalance, a few seconds).
    group_membership: bool = True
    # The group's session timeout, seconds (Kafka's session.timeout.ms): a worker silent this
    # long (SIGKILL, a hung host) is out of the group and its queues move; heartbeats go every
    # third of it. A broker also holds each join for part of it (Tansu: half). Kafka's brokers
    # refuse less than group.min.session.timeout.ms (6 s by default). balancer_options, when
    # given to the provider, set it instead (lease_length; renew_period the heartbeat).
    session_timeout: float = 10.0
    # Topics of the Spark handoff log start with this: <prefix>.handoff.<stream>, ... (the
    # DataSource's topicPrefix option names the same prefix).
    handoff_prefix: str = "headrace"
    # The directory of the workers' local state stores (streams.backends.kafka.changelog):
    # <state_dir>/<changelog topic>/worker-<n>. None: "headrace-state" in the system's
    # temporary directory (Kafka Streams' default is /tmp/kafka-streams); a path that survives
    # a reboot saves the restart after one from reading the whole changelog.
    state_dir: str | os.PathLike[str] | None = None
    # Warm copies of other workers' queues (Kafka Streams' num.standby.replicas): the group
    # leader gives each queue to up to this many other workers as a standby, each of which
    # follows the queue's changelog into its local state store (streams.backends.kafka.standby),
    # so a queue that moves to one of them reads only the changelog's tail. 0: none.
    standby_replicas: int = 0
    # The topic of the dead letters (None: "<topic>.dlq", as Kafka Connect and Spring name it).
    dead_letter_topic: str | None = None
    records: str | RecordFormat = HEADRACE
    # Where the schemas of records="avro", "json_schema" or "protobuf" are: a SchemaRegistry,
    # its settings as a mapping, or its URL.
    schema_registry: SchemaRegistry | Mapping[str, Any] | str | None = None
    # What headrace writes to such a topic with: Avro or JSON Schema as a dict, JSON text or a
    # file's path; Protobuf as a generated message class. Registered under subject (None:
    # "<topic>-value", Confluent's TopicNameStrategy).
    value_schema: Any = None
    subject: str | None = None
    namespace: str | None = None
    key_field: KeyField | None = None
    topics: Mapping[str, str] | None = None  # namespace -> topic
    # The decoded form of records (None: headrace's containers), and topic -> namespace.
    record_format: RecordFormat | None = field(init=False, repr=False, compare=False, default=None)
    namespaces: Mapping[str, str] = field(init=False, repr=False, compare=False, default_factory=dict)

    def _record_format(self) -> RecordFormat | None:
        """The format ``records`` names; a registry's needs ``schema_registry``."""
        registry_format = REGISTRY_FORMATS.get(self.records) if isinstance(self.records, str) else None
        if isinstance(self.records, RegistryFormat) and (self.value_schema is not None or self.subject is not None):
            raise ConfigurationError(f"give value_schema and subject to the format itself: {self.records!r}")
        if registry_format is None:
            for name in ("schema_registry", "value_schema", "subject"):
                if getattr(self, name) is not None and not isinstance(self.records, RegistryFormat):
                    raise ConfigurationError(
                        f"{name} is set but records is {self.records!r}: the registry's formats are "
                        f"{', '.join(map(repr, REGISTRY_FORMATS))}"
                    )
            try:
                return record_format(self.records)
            except ConfigurationError as exc:
                if not isinstance(self.records, str):
                    raise
                raise ConfigurationError(
                    f"{exc} ({', '.join(map(repr, REGISTRY_FORMATS))} with a schema_registry)"
                ) from None
        if self.schema_registry is None:
            raise ConfigurationError(f"records={self.records!r} needs schema_registry (its URL, at least)")
        if self.subject is not None and not (isinstance(self.subject, str) and self.subject):
            raise ConfigurationError(f"subject is a non-empty str, not {self.subject!r}")
        return registry_format(self.schema_registry, self.value_schema, self.subject)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "record_format", self._record_format())
        object.__setattr__(self, "namespaces", self._namespaces())
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"topic is a non-empty str, not {self.topic!r}")
        if not isinstance(self.queues, int) or isinstance(self.queues, bool) or self.queues < 1:
            raise ConfigurationError(f"queues is a positive int, not {self.queues!r}")
        if self.start not in ("earliest", "latest"):
            raise ConfigurationError(f"start is 'earliest' or 'latest', not {self.start!r}")
        if self.compression not in COMPRESSIONS:
            raise ConfigurationError(f"compression is one of {', '.join(COMPRESSIONS)}, not {self.compression!r}")
        if not isinstance(self.handoff_prefix, str) or not self.handoff_prefix:
            raise ConfigurationError(f"handoff_prefix is a non-empty str, not {self.handoff_prefix!r}")
        if self.state_dir is not None and not (
            isinstance(self.state_dir, os.PathLike) or (isinstance(self.state_dir, str) and self.state_dir)
        ):
            raise ConfigurationError(f"state_dir is a directory's path, not {self.state_dir!r}")
        if (
            not isinstance(self.standby_replicas, int)
            or isinstance(self.standby_replicas, bool)
            or self.standby_replicas < 0
        ):
            raise ConfigurationError(
                f"standby_replicas is an int >= 0 (the warm copies of each queue on other workers), "
                f"not {self.standby_replicas!r}"
            )
        if self.dead_letter_topic is not None and not (
            isinstance(self.dead_letter_topic, str) and self.dead_letter_topic
        ):
            raise ConfigurationError(f"dead_letter_topic is a non-empty str, not {self.dead_letter_topic!r}")
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigurationError(f"group_id is a non-empty str, not {self.group_id!r}")
        self._check_durations()

    def _check_durations(self) -> None:
        """The settings in seconds: none negative; the session timeout above 0."""
        for name in (
            "commit_interval",
            "poll_timeout",
            "outage_after",
            "request_timeout",
            "give_up_after",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"{name} is seconds >= 0, not {value!r}")
        timeout = self.session_timeout
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ConfigurationError(
                f"session_timeout is seconds > 0 (how long a silent worker keeps its queues), not {timeout!r}"
            )

    @classmethod
    def named(cls, bootstrap_servers: str | Sequence[str], topic: str | None = None, **settings: Any) -> KafkaSettings:
        """The settings given by name, as ``StreamProvider.kafka`` takes them: ``topic``
        defaults to the first of ``topics``, and a name that is no setting is one clear error.

        >>> KafkaSettings.named("k:9092", topics={"a": "t-a", "b": "t-b"}, records="json").topic
        't-a'
        >>> KafkaSettings.named("k:9092", "t", idempotant=False)
        Traceback (most recent call last):
        ...
        streams.core.errors.ConfigurationError: unknown Kafka setting 'idempotant' (did you mean 'idempotent'?); the settings are queues, group_id, start, ...
        """
        unknown = [name for name in settings if name not in KAFKA_SETTINGS]
        if unknown:
            raise ConfigurationError(
                f"unknown Kafka setting {unknown[0]!r}{did_you_mean(unknown[0], KAFKA_SETTINGS)}; "
                f"the settings are {', '.join(KAFKA_SETTINGS)}"
            )
        if topic is None:
            topics = settings.get("topics")
            if not topics:
                raise ConfigurationError("StreamProvider.kafka needs a topic, or topics={namespace: topic}")
            topic = next(iter(topics.values()))
        return cls(bootstrap_servers, topic, **settings)

    def _namespaces(self) -> dict[str, str]:
        foreign = self.record_format is not None
        for name in ("namespace", "key_field"):
            value = getattr(self, name)
            function = name == "key_field" and callable(value)
            if value is not None and not function and not (isinstance(value, str) and value):
                raise ConfigurationError(
                    f"{name} is a non-empty str{' or a function' * (name == 'key_field')}, not {value!r}"
                )
            if value is not None and not foreign:
                raise ConfigurationError(
                    f"{name} is for topics of one event per record: set records= to their "
                    "format (json, msgpack, text, bytes or a RecordFormat)"
                )
        if self.topics is None:
            namespace = self.namespace or self.topic
            hop = self.repartition_topic
            return {self.topic: namespace} if hop is None else {self.topic: namespace, hop: namespace}
        if not foreign:
            raise ConfigurationError("topics= reads topics of one event per record: set records= to their format")
        if self.key_field is not None:
            raise ConfigurationError(
                "key_field= re-keys the records of one topic (streams.backends.kafka.repartition): "
                "read the topics of topics= with their record keys, or each topic on its own"
            )
        if self.namespace is not None:
            raise ConfigurationError("with topics= each topic's namespace is its key there: drop namespace=")
        topics = dict(self.topics)
        if not topics or not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in topics.items()):
            raise ConfigurationError(f"topics maps namespaces to topic names (non-empty str), not {self.topics!r}")
        if len(set(topics.values())) != len(topics):
            raise ConfigurationError(f"topics names a topic twice: {self.topics!r}")
        if self.topic not in topics.values():
            raise ConfigurationError(f"topic {self.topic!r} is not one of topics= {sorted(topics.values())}")
        return {topic: namespace for namespace, topic in topics.items()}

    @property
    def repartition_topic(self) -> str | None:
        """The topic of the re-keying hop (:mod:`streams.backends.kafka.repartition`) when
        records without a key are keyed by ``key_field``, which queue *i* reads beside
        partition *i* of ``topic``; ``None``: no hop.

        >>> KafkaSettings("k:9092", "readings", records="json", key_field="device").repartition_topic
        'headrace.repartition.readings'
        """
        if self.key_field is None or self.topics is not None:
            return None
        return f"{self.group_id}.repartition.{self.topic}"

    def partitions_of(self, queue: QueueId) -> list[TopicPartition]:
        """What ``queue`` reads: partition ``queue.number`` of each topic, in a fixed order."""
        from aiokafka import TopicPartition  # here: a worker on another backend never imports aiokafka

        self.check_queue(queue)
        return [TopicPartition(topic, queue.number) for topic in self.namespaces]

    def topic_of(self, stream_id: StreamId) -> str:
        """The topic carrying ``stream_id``'s events."""
        if self.topics is None:
            return self.topic
        topic = self.topics.get(stream_id.namespace)
        if topic is None:
            raise ConfigurationError(
                f"no topic carries namespace {stream_id.namespace!r}: topics= has {sorted(self.topics)}"
            )
        return topic

    def producer_kwargs(self) -> dict[str, object]:
        """The settings of every producer of headrace's queues and state: durable
        (``acks="all"``), idempotent unless ``idempotent`` is off, compressed as
        ``compression`` says.

        >>> KafkaSettings("127.0.0.1:9092", "sensors", compression="zstd").producer_kwargs()["compression_type"]
        'zstd'
        """
        return {
            **self.client_kwargs(),
            "acks": "all",
            "enable_idempotence": self.idempotent,
            "compression_type": None if self.compression == "none" else self.compression,
        }

    def check_queue(self, queue: QueueId) -> TopicPartition:
        from aiokafka import TopicPartition

        if not 0 <= queue.number < self.queues:
            raise ConfigurationError(f"{queue} is not one of the {self.queues} queues of Kafka topic {self.topic!r}")
        return TopicPartition(self.topic, queue.number)


# The settings a caller names besides the cluster and the topic, KafkaSettings' own first,
# then the connection's: StreamProvider.kafka's keywords and the keys of [provider.kafka].
_CONNECTION = tuple(f.name for f in fields(KafkaConnection) if f.init and f.name != "bootstrap_servers")
KAFKA_SETTINGS: tuple[str, ...] = (
    *(f.name for f in fields(KafkaSettings) if f.init and f.name not in (*_CONNECTION, "bootstrap_servers", "topic")),
    *_CONNECTION,
)
