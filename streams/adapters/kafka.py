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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError, for_code

from balancer.mapper import HashRingQueueMapper

if TYPE_CHECKING:  # the balancer imports this module
    from balancer.base import BalancerOptions
    from balancer.kafka_group import KafkaGroupBalancer

from ..batch import QueueMessage
from ..errors import ConfigurationError, QueueAdapterError
from ..ids import QueueId, StreamId
from ..tokens import SequenceToken
from .outage import Backoff, OutageLog, retry_transient

log = logging.getLogger("headrace.kafka")

T = TypeVar("T")
Start = Literal["earliest", "latest"]
_Record = tuple[int, bytes, bytes]  # partition, key, value


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

    def __post_init__(self) -> None:
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
# (tens a second); the outage log reports the outage once instead.
AIOKAFKA_CONNECTION_LOGGERS = ("aiokafka", "aiokafka.conn")


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
        records = [
            (self.settings.check_queue(queue).partition, str(stream_id).encode(), bytes(payload))
            for queue, stream_id, payload in items
        ]
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
        topic = self.settings.topic
        sending: list[asyncio.Future[Any]] = []
        refused: BaseException | None = None  # send() itself failed: later records wait too
        for partition, key, value in records:
            try:
                sending.append(
                    await self._producer.send(topic, value, key=key, partition=partition)
                )
            except Exception as exc:  # sorted below
                refused = exc
                break
        results: list[Any] = await asyncio.gather(*sending, return_exceptions=True)
        results += [refused] * (len(records) - len(results))
        failed_from: dict[int, int] = {}  # partition -> index of its first failed record
        for index, ((partition, _, _), result) in enumerate(zip(records, results, strict=True)):
            if not isinstance(result, BaseException):
                continue
            if not is_transient(result):
                raise QueueAdapterError(
                    f"Kafka refused a record for topic {topic!r} partition {partition}: {result}"
                ) from result
            self.outage.failed(f"{type(result).__name__}: {result}".rstrip(": "), since=began)
            failed_from.setdefault(partition, index)
        if not failed_from:
            self.outage.recovered()
        return [r for i, r in enumerate(records) if i >= failed_from.get(r[0], len(records))]

    def create_receiver(self, queue: QueueId) -> KafkaQueueReceiver:
        return KafkaQueueReceiver(self.settings, queue, self.outage)

    async def close(self) -> None:
        """Send what is still buffered and disconnect the producer."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()


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
        self._partition = settings.check_queue(queue)
        self._consumer: AIOKafkaConsumer | None = None
        self._rewinder: AIOKafkaConsumer | None = None  # for read_range, made when first needed
        self._acknowledged: int | None = None  # next offset after the last acknowledged record
        self._committed: int | None = None  # the same, as committed to Kafka
        self._last_commit = float("-inf")
        self._waiting_since: float | None = None  # wall-clock ms: an empty read began waiting
        self._backoff = Backoff()

    @property
    def committed_offset(self) -> int | None:
        """The offset this receiver last committed (the next record to read after a restart)."""
        return self._committed

    async def initialize(self) -> None:
        """Connect, and place the read position after the committed offset (or at the
        configured start when the group has none for this partition)."""
        consumer = await self._retry(
            lambda: self._open_consumer(self.settings.group_id), f"reading {self.queue}"
        )
        self._consumer = consumer
        tp = self._partition
        committed = await self._retry(
            lambda: consumer.committed(tp), f"reading {self.queue}'s committed offset"
        )
        first, end = await self._bounds(consumer)
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
        self._committed = self._acknowledged = committed

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        if max_count <= 0:
            return []
        consumer = self._require_consumer()
        await self._commit_if_due()
        tp = self._partition
        if self._waiting_since is None:
            self._waiting_since = time.time() * 1000
        began = time.monotonic()
        while time.monotonic() - began < self.settings.outage_after:
            try:
                batch = await consumer.getmany(
                    tp, timeout_ms=int(self.settings.poll_timeout * 1000), max_records=max_count
                )
            except KafkaError as exc:
                if not is_transient(exc):
                    raise QueueAdapterError(
                        f"reading {self.queue} from Kafka failed: {exc}"
                    ) from exc
                await self._back_off(f"{type(exc).__name__}: {exc}", since=began)
                return []
            if records := batch.get(tp):
                self._answered()
                return self._messages(records)
            answered = consumer.last_poll_timestamp(tp)
            silent = time.time() - self._waiting_since / 1000
            if answered is not None and answered >= self._waiting_since:
                self._answered()
                highwater = consumer.highwater(tp)
                if highwater is None or await consumer.position(tp) >= highwater:
                    return []  # caught up with what the partition held at that answer
                self._waiting_since = time.time() * 1000  # more to come: wait for it
            elif silent >= self.settings.outage_after:
                reason = f"no fetch answer for {self.queue} in {silent:.1f} s"
                await self._back_off(reason, since=time.monotonic() - silent)
                return []
        return []  # answers keep coming, records not yet: the agent asks again

    def _answered(self) -> None:
        """A fetch answered: the broker is reachable."""
        self._waiting_since = None
        self._backoff.reset()
        self.outage.recovered()

    async def _back_off(self, reason: str, since: float) -> None:
        """The broker did not answer: report it, and wait before the agent asks again."""
        self.outage.failed(reason, since=since)
        await anyio.sleep(self._backoff.next())

    def _messages(self, records: list[ConsumerRecord[bytes, bytes]]) -> list[QueueMessage]:
        # A record with no value (a tombstone from another writer) is empty bytes, which
        # the pulling agent dead-letters like any other record that does not decode.
        queue = self.queue
        return [
            QueueMessage(queue, r.offset, b"" if r.value is None else r.value, r.timestamp / 1000)
            for r in records
        ]

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        if not tokens:
            return
        after = max(token.sequence_number for token in tokens) + 1
        if self._acknowledged is None or after > self._acknowledged:
            self._acknowledged = after
        await self._commit_if_due()

    async def _commit_if_due(self) -> None:
        if time.monotonic() - self._last_commit >= self.settings.commit_interval:
            await self._commit()

    async def _commit(self) -> bool:
        """Commit the acknowledged position; ``False`` if the broker could not be reached
        (the position stays pending and is committed on a later try)."""
        offset = self._acknowledged
        if offset is None or offset == self._committed or self._consumer is None:
            return True
        self._last_commit = began = time.monotonic()
        try:
            with anyio.fail_after(self.settings.request_timeout):
                await self._consumer.commit({self._partition: offset})
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
        self._committed = offset
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
        first, end = await self._bounds(rewinder)
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
                out.extend(self._messages(batch.get(tp, [])))
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
                    self._acknowledged,
                    self.settings.server,
                    self._committed,
                )
        except QueueAdapterError as exc:
            log.error(
                "%s: %s; records from offset %s on will be read again",
                self.queue,
                exc,
                self._committed,
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
        consumer.assign([self._partition])
        return consumer

    async def _bounds(self, consumer: AIOKafkaConsumer) -> tuple[int, int]:
        """The oldest retained offset and the offset the next record will get."""
        tp = self._partition

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
        self._mapper = HashRingQueueMapper(queues)
        self._adapter = KafkaQueueAdapter(self.settings)
        self._topic_checked = False

    async def create_adapter(self) -> KafkaQueueAdapter:
        """The adapter (the same one on every call), once the topic is known to be right."""
        if not self._topic_checked:
            what = f"checking Kafka topic {self.settings.topic!r}"
            await _retry(self._ensure_topic, what, self.settings, self._adapter.outage)
            self._topic_checked = True
        await self._adapter.start()
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper:
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
        partitions = await ensure_topic(
            settings.client_kwargs(), settings.topic, settings.queues, settings.replication_factor
        )
        if partitions != settings.queues:
            raise ConfigurationError(
                f"Kafka topic {settings.topic!r} has {partitions} partitions but queues="
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
