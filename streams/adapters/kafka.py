"""The Kafka adapter: the queues are the partitions of one Kafka topic (at scale).

Queue ``i`` is partition ``i``. The producer writes each batch container to the partition of
its stream's queue, as the :class:`~balancer.mapper.HashRingQueueMapper` decides (the stream
id is the record key too, for Kafka's own tools). A receiver reads the one partition its
pulling agent owns, by explicit assignment: headrace's balancer decides who reads what, not
Kafka's group protocol. The group id serves only to keep offsets in Kafka: the receiver
commits the offset after the last record every consumer has finished with (at most every
``commit_interval`` seconds, and on shutdown, which is also what happens when the queue
moves to another worker), and resumes there. With no committed offset it starts at the
oldest retained record or at the end (``start``). Records stay in Kafka after they are
read, within the topic's retention, so any retained offset can be read again (rewind).

When the broker goes away, producers and receivers back off and retry, the adapter logs the
outage once when it starts and once when it ends, and reading resumes where it was.

Example (with a broker at 127.0.0.1:9092)::

    async with KafkaAdapterFactory("127.0.0.1:9092", "sensors", queues=4) as factory:
        adapter = await factory.create_adapter()
        sid = StreamId("sensors", "s-1")
        queue = factory.get_queue_mapper().get_queue_for_stream(sid)
        payload = BatchContainer(sid, BatchKind.DATA, time.time(), [1, 2]).encode()
        await adapter.queue_message_batch(queue, sid, payload)
        receiver = adapter.create_receiver(queue)
        await receiver.initialize()
        [message] = await receiver.get_queue_messages(10)  # offset, raw bytes, timestamp
        await receiver.messages_delivered([message.token])  # committed within a second
        await receiver.shutdown()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError, for_code

from balancer.mapper import HashRingQueueMapper, KafkaPartitionMapper

if TYPE_CHECKING:  # the balancer imports this module
    from balancer.base import BalancerOptions
    from balancer.kafka_group import KafkaGroupBalancer

from ..batch import BatchContainer, BatchKind, QueueMessage, encode_batch
from ..errors import ConfigurationError, EncodeError, QueueAdapterError
from ..ids import QueueId, StreamId
from ..tokens import SequenceToken
from .kafka_records import ContainerRecords, GroupedRecords, RecordReader
from .outage import Backoff, OutageLog, retry_transient
from .records import HEADRACE, RecordFormat, record_format

log = logging.getLogger("headrace.kafka")

T = TypeVar("T")
Start = Literal["earliest", "latest"]
_Record = tuple[str, int, bytes, bytes, int | None]  # topic, partition, key, value, timestamp ms


def is_transient(exc: BaseException) -> bool:
    """Whether retrying may help: the broker unreachable, a leader moving, a timeout."""
    if isinstance(exc, KafkaTimeoutError):  # aiokafka marks it final; an outage causes it
        return True
    return isinstance(exc, (KafkaError, OSError)) and getattr(exc, "retriable", True)


async def _retry(
    operation: Callable[[], Awaitable[T]],
    what: str,
    settings: KafkaSettings,
    outage: OutageLog,
    attempt_timeout: float | None = None,
) -> T:
    """``operation``, retried while the cluster is unreachable, for up to ``give_up_after``."""
    return await retry_transient(
        operation,
        what=what,
        outage=outage,
        is_transient=is_transient,
        give_up_after=settings.give_up_after,
        attempt_timeout=attempt_timeout,
    )


@dataclass(frozen=True)
class KafkaSettings:
    """Everything the Kafka adapter's clients share.

    ``client_options`` go to every aiokafka client (producer, consumers, admin): the
    connection and security settings of a real cluster, e.g. ``security_protocol``,
    ``ssl_context``, ``sasl_mechanism``, ``sasl_plain_username``, ``client_id``.

    ``records`` is the topic's record format: ``"headrace"`` (batch containers), or one event
    per record in ``"json"``, ``"msgpack"``, ``"text"``, ``"bytes"`` or a
    :class:`~streams.adapters.records.RecordFormat`. Such a topic's streams are
    ``StreamId(namespace, record key)`` (``namespace`` defaults to the topic's name;
    ``key_field`` names the value's field that keys records without a key). ``topics``
    (namespace -> topic) reads several co-partitioned topics of one format together.
    """

    bootstrap_servers: str | Sequence[str]
    topic: str
    queues: int = 8
    group_id: str = "headrace"
    start: Start = "earliest"
    replication_factor: int = 1  # for a topic the adapter creates
    idempotent: bool = True  # the broker keeps one copy of a record the producer retries
    commit_interval: float = 1.0  # seconds between offset commits, at most
    poll_timeout: float = 0.1  # how long an empty read waits for new records
    outage_after: float = 3.0  # seconds without a fetch answer before calling it an outage
    request_timeout: float = 5.0  # one attempt of a request to the broker
    give_up_after: float = 60.0  # seconds of failed attempts before an enqueue etc. raises
    # Workers share the partitions through a Kafka consumer group (KafkaGroupBalancer). Off:
    # each worker reads every partition, for a worker known to run alone (it then starts
    # without waiting for the group's first rebalance, a few seconds).
    group_membership: bool = True
    # Topics of the Spark handoff log start with this: <prefix>.handoff.<stream>, ... (the
    # DataSource's topicPrefix option names the same prefix).
    handoff_prefix: str = "headrace"
    client_options: Mapping[str, Any] = field(default_factory=dict)
    records: str | RecordFormat = HEADRACE
    namespace: str | None = None
    key_field: str | None = None
    topics: Mapping[str, str] | None = None  # namespace -> topic
    # The decoded form of records (None: headrace's containers), and topic -> namespace.
    record_format: RecordFormat | None = field(init=False, repr=False, compare=False, default=None)
    namespaces: Mapping[str, str] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "record_format", record_format(self.records))
        object.__setattr__(self, "namespaces", self._namespaces())
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"topic is a non-empty str, not {self.topic!r}")
        if not isinstance(self.queues, int) or isinstance(self.queues, bool) or self.queues < 1:
            raise ConfigurationError(f"queues is a positive int, not {self.queues!r}")
        if self.start not in ("earliest", "latest"):
            raise ConfigurationError(f"start is 'earliest' or 'latest', not {self.start!r}")
        if not isinstance(self.handoff_prefix, str) or not self.handoff_prefix:
            raise ConfigurationError(f"handoff_prefix is a non-empty str, not {self.handoff_prefix!r}")
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigurationError(f"group_id is a non-empty str, not {self.group_id!r}")
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

    def _namespaces(self) -> dict[str, str]:
        foreign = self.record_format is not None
        for name in ("namespace", "key_field"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value):
                raise ConfigurationError(f"{name} is a non-empty str, not {value!r}")
            if value is not None and not foreign:
                raise ConfigurationError(
                    f"{name} is for topics of one event per record: set records= to their "
                    "format (json, msgpack, text, bytes or a RecordFormat)"
                )
        if self.topics is None:
            return {self.topic: self.namespace or self.topic}
        if not foreign:
            raise ConfigurationError(
                "topics= reads topics of one event per record: set records= to their format"
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

    def partitions_of(self, queue: QueueId) -> list[TopicPartition]:
        """What ``queue`` reads: partition ``queue.number`` of each topic, in a fixed order."""
        self.check_queue(queue)
        return [TopicPartition(topic, queue.number) for topic in self.namespaces]

    def topic_of(self, stream_id: StreamId) -> str:
        """The topic carrying ``stream_id``'s events."""
        if self.topics is None:
            return self.topic
        topic = self.topics.get(stream_id.namespace)
        if topic is None:
            raise ConfigurationError(
                f"no topic carries namespace {stream_id.namespace!r}: topics= has "
                f"{sorted(self.topics)}"
            )
        return topic

    @property
    def server(self) -> str:
        """How log lines and errors name the cluster."""
        servers = self.bootstrap_servers
        return f"Kafka at {servers if isinstance(servers, str) else ','.join(servers)}"

    def client_kwargs(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "request_timeout_ms": int(self.request_timeout * 1000),
            **self.client_options,
        }

    def check_queue(self, queue: QueueId) -> TopicPartition:
        if not 0 <= queue.number < self.queues:
            raise ConfigurationError(
                f"{queue} is not one of the {self.queues} queues of Kafka topic {self.topic!r}"
            )
        return TopicPartition(self.topic, queue.number)


# aiokafka's loggers that log each failed attempt to reach a broker, at WARNING or ERROR
# (tens a second); the outage log reports the outage once instead. The fetcher's failed
# fetches are retried by its own loop, and come before any call of ours has failed.
AIOKAFKA_CONNECTION_LOGGERS = ("aiokafka", "aiokafka.conn", "aiokafka.consumer.fetcher")


def _new_outage_log(settings: KafkaSettings) -> OutageLog:
    return OutageLog(settings.server, log, "aiokafka", AIOKAFKA_CONNECTION_LOGGERS)


class KafkaQueueAdapter:
    """Producer side of the Kafka queues, and maker of their receivers.

    Records are sent with ``acks="all"``, by an idempotent producer unless ``idempotent``
    is off (for brokers without it, such as Tansu's memory storage); concurrent
    :meth:`queue_message_batch` calls travel together in one request per partition, and
    :meth:`queue_message_batches` sends many at once. Both return once Kafka has the records.
    A send that fails because the broker is unreachable is retried (with back-off) for up to
    ``give_up_after`` seconds, then raises :class:`QueueAdapterError`; a record whose first
    send reached Kafka before the failure may then be stored twice (at least once).
    """

    name = "kafka"
    is_rewindable = True

    def __init__(self, settings: KafkaSettings, outage: OutageLog | None = None) -> None:
        self.settings = settings
        self.outage = outage if outage is not None else _new_outage_log(settings)
        self._producer: AIOKafkaProducer | None = None
        self._starting = anyio.Lock()

    async def start(self) -> None:
        """Connect the producer (retrying while the broker is unreachable)."""
        if self._producer is not None:
            return
        async with self._starting:  # concurrent first sends share one producer
            if self._producer is None:
                self._producer = await _retry(
                    self._start_producer, "starting the Kafka producer", self.settings, self.outage
                )

    async def _start_producer(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            **self.settings.client_kwargs(),
            acks="all",
            enable_idempotence=self.settings.idempotent,
            linger_ms=2,
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return producer

    async def queue_message_batch(
        self, queue: QueueId, stream_id: StreamId, payload: bytes
    ) -> None:
        """Durably enqueue one encoded batch container on ``queue``'s partition."""
        await self.queue_message_batches([(queue, stream_id, payload)])

    async def queue_message_batches(self, items: Sequence[tuple[QueueId, StreamId, bytes]]) -> None:
        """Durably enqueue many encoded batch containers, in order, in as few requests as
        Kafka allows: ``await adapter.queue_message_batches([(q, sid, a), (q, sid, b)])``."""
        if self.settings.record_format is None:
            topic = self.settings.topic
            records: list[_Record] = [
                (topic, self.settings.check_queue(queue).partition, str(stream_id).encode(), bytes(payload), None)
                for queue, stream_id, payload in items
            ]
        else:
            records = [r for item in items for r in self._foreign_records(*item)]
        await self._send_all(records)

    def _foreign_records(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> list[_Record]:
        """The records of the container ``payload`` on a topic of another format."""
        container = BatchContainer.decode(payload)
        return self.encode_events(queue, stream_id, container.kind, container.values, container.event_times)

    def encode_events(
        self,
        queue: QueueId,
        stream_id: StreamId,
        kind: BatchKind,
        values: Sequence[Any],
        times: Sequence[float | None] | None,
    ) -> list[_Record]:
        """The records carrying these events of ``stream_id``: one batch container, or on a
        topic of another format one record per event, keyed by the stream key, with a
        given event time as the record's timestamp (which readers take as its arrival)."""
        settings = self.settings
        partition = settings.check_queue(queue).partition
        fmt = settings.record_format
        if fmt is None:
            payload = encode_batch(stream_id, kind, time.time(), values, times)
            return [(settings.topic, partition, str(stream_id).encode(), payload, None)]
        if kind is not BatchKind.DATA:
            raise EncodeError(
                f"{stream_id}: a topic of {fmt.name} records carries events only; "
                "punctuation and completion need headrace's format (records='headrace')"
            )
        try:
            topic = settings.topic_of(stream_id)
        except ConfigurationError as exc:
            raise EncodeError(str(exc)) from None
        key = stream_id.key.encode()
        try:
            encoded = [fmt.encode(v) for v in values]
        except Exception as exc:  # the format's own errors: any type
            raise EncodeError(
                f"cannot encode a value for stream {stream_id} as {fmt.name}: {exc}; nothing was enqueued"
            ) from None
        if times is None:
            return [(topic, partition, key, value, None) for value in encoded]
        return [
            (topic, partition, key, value, None if t is None else int(t * 1000))
            for value, t in zip(encoded, times, strict=True)
        ]

    async def _send_all(self, records: list[_Record]) -> None:
        """Send ``records`` in order, retrying what the broker did not take (see _send)."""
        await self.start()
        pending: list[_Record] = records
        began = time.monotonic()
        backoff = Backoff()
        while pending:
            pending = await self._send(pending)
            if pending:
                waited = time.monotonic() - began
                if waited >= self.settings.give_up_after:
                    raise QueueAdapterError(
                        f"{len(pending)} of {len(records)} records were not enqueued: "
                        f"{self.settings.server} has been unreachable for {waited:.0f} s; "
                        "check that it is running and reachable from here"
                    )
                await anyio.sleep(backoff.next())

    async def _send(self, records: list[_Record]) -> list[_Record]:
        """Send ``records``; return those to send again because the broker was unreachable.

        To keep each partition in order, a partition's records are sent again from its first
        failed one on, even those after it that did get through (duplicates, not disorder).
        """
        assert self._producer is not None
        began = time.monotonic()
        sending: list[asyncio.Future[Any]] = []
        refused: BaseException | None = None  # send() itself failed: later records wait too
        for topic, partition, key, value, timestamp in records:
            try:
                sending.append(
                    await self._producer.send(
                        topic, value, key=key, partition=partition, timestamp_ms=timestamp
                    )
                )
            except Exception as exc:  # sorted below
                refused = exc
                break
        results: list[Any] = await asyncio.gather(*sending, return_exceptions=True)
        results += [refused] * (len(records) - len(results))
        # (topic, partition) -> index of its first failed record
        failed_from: dict[tuple[str, int], int] = {}
        for index, (record, result) in enumerate(zip(records, results, strict=True)):
            if not isinstance(result, BaseException):
                continue
            topic, partition = record[0], record[1]
            if not is_transient(result):
                raise QueueAdapterError(
                    f"Kafka refused a record for topic {topic!r} partition {partition}: {result}"
                ) from result
            self.outage.failed(f"{type(result).__name__}: {result}".rstrip(": "), since=began)
            failed_from.setdefault((topic, partition), index)
        if not failed_from:
            self.outage.recovered()
        end = len(records)
        return [r for i, r in enumerate(records) if i >= failed_from.get((r[0], r[1]), end)]

    def event_writer(self) -> _KafkaEventWriter:
        """How the provider's publisher writes events here (see streams.publisher)."""
        return _KafkaEventWriter(self)

    def create_receiver(self, queue: QueueId) -> KafkaQueueReceiver:
        if self.settings.record_format is not None:
            return KafkaRecordReceiver(self.settings, queue, self.outage)
        return KafkaQueueReceiver(self.settings, queue, self.outage)

    async def close(self) -> None:
        """Send what is still buffered and disconnect the producer."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()


class _KafkaEventWriter:
    """The publisher's writer for Kafka: :meth:`KafkaQueueAdapter.encode_events`, then
    all the records of a write sent at once (in order, retried as one)."""

    def __init__(self, adapter: KafkaQueueAdapter) -> None:
        self.encode = adapter.encode_events
        self.write = adapter._send_all


class KafkaQueueReceiver:
    """Reads one partition for the pulling agent that owns the queue.

    ``initialize`` places the read position after the group's committed offset, or at the
    configured start. ``get_queue_messages`` returns ``[]`` only once a fetch answered after
    the call began shows nothing more to read (so an empty answer means "caught up", not "a
    fetch is still on its way"), or while the broker is unreachable, after a back-off.
    Acknowledged positions are committed to Kafka at most every ``commit_interval`` seconds
    (also from ``get_queue_messages``, so an idle queue's last acknowledgement is not left
    behind) and on :meth:`shutdown`; after a crash, the records acknowledged since the last
    commit are read again (at least once). ``read_range`` reads history with a separate
    consumer, leaving the read position where it is.
    """

    def __init__(self, settings: KafkaSettings, queue: QueueId, outage: OutageLog) -> None:
        self.queue = queue
        self.settings = settings
        self.outage = outage
        self._partitions = settings.partitions_of(queue)  # one per topic
        self._partition = self._partitions[0]
        fmt = settings.record_format
        self._reader: RecordReader = (
            ContainerRecords(queue, self._partition)
            if fmt is None
            else GroupedRecords(queue, self._partitions, settings.namespaces, fmt, settings.key_field)
        )
        self._consumer: AIOKafkaConsumer | None = None
        self._rewinder: AIOKafkaConsumer | None = None  # for read_range, made when first needed
        # Per partition: the offset after what is acknowledged, and the same as committed.
        self._acknowledged: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._last_commit = float("-inf")
        self._waiting_since: float | None = None  # wall-clock ms: an empty read began waiting
        self._backoff = Backoff()

    @property
    def committed_offset(self) -> int | None:
        """The offset this receiver last committed (the next record to read after a restart)."""
        return self._committed.get(self._partition)

    async def initialize(self) -> None:
        """Connect, and place the read position after the committed offset (or at the
        configured start when the group has none for this partition)."""
        consumer = await self._retry(
            lambda: self._open_consumer(self.settings.group_id), f"reading {self.queue}"
        )
        self._consumer = consumer
        positions = {tp: await self._start_position(consumer, tp) for tp in self._partitions}
        self._reader.start(positions)

    async def _start_position(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
        """Seek ``tp`` to where reading resumes, and note its committed offset."""
        committed = await self._retry(
            lambda: consumer.committed(tp), f"reading {self.queue}'s committed offset"
        )
        first, end = await self._bounds(consumer, tp)
        if committed is None:
            position = first if self.settings.start == "earliest" else end
        elif committed < first:
            log.warning(
                "%s: committed offset %d is older than the oldest retained record %d; records "
                "%d..%d were removed by the topic's retention before they were read",
                self.queue,
                committed,
                first,
                committed,
                first - 1,
            )
            position = first
        elif committed > end:
            log.warning(
                "%s: committed offset %d is past the end of the partition (%d): the topic was "
                "recreated? reading from the oldest retained record %d",
                self.queue,
                committed,
                end,
                first,
            )
            position = first
        else:
            position = committed
        consumer.seek(tp, position)
        if committed is not None:
            self._committed[tp] = self._acknowledged[tp] = committed
        return position

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        if max_count <= 0:
            return []
        consumer = self._require_consumer()
        await self._commit_if_due()
        tps = self._partitions
        if self._waiting_since is None:
            self._waiting_since = time.time() * 1000
        began = time.monotonic()
        while time.monotonic() - began < self.settings.outage_after:
            try:
                batch = await consumer.getmany(
                    *tps, timeout_ms=int(self.settings.poll_timeout * 1000), max_records=max_count
                )
            except KafkaError as exc:
                if not is_transient(exc):
                    raise QueueAdapterError(
                        f"reading {self.queue} from Kafka failed: {exc}"
                    ) from exc
                await self._back_off(f"{type(exc).__name__}: {exc}", since=began)
                return []
            if batch:
                self._answered()
                return self._reader.messages(batch)
            since = self._waiting_since
            answered = [consumer.last_poll_timestamp(tp) for tp in tps]
            silent = time.time() - since / 1000
            if all(a is not None and a >= since for a in answered):
                self._answered()
                if await self._caught_up(consumer):
                    return []  # caught up with what the partitions held at those answers
                self._waiting_since = time.time() * 1000  # more to come: wait for it
            elif silent >= self.settings.outage_after:
                reason = f"no fetch answer for {self.queue} in {silent:.1f} s"
                await self._back_off(reason, since=time.monotonic() - silent)
                return []
        return []  # answers keep coming, records not yet: the agent asks again

    async def _caught_up(self, consumer: AIOKafkaConsumer) -> bool:
        for tp in self._partitions:
            highwater = consumer.highwater(tp)
            if highwater is not None and await consumer.position(tp) < highwater:
                return False
        return True

    def _answered(self) -> None:
        """A fetch answered: the broker is reachable."""
        self._waiting_since = None
        self._backoff.reset()
        self.outage.recovered()

    async def _back_off(self, reason: str, since: float) -> None:
        """The broker did not answer: report it, and wait before the agent asks again."""
        self.outage.failed(reason, since=since)
        await anyio.sleep(self._backoff.next())

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        if not tokens:
            return
        acknowledged = self._acknowledged
        for tp, offset in self._reader.acknowledged(max(t.sequence_number for t in tokens)).items():
            if offset > acknowledged.get(tp, -1):
                acknowledged[tp] = offset
        await self._commit_if_due()

    async def _commit_if_due(self) -> None:
        if time.monotonic() - self._last_commit >= self.settings.commit_interval:
            await self._commit()

    async def _commit(self) -> bool:
        """Commit the acknowledged position; ``False`` if the broker could not be reached
        (the position stays pending and is committed on a later try)."""
        committed = self._committed
        offsets = {tp: o for tp, o in self._acknowledged.items() if committed.get(tp) != o}
        if not offsets or self._consumer is None:
            return True
        self._last_commit = began = time.monotonic()
        try:
            with anyio.fail_after(self.settings.request_timeout):
                await self._consumer.commit(offsets)
        except Exception as exc:  # sorted into transient and not just below
            if not (isinstance(exc, TimeoutError) or is_transient(exc)):
                raise QueueAdapterError(
                    f"Kafka refused the offset commit of {self.queue} for group "
                    f"{self.settings.group_id!r} ({type(exc).__name__}); headrace assigns "
                    "partitions itself, so its group id must not be used by consumers that "
                    "join the group: give headrace a group_id of its own"
                ) from exc
            reason = f"offset commit: {type(exc).__name__}: {exc}".rstrip(": ")
            self.outage.failed(reason, since=began)
            return False
        committed.update(offsets)
        self.outage.recovered()
        return True

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        """Up to ``max_count`` records from offset ``start_sequence`` (or the oldest retained
        one after it), without moving the read position: rewinds and cursor catch-up."""
        if max_count <= 0:
            return []
        if self._rewinder is None:
            self._rewinder = await self._retry(
                lambda: self._open_consumer(None), f"rewinding {self.queue}"
            )
        rewinder: AIOKafkaConsumer = self._rewinder
        tp = self._partition
        first, end = await self._bounds(rewinder, tp)
        offset = max(start_sequence, first)
        if offset >= end:
            return []
        rewinder.seek(tp, offset)
        out: list[QueueMessage] = []
        with anyio.move_on_after(self.settings.give_up_after) as scope:
            while len(out) < max_count and (not out or out[-1].sequence_number < end - 1):
                batch = await rewinder.getmany(
                    tp,
                    timeout_ms=int(self.settings.poll_timeout * 1000),
                    max_records=max_count - len(out),
                )
                out.extend(self._reader.messages(batch))
                if not batch and await rewinder.position(tp) >= end:
                    break  # the last offsets before the end hold no records (compaction)
        if scope.cancelled_caught:
            raise QueueAdapterError(
                f"rewinding {self.queue} to offset {offset} failed: no answer from "
                f"{self.settings.server} within {self.settings.give_up_after:.0f} s"
            )
        return out

    async def shutdown(self) -> None:
        """Commit the last acknowledged position and disconnect.

        A commit that fails here is logged, not raised: the queue is being let go either
        way, and the records after the last committed offset will be read again.
        """
        try:
            if self._consumer is not None and not await self._commit():
                log.warning(
                    "%s: offset %s (after the last acknowledged record) was not committed: "
                    "%s is unreachable; records from offset %s on will be read again",
                    self.queue,
                    self._offsets(self._acknowledged),
                    self.settings.server,
                    self._offsets(self._committed),
                )
        except QueueAdapterError as exc:
            log.error(
                "%s: %s; records from offset %s on will be read again",
                self.queue,
                exc,
                self._offsets(self._committed),
            )
        finally:
            consumers = [c for c in (self._consumer, self._rewinder) if c is not None]
            self._consumer = self._rewinder = None
            for consumer in consumers:
                with anyio.move_on_after(self.settings.request_timeout):
                    await consumer.stop()

    async def _open_consumer(self, group_id: str | None) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self.settings.client_kwargs(),
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # an offset lost to retention: the oldest retained
            fetch_max_wait_ms=int(self.settings.poll_timeout * 1000),
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        consumer.assign(self._partitions)
        return consumer

    def _offsets(self, offsets: Mapping[TopicPartition, int]) -> str:
        """How log lines name a queue's offsets: one number, or one per topic."""
        if self.settings.topics is None:
            return str(offsets.get(self._partition))
        return ", ".join(f"{tp.topic}: {offsets.get(tp)}" for tp in self._partitions)

    async def _bounds(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int]:
        """The oldest retained offset of ``tp`` and the offset its next record will get."""

        async def fetch() -> tuple[int, int]:
            first = await consumer.beginning_offsets([tp])
            end = await consumer.end_offsets([tp])
            return first[tp], end[tp]

        return await self._retry(fetch, f"reading the bounds of {self.queue}")

    def _require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise QueueAdapterError(
                f"the receiver of {self.queue} is not initialized (call initialize())"
            )
        return self._consumer

    async def _retry(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        return await _retry(
            operation, what, self.settings, self.outage, self.settings.request_timeout
        )


class KafkaRecordReceiver(KafkaQueueReceiver):
    """The receiver of topics of one event per record: it hands the pulling agent one batch
    per stream and read (see :mod:`~streams.adapters.kafka_records`). Its positions are
    those of its reads' groupings, which a re-read would not reproduce: it does not rewind
    (so it is no :class:`~streams.adapters.protocols.RewindableReceiver`)."""

    read_range = None  # type: ignore[assignment]


class KafkaAdapterFactory:
    """The Kafka topic ``topic`` with ``queues`` partitions: the adapter and its queue mapper.

    :meth:`create_adapter` creates the topic (``replication_factor`` replicas) when it does
    not exist, and refuses one whose partition count is not ``queues`` (the count decides
    which queue carries each stream, so every process must agree on it). Other keyword
    arguments are :class:`KafkaSettings` fields.

    >>> factory = KafkaAdapterFactory("127.0.0.1:9092", "sensors", queues=4, start="latest")
    >>> factory.get_queue_mapper().queue_count, factory.settings.group_id
    (4, 'headrace')
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topic: str,
        queues: int = 8,
        group_id: str = "headrace",
        start: Start = "earliest",
        **settings: Any,
    ) -> None:
        try:
            self.settings = KafkaSettings(
                bootstrap_servers, topic, queues, group_id, start, **settings
            )
        except TypeError as exc:  # an unknown keyword argument
            raise ConfigurationError(f"KafkaAdapterFactory: {exc}") from None
        self._mapper: HashRingQueueMapper | KafkaPartitionMapper = (
            HashRingQueueMapper(queues)
            if self.settings.record_format is None
            else KafkaPartitionMapper(queues)  # where any Kafka producer puts a key
        )
        self._adapter = KafkaQueueAdapter(self.settings)
        self._topic_checked = False

    async def create_adapter(self) -> KafkaQueueAdapter:
        """The adapter (the same one on every call), once the topic is known to be right."""
        if not self._topic_checked:
            what = f"checking Kafka topic(s) {', '.join(map(repr, self.settings.namespaces))}"
            await _retry(self._ensure_topic, what, self.settings, self._adapter.outage)
            self._topic_checked = True
        await self._adapter.start()
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper | KafkaPartitionMapper:
        return self._mapper

    def create_queue_balancer(self, options: BalancerOptions | None = None) -> KafkaGroupBalancer | None:
        """The balancer of the workers reading this topic: they are the members of a Kafka
        consumer group, so one worker alone reads every partition and several share them
        (:class:`~balancer.kafka_group.KafkaGroupBalancer`). ``options.lease_length`` is the
        group's session timeout (how soon a dead worker's queues move), its heartbeat comes
        every ``renew_period`` (at most a third of that) and it checks on the group every
        ``refresh_period``. ``None`` when ``group_membership`` is off: read everything."""
        if not self.settings.group_membership:
            return None
        from balancer.kafka_group import KafkaGroupBalancer

        if options is None:
            return KafkaGroupBalancer(self.settings)
        return KafkaGroupBalancer(
            self.settings,
            session_timeout=options.lease_length,
            heartbeat_interval=min(options.renew_period, options.lease_length / 3),
            poll_period=options.refresh_period,
        )

    async def _ensure_topic(self) -> None:
        settings = self.settings
        counts = {
            topic: await ensure_topic(
                settings.client_kwargs(), topic, settings.queues, settings.replication_factor
            )
            for topic in settings.namespaces
        }
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{topic!r} has {n}" for topic, n in counts.items())
            raise ConfigurationError(
                f"topics read together must have as many partitions each (queue i reads "
                f"partition i of every topic): {listed}"
            )
        for topic, partitions in counts.items():
            if partitions != settings.queues:
                raise ConfigurationError(
                    f"Kafka topic {topic!r} has {partitions} partitions but queues="
                    f"{settings.queues}: use queues={partitions}, or another topic (a topic's "
                    "partition count fixes which queue carries each stream)"
                )

    async def close(self) -> None:
        await self._adapter.close()

    async def __aenter__(self) -> KafkaAdapterFactory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def ensure_topic(
    client_kwargs: Mapping[str, Any],
    topic: str,
    partitions: int,
    replication_factor: int = 1,
    configs: Mapping[str, str] | None = None,
) -> int:
    """Create ``topic`` with ``partitions`` partitions (and topic ``configs``) unless it
    exists; return the partition count it has (the caller decides what another count means).
    Transient failures raise for the caller to retry."""
    admin = AIOKafkaAdminClient(**client_kwargs)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            await _create_topic(admin, topic, partitions, replication_factor, configs)
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described["error_code"]:  # raised to the caller's retry, which retries it if transient
        raise for_code(described["error_code"])(f"describing topic {topic!r}")
    return len(described["partitions"])


async def _create_topic(
    admin: AIOKafkaAdminClient,
    topic: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
) -> None:
    new = NewTopic(topic, partitions, replication_factor, topic_configs=dict(configs or {}))
    response = await admin.create_topics([new])
    for _topic, code, message, *_ in response.topic_errors:
        error = for_code(code)
        if code == 0 or error is TopicAlreadyExistsError:  # another process was first
            continue
        if error.retriable:
            raise error(message)
        raise ConfigurationError(
            f"cannot create Kafka topic {topic!r} with {partitions} partitions "
            f"and replication factor {replication_factor}: {message or error.__name__}"
        )
    log.info("created Kafka topic %r with %d partitions", topic, partitions)
