"""The Kafka adapter: the queues are the partitions of one Kafka topic (at scale).

Queue ``i`` is partition ``i``. The producer writes each batch container to the partition of
its stream's queue, as the :class:`~streams.adapters.mapper.HashRingQueueMapper` decides (the stream
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

A topic other programs write, one event per record (``records="json"`` etc.), is read the
same way, its records grouped by stream (:mod:`~streams.backends.kafka.records`); its
queue mapper is Kafka's own partitioner (:class:`~streams.adapters.mapper.KafkaPartitionMapper`).
The settings, topic administration and outage handling it shares with the group balancer and
the handoff log are in :mod:`streams.kafka`; the receiver is in
:mod:`~streams.backends.kafka.receiver`.

Example (with a broker at 127.0.0.1:9092)::

    async with KafkaAdapterFactory(KafkaSettings("127.0.0.1:9092", "sensors", queues=4)) as factory:
        adapter = await factory.create_adapter()
        sid = StreamId("sensors", "s-1")
        queue = factory.get_queue_mapper().get_queue_for_stream(sid)
        payload = BatchContainer(sid, BatchKind.DATA, wall_time(), [1, 2]).encode()
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
from collections.abc import Sequence
from functools import partial
from typing import Any, Protocol

import anyio
from aiokafka import AIOKafkaProducer

from streams.adapters.mapper import HashRingQueueMapper, KafkaPartitionMapper
from streams.adapters.protocols import ContainerQueueAdapter, Times
from streams.backends.kafka.changelog import KafkaChangelog, OpenLocalStates
from streams.backends.kafka.clients import (
    Producers,
    ensure_queue_topics,
    is_transient,
    kafka_outage_log,
    permanent_fix,
    retry_kafka,
)
from streams.backends.kafka.local_lookup import KafkaLocalRecordReceiver, KafkaLocalStateReceiver
from streams.backends.kafka.receiver import KafkaQueueReceiver
from streams.backends.kafka.record_receiver import KafkaRecordReceiver
from streams.backends.kafka.registry import RegistryFormat, SchemaRegistryError
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.state_receiver import KafkaStateReceiver
from streams.core.batch import BatchContainer, BatchKind
from streams.core.clock import wall_time
from streams.core.codec import encode_batches
from streams.core.errors import ConfigurationError, EncodeError, EventTooLargeError, QueueAdapterError
from streams.core.ids import QueueId, StreamId
from streams.core.retry import OutageLog, retry

_Record = tuple[str, int, bytes, bytes, int | None]  # topic, partition, key, value, timestamp ms


class Closeable(Protocol):
    async def close(self) -> None: ...


__all__ = ["KafkaAdapterFactory", "KafkaQueueAdapter", "KafkaQueueReceiver", "KafkaRecordReceiver"]


class KafkaQueueAdapter(ContainerQueueAdapter):
    """Producer side of the Kafka queues, and maker of their receivers.

    Records are sent with ``acks="all"``, by an idempotent producer unless ``idempotent``
    is off or the broker refuses one (:class:`~streams.backends.kafka.clients.Producers`), compressed with the
    settings' ``compression`` codec; concurrent
    :meth:`queue_message_batch` calls travel together in one request per partition, and
    :meth:`queue_message_batches` sends many at once. Both return once Kafka has the records.
    A send that fails because the broker is unreachable is retried (with back-off) for up to
    ``give_up_after`` seconds, then raises :class:`QueueAdapterError`; a record whose first
    send reached Kafka before the failure may then be stored twice (at least once).
    """

    name = "kafka"
    is_rewindable = True

    def __init__(
        self, settings: KafkaSettings, outage: OutageLog | None = None, open_local: OpenLocalStates | None = None
    ) -> None:
        self.settings = settings
        self.outage = outage if outage is not None else kafka_outage_log(settings)
        self._producer: AIOKafkaProducer | None = None
        self._starting = anyio.Lock()
        self.producers = Producers(settings)  # idempotent where the broker allows it
        # The event-time state (kafka_state), and with open_local the worker's local state store.
        self.changelog = KafkaChangelog(settings, self.outage, self.producers, open_local)
        self._companions: list[Closeable] = []  # the backend's topics beside the queues

    async def start(self) -> None:
        """Connect the producer (retrying while the broker is unreachable)."""
        if self._producer is not None:
            return
        async with self._starting:  # concurrent first sends share one producer
            if self._producer is None:
                await self._register_schemas()
                self._producer = await retry_kafka(
                    self._start_producer, "starting the Kafka producer", self.settings, self.outage
                )

    async def _register_schemas(self) -> None:
        """Register a registry format's ``value_schema`` under each written topic's subject,
        before anything is written: a registry away is waited for (``give_up_after``), one
        that refuses the schema raises why."""
        fmt = self.settings.record_format
        if not isinstance(fmt, RegistryFormat) or fmt.value_schema is None:
            return
        # The registry's outages are its own, not the cluster's: logged as the registry's.
        outage = OutageLog(f"the schema registry at {fmt.registry.url}", logging.getLogger("headrace.kafka"))
        for topic in self.settings.namespaces:
            if topic != self.settings.repartition_topic:
                await retry(
                    lambda topic=topic: fmt.register(topic),  # type: ignore[misc]
                    what=f"registering the schema of topic {topic!r}",
                    outage=outage,
                    is_transient=lambda exc: isinstance(exc, SchemaRegistryError) and exc.transient,
                    give_up_after=self.settings.give_up_after,
                )

    async def _start_producer(self) -> AIOKafkaProducer:
        return await self.producers.start(linger_ms=2)

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
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
        max_size: int = 1 << 20,
    ) -> list[_Record]:
        """The records carrying these events of ``stream_id``: batch containers (more than one
        only where they would be over ``max_size`` bytes), or on a topic of another format one
        record per event, keyed by the stream key, with a given event time as the record's
        timestamp (which readers take as its arrival). An event whose record would be over
        ``max_size`` bytes raises :class:`~streams.core.errors.EventTooLargeError`."""
        settings = self.settings
        partition = settings.check_queue(queue).partition
        fmt = settings.record_format
        if fmt is None:
            key = str(stream_id).encode()
            payloads = encode_batches(stream_id, kind, wall_time(), values, times, max_size)
            return [(settings.topic, partition, key, payload, None) for payload in payloads]
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
        encode = partial(fmt.encode_to, topic) if isinstance(fmt, RegistryFormat) else fmt.encode
        try:
            encoded = [encode(v) for v in values]
        except Exception as exc:  # the format's own errors: any type
            raise EncodeError(
                f"cannot encode a value for stream {stream_id} as {fmt.name}: {exc}; nothing was enqueued"
            ) from None
        if max(map(len, encoded), default=0) > max_size:
            size = max(map(len, encoded))
            raise EventTooLargeError(
                f"an event for stream {stream_id} is {size:,} bytes as {fmt.name}, over max_event_size "
                f"({max_size:,} bytes); nothing was enqueued"
            )
        if times is None:
            return [(topic, partition, key, value, None) for value in encoded]
        return [
            (topic, partition, key, value, None if t is None else int(t * 1000))
            for value, t in zip(encoded, times, strict=True)
        ]

    async def _send_all(self, records: list[_Record]) -> None:
        """Send ``records`` in order, sending again what the broker did not take (see
        _send) until it has all of them or ``give_up_after`` has passed."""
        await self.start()
        pending: list[_Record] = records

        async def send_pending() -> None:
            nonlocal pending
            pending, failure = await self._send(pending)
            if failure is not None:
                raise failure

        def not_enqueued(exc: BaseException, waited: float) -> Exception:
            return QueueAdapterError(
                f"{len(pending)} of {len(records)} records were not enqueued: "
                f"{self.settings.server} has been unreachable for {waited:.0f} s; "
                "check that it is running and reachable from here"
            )

        await retry(
            send_pending,
            what=f"enqueueing {len(records)} records",
            outage=self.outage,
            is_transient=is_transient,
            give_up_after=self.settings.give_up_after,
            give_up=not_enqueued,
        )

    async def _send(self, records: list[_Record]) -> tuple[list[_Record], BaseException | None]:
        """Send ``records``; return those to send again because the broker was unreachable,
        and the first such failure (``None``: all sent).

        To keep each partition in order, a partition's records are sent again from its first
        failed one on, even those after it that did get through (duplicates, not disorder).
        """
        assert self._producer is not None
        sending: list[asyncio.Future[Any]] = []
        refused: BaseException | None = None  # send() itself failed: later records wait too
        for topic, partition, key, value, timestamp in records:
            try:
                sending.append(
                    await self._producer.send(topic, value, key=key, partition=partition, timestamp_ms=timestamp)
                )
            except Exception as exc:  # sorted below
                refused = exc
                break
        results: list[Any] = await asyncio.gather(*sending, return_exceptions=True)
        results += [refused] * (len(records) - len(results))
        # (topic, partition) -> index of its first failed record
        failed_from: dict[tuple[str, int], int] = {}
        failure: BaseException | None = None
        for index, (record, result) in enumerate(zip(records, results, strict=True)):
            if not isinstance(result, BaseException):
                continue
            topic, partition = record[0], record[1]
            if not is_transient(result):
                raise QueueAdapterError(
                    f"Kafka refused a record for topic {topic!r} partition {partition}: {result}; "
                    f"{permanent_fix(result, self.settings)}"
                ) from result
            failure = failure or result
            failed_from.setdefault((topic, partition), index)
        end = len(records)
        return [r for i, r in enumerate(records) if i >= failed_from.get((r[0], r[1]), end)], failure

    def event_writer(self, max_event_size: int) -> _KafkaEventWriter:  # one record per event, or containers
        """How the provider's publisher writes events here (see streams.runtime.publisher)."""
        return _KafkaEventWriter(self, max_event_size)

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> KafkaStateReceiver:
        local = self.changelog.open_local is not None  # parked states looked up there
        if self.settings.record_format is not None:
            records = KafkaLocalRecordReceiver if local else KafkaRecordReceiver
            return records.of(self.settings, queue, self.outage, self.changelog, max_record_size)
        return (KafkaLocalStateReceiver if local else KafkaStateReceiver).of(
            self.settings, queue, self.outage, self.changelog
        )

    def close_with(self, companion: Closeable) -> None:
        """Close ``companion`` (a client of another topic of the cluster) with this adapter."""
        self._companions.append(companion)

    async def close(self) -> None:
        """Send what is still buffered and disconnect the producer (and the companions)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
        await self.changelog.close()
        for companion in self._companions:
            await companion.close()


class _KafkaEventWriter:
    """The publisher's writer for Kafka: :meth:`KafkaQueueAdapter.encode_events`, then
    all the records of a write sent at once (in order, retried as one)."""

    def __init__(self, adapter: KafkaQueueAdapter, max_event_size: int) -> None:
        self._encode = adapter.encode_events
        self._max_size = max_event_size
        self.write = adapter._send_all

    def encode(
        self, queue: QueueId, stream_id: StreamId, kind: BatchKind, values: list[Any], times: Times
    ) -> list[Any]:
        return self._encode(queue, stream_id, kind, values, times, self._max_size)


class KafkaAdapterFactory:
    """The Kafka topic ``topic`` with ``queues`` partitions: the adapter and its queue mapper.

    :meth:`create_adapter` creates the topic (``replication_factor`` replicas) when it does
    not exist, and refuses one whose partition count is not ``queues`` (the count decides
    which queue carries each stream, so every process must agree on it).

    >>> factory = KafkaAdapterFactory(KafkaSettings("127.0.0.1:9092", "sensors", queues=4, start="latest"))
    >>> factory.get_queue_mapper().queue_count, factory.settings.group_id
    (4, 'headrace')
    """

    def __init__(self, settings: KafkaSettings, open_local: OpenLocalStates | None = None) -> None:
        self.settings = settings
        self._mapper: HashRingQueueMapper | KafkaPartitionMapper = (
            HashRingQueueMapper(settings.queues)
            if settings.record_format is None
            else KafkaPartitionMapper(settings.queues)  # where any Kafka producer puts a key
        )
        self._adapter = KafkaQueueAdapter(settings, open_local=open_local)
        self._topic_checked = False

    async def create_adapter(self) -> KafkaQueueAdapter:
        """The adapter (the same one on every call), once the topic is known to be right."""
        if not self._topic_checked:
            what = f"checking Kafka topic(s) {', '.join(map(repr, self.settings.namespaces))}"
            await retry_kafka(lambda: ensure_queue_topics(self.settings), what, self.settings, self._adapter.outage)
            changelog = self._adapter.changelog  # the event-time state's (kafka_state)
            what = f"checking Kafka topic {changelog.topic!r}"
            await retry_kafka(changelog.ensure_topic, what, self.settings, self._adapter.outage)
            self._topic_checked = True
        await self._adapter.start()
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper | KafkaPartitionMapper:
        return self._mapper

    @property
    def outage(self) -> OutageLog:
        """The outage log of the cluster, shared by every client of this factory."""
        return self._adapter.outage

    @property
    def changelog(self) -> KafkaChangelog:
        """The adapter's state changelog (and the worker's local state store)."""
        return self._adapter.changelog

    def close_with(self, companion: Closeable) -> None:
        """Close ``companion`` with the adapter (see :meth:`KafkaQueueAdapter.close_with`)."""
        self._adapter.close_with(companion)

    async def close(self) -> None:
        await self._adapter.close()

    async def __aenter__(self) -> KafkaAdapterFactory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
