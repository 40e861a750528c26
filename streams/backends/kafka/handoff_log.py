"""The handoff log on Kafka: what windowed consumers hand to Spark, kept in Kafka topics.

Topics, for a prefix (``headrace`` unless configured)::

    <prefix>.handoff.<stream>        the rows: partition = queue, one record per append
    <prefix>.handoff-marks.<stream>  snapshots of the writers' marks (a quick start-up)
    <prefix>.handoff-streams         declarations: key = stream, value = schema, partitions

A record is one append: the rows as an Arrow IPC stream, and in its headers the source stream
and consumer that produced them, the marks they move (per key, the newest window end handed
off) and the offset its writer expected it to land at. A record is written whole or not at
all, so rows and marks always go together, with no Kafka transaction.

**A record counts only where its writer expected it.** A writer appends at the end it last
saw. If the record lands anywhere else, something was appended in between: a retry of its own
whose first attempt did land after all, or another worker that still believes it owns the
queue. Readers and writers alike then ignore the record, and its writer reads what it missed
and tries again. Validity depends on the record and its offset only, so every reader of an
offset range sees the same rows: Spark re-reading a batch after a failure gets exactly what
it got the first time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping

import anyio
import pyarrow as pa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from spark_sink.schema import HandoffSchema
from streams.backends.kafka.clients import ensure_topic, start_client, stop_client
from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.ends import partition_ends, records_to_end
from streams.backends.kafka.handoff_records import (
    Declaration,
    HandoffRecord,
    HandoffTopics,
    PartitionMarks,
    encode_rows,
    record_headers,
)
from streams.core.errors import ConfigurationError, HandoffDataLostError, HandoffSchemaError, UnknownHandoffStreamError

_FETCH_RECORDS = 500  # records per fetch while reading a range
_FETCH_BYTES = 1 << 20  # bytes the broker answers a fetch with, at most (but one record whole)


class KafkaHandoffLog:
    """The handoff streams on one Kafka cluster: declarations, offsets, reads and appends.

    ``connection`` is the cluster and how to reach it (a
    :class:`~streams.backends.kafka.connection.KafkaConnection`, or the bootstrap servers of
    a cluster that takes anyone in). Use it as an async context manager::

        async with KafkaHandoffLog("127.0.0.1:9092") as log:
            start, end = await log.offsets("averages")
    """

    def __init__(
        self,
        connection: KafkaConnection | str,
        prefix: str = "headrace",
        *,
        replication_factor: int = 1,
        request_timeout: float = 10.0,
    ) -> None:
        self.connection = KafkaConnection.of(connection)
        self.topics = HandoffTopics(prefix)
        self.replication_factor = replication_factor
        self.request_timeout = request_timeout
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reading = anyio.Lock()  # one consumer, assigned to one partition at a time

    @property
    def server(self) -> str:
        return self.connection.server

    async def __aenter__(self) -> KafkaHandoffLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        producer, consumer, self._producer, self._consumer = (self._producer, self._consumer, None, None)
        if producer is not None:
            await producer.stop()
        if consumer is not None:
            await stop_client(consumer)

    # -- declarations -------------------------------------------------------------------

    async def declare(self, stream: str, schema: HandoffSchema, partitions: int) -> None:
        """Create ``stream``'s topics and record its output schema. The first declaration
        of a stream stands; declaring it again with another schema is an error."""
        # Only the newest marks snapshot of a partition and one declaration of a stream
        # matter (the key is the partition, or the stream): those topics are compacted.
        compacted = {"cleanup.policy": "compact"}
        topics = (
            (self.topics.declarations, 1, compacted),
            (self.topics.data(stream), partitions, None),
            (self.topics.marks(stream), partitions, compacted),
        )
        for topic, count, configs in topics:
            found = await ensure_topic(self.connection, topic, count, self.replication_factor, configs)
            if found != count:
                raise ConfigurationError(
                    f"Kafka topic {topic!r} has {found} partitions, not {count} (one per "
                    "queue): delete it, or hand off under another handoff_prefix"
                )
        declared = await self._declarations()
        if stream not in declared:
            producer = await self._producer_started()
            declaration = Declaration(schema, partitions)
            await producer.send_and_wait(
                self.topics.declarations, declaration.encode(), key=stream.encode(), partition=0
            )
            declared = await self._declarations()
        if declared[stream].schema != schema:
            raise HandoffSchemaError(
                f"handoff stream {stream!r} is already declared as "
                f"({declared[stream].schema.ddl()}), not ({schema.ddl()}): a changed output "
                "needs a new stream name"
            )

    async def streams(self) -> dict[str, Declaration]:
        """Every declared stream: its schema and partition count."""
        return await self._declarations()

    async def declaration(self, stream: str) -> Declaration:
        declared = await self._declarations()
        if stream not in declared:
            known = ", ".join(sorted(declared)) or "none yet"
            raise UnknownHandoffStreamError(
                f"no handoff stream {stream!r} on {self.server} under prefix "
                f"{self.topics.prefix!r} (declared streams: {known}); the stream option "
                "names a consumer's output, topicPrefix the workers' handoff_prefix"
            )
        return declared[stream]

    async def _declarations(self) -> dict[str, Declaration]:
        topic = self.topics.declarations
        consumer = await self._consumer_started()
        tp = TopicPartition(topic, 0)
        if topic not in await consumer.topics():
            return {}
        declared: dict[str, Declaration] = {}
        async with self._reading:
            try:
                records = await records_to_end(consumer, tp, self.request_timeout)
            finally:
                park(consumer)
        for record in records:
            if record.key is not None and record.value is not None:
                declared.setdefault(record.key.decode(), Declaration.decode(record.value))
        return declared

    # -- offsets, reads, appends -------------------------------------------------------

    async def offsets(self, stream: str, partitions: int | None = None) -> tuple[dict[int, int], dict[int, int]]:
        """The first retained offset and the next offset, per partition of ``stream``
        (``partitions``: its declared count, if the caller knows it already; a declaration
        never changes, so a reader asking again and again need not read it each time)."""
        tps = await self._partitions(stream, partitions)
        async with self._reading:
            bounds = await self._bounds(tps)
        starts = {tp.partition: first for tp, (first, _) in zip(tps, bounds, strict=True)}
        return starts, {tp.partition: end for tp, (_, end) in zip(tps, bounds, strict=True)}

    async def listed_offsets(self, stream: str, partitions: int | None = None) -> tuple[dict[int, int], dict[int, int]]:
        """:meth:`offsets` as the broker lists them: one request, where :meth:`offsets`
        waits for a fetch at each end (the broker's long poll, on every call).

        Where they differ (Tansu lists the end of a batch of several records as its first
        offset + 1), the listed end falls inside a batch that some other program wrote:
        a handoff writer sends each append as a batch of its own, the only record that
        counts in it. A reader stopping there reads every record that counts, and the rest
        of that batch with the next append. A writer needs the true end (where its next
        record lands): :meth:`offsets`."""
        tps = await self._partitions(stream, partitions)
        consumer = await self._consumer_started()
        async with self._reading:
            # Assigned first: the consumer then asks for the topic's metadata before listing,
            # instead of finding it unknown and waiting out its retry backoff.
            consumer.assign(tps)
            try:
                begin = await consumer.beginning_offsets(tps)
                end = await consumer.end_offsets(tps)
            finally:
                park(consumer)
        return {tp.partition: begin[tp] for tp in tps}, {tp.partition: end[tp] for tp in tps}

    async def _partitions(self, stream: str, partitions: int | None) -> list[TopicPartition]:
        if partitions is None:
            partitions = (await self.declaration(stream)).partitions  # an unknown stream is an error
        topic = self.topics.data(stream)
        return [TopicPartition(topic, p) for p in range(partitions)]

    async def records(self, stream: str, partition: int, start: int, end: int) -> list[HandoffRecord]:
        """The records at offsets ``[start, end)`` of a partition, valid or not."""
        consumer = await self._consumer_started()
        tp = TopicPartition(self.topics.data(stream), partition)
        async with self._reading:
            return [HandoffRecord.decode(r) async for r in fetch_range(consumer, tp, start, end, self.request_timeout)]

    async def append(
        self,
        stream: str,
        partition: int,
        table: pa.Table,
        *,
        expected: int,
        source: str,
        consumer: str,
        marks: Mapping[str, float],
        events: bytes | None = None,
    ) -> int:
        """Write one record; return the offset it landed at (it counts only if that is
        ``expected``)."""
        producer = await self._producer_started()
        headers = record_headers(expected, source, consumer, marks, table.num_rows, events)
        sent = await producer.send_and_wait(
            self.topics.data(stream), encode_rows(table), partition=partition, headers=headers
        )
        return int(sent.offset)

    # -- marks ----------------------------------------------------------------------------

    async def load_marks(self, stream: str, partition: int) -> PartitionMarks:
        """The marks of every valid record of a partition: the newest snapshot, then the
        records after it."""
        snapshots = TopicPartition(self.topics.marks(stream), partition)
        async with self._reading:
            [(first, last)] = await self._bounds([snapshots])
        state = PartitionMarks()
        if last > first:
            [newest] = await self._read(snapshots, last - 1, last)
            state = PartitionMarks.from_bytes(newest.value)
        begin, end = await self._bounds_of(stream, partition)
        if state.end > end:  # the data topic was replaced: the snapshot describes another log
            state = PartitionMarks()
        state.end = max(state.end, begin)
        for record in await self.records(stream, partition, state.end, end):
            state.fold(record)
        state.end = end
        return state

    async def save_marks(self, stream: str, partition: int, state: PartitionMarks) -> None:
        producer = await self._producer_started()
        await producer.send_and_wait(
            self.topics.marks(stream), state.to_bytes(), key=str(partition).encode(), partition=partition
        )

    # -- plumbing -----------------------------------------------------------------------

    async def _bounds_of(self, stream: str, partition: int) -> tuple[int, int]:
        async with self._reading:
            [bounds] = await self._bounds([TopicPartition(self.topics.data(stream), partition)])
        return bounds

    async def _bounds(self, tps: list[TopicPartition]) -> list[tuple[int, int]]:
        """The oldest retained offset and the end of each of ``tps`` (the end from a fetch:
        :func:`~streams.backends.kafka.ends.partition_ends`). Called holding ``_reading``."""
        consumer = await self._consumer_started()
        consumer.assign(tps)
        try:
            begin = await consumer.beginning_offsets(tps)
            ends = await partition_ends(consumer, tps, self.request_timeout)
        finally:
            park(consumer)
        return [(begin[tp], ends[tp]) for tp in tps]

    async def _read(self, tp: TopicPartition, start: int, end: int) -> list[ConsumerRecord[bytes, bytes]]:
        consumer = await self._consumer_started()
        async with self._reading:
            return [r async for r in fetch_range(consumer, tp, start, end, self.request_timeout)]

    async def _producer_started(self) -> AIOKafkaProducer:
        if self._producer is None:
            # No idempotent producer needed (nor available on every broker): a duplicate
            # from a retry lands after the original, where it does not count.
            producer = AIOKafkaProducer(**self.connection.client_kwargs(), acks="all", max_request_size=16 << 20)
            await start_client(producer, self.connection)
            self._producer = producer
        return self._producer

    async def _consumer_started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = open_reader(self.connection)
            await start_client(consumer, self.connection)
            self._consumer = consumer
        return self._consumer


def open_reader(connection: KafkaConnection) -> AIOKafkaConsumer:
    """A consumer that reads what it is told, from where it is told (no group, no commits)."""
    return AIOKafkaConsumer(
        **connection.consumer_kwargs(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",  # below the retained range: an error, never a silent skip
            fetch_max_wait_ms=50,
            max_partition_fetch_bytes=16 << 20,
            # Answers of about 1 MiB (a record larger still comes whole, alone): a read's first
            # rows arrive without waiting for a partition's worth, and the consumer fetches the
            # next answer while the reader decodes this one.
            fetch_max_bytes=_FETCH_BYTES,
        )
    )


async def fetch_range(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, timeout: float
) -> AsyncIterator[ConsumerRecord[bytes, bytes]]:
    """The records at offsets ``[start, end)`` of ``tp``, in order (``end`` at most the
    partition's end). Offsets no longer retained raise :class:`HandoffDataLostError`."""
    async for records in fetch_answers(consumer, tp, start, end, timeout):
        for record in records:
            yield record


async def fetch_answers(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, timeout: float
) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
    """:func:`fetch_range`'s records, a list per answer of the broker's as it comes: the
    consumer fetches the next answer while the caller works on this one."""
    if start >= end:
        return
    consumer.assign([tp])
    consumer.seek(tp, start)
    try:
        async for records in _fetch_assigned(consumer, tp, start, end, timeout):
            yield records
    finally:
        park(consumer)


def park(consumer: AIOKafkaConsumer) -> None:
    """Stop ``consumer`` fetching until its next read, keeping its assignment.

    Pausing, not unsubscribing: an unsubscribed consumer's fetcher cancels its fetch in
    flight and awaits it, and a ``stop()`` landing then has its cancellation absorbed by
    aiokafka, so ``stop()`` waits forever (a read at a partition's end, whose long poll is
    always in flight, followed by a close, hung that way)."""
    consumer.pause(*consumer.assignment())


async def _fetch_assigned(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, timeout: float
) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
    quiet_since = time.monotonic()
    while True:
        try:
            fetched = await consumer.getmany(tp, timeout_ms=100, max_records=_FETCH_RECORDS)
        except OffsetOutOfRangeError:
            raise HandoffDataLostError(
                f"offsets from {start} of Kafka topic {tp.topic!r} partition {tp.partition} are "
                "no longer retained (the topic's retention removed them): restart the query "
                "with a new checkpoint, or keep handoff topics longer (retention.ms)"
            ) from None
        records = fetched.get(tp, [])
        if records and records[-1].offset + 1 >= end:
            # Paused before the loop runs the fetcher again: it would otherwise ask for what
            # follows the range, and the consumer's next read would wait for that answer
            # (a long poll at a partition's end).
            park(consumer)
            within = [record for record in records if record.offset < end]
            if within:
                yield within
            return
        if records:
            quiet_since = time.monotonic()
            yield records
        elif await consumer.position(tp) >= end:
            return
        elif time.monotonic() - quiet_since > timeout:
            raise TimeoutError(
                f"Kafka topic {tp.topic!r} partition {tp.partition} sent nothing for "
                f"{timeout:.0f} s while offsets {await consumer.position(tp)}..{end} were due"
            )
