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

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgpack
import pyarrow as pa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from streams.adapters.kafka import ensure_topic
from streams.core.errors import ConfigurationError

from .errors import HandoffDataLostError, HandoffSchemaError, UnknownHandoffStreamError
from .log import check_stream_name
from .schema import HandoffSchema

_EXPECT, _SOURCE, _CONSUMER, _MARKS, _ROWS, _EVENTS = (
    "headrace-expect",
    "headrace-source",
    "headrace-consumer",
    "headrace-marks",
    "headrace-rows",
    "headrace-events",
)
_FETCH_RECORDS = 500  # records per fetch while reading a range


@dataclass(frozen=True, slots=True)
class HandoffTopics:
    """The names of a handoff stream's topics under ``prefix``.

    >>> HandoffTopics("headrace").data("averages")
    'headrace.handoff.averages'
    """

    prefix: str = "headrace"

    def data(self, stream: str) -> str:
        return f"{self.prefix}.handoff.{check_stream_name(stream)}"

    def marks(self, stream: str) -> str:
        return f"{self.prefix}.handoff-marks.{check_stream_name(stream)}"

    @property
    def declarations(self) -> str:
        return f"{self.prefix}.handoff-streams"


@dataclass(frozen=True, slots=True)
class Declaration:
    """A handoff stream as its first writer declared it: its output and partition count."""

    schema: HandoffSchema
    partitions: int

    def encode(self) -> bytes:
        return json.dumps({"schema": self.schema.to_json(), "partitions": self.partitions}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Declaration:
        fields = json.loads(data)
        return cls(HandoffSchema.from_json(fields["schema"]), int(fields["partitions"]))


@dataclass(frozen=True, slots=True)
class HandoffRecord:
    """One append as read back: where it landed, where it was meant to, and what it holds."""

    offset: int
    expected: int
    source: str
    consumer: str
    marks: Mapping[str, float]
    rows: int
    value: bytes
    events: bytes | None = None  # an event handoff's mark (spark_sink.handoff.EventMark)

    @property
    def valid(self) -> bool:
        """Whether the record counts: it landed at the offset its writer expected."""
        return self.offset == self.expected

    def batches(self) -> list[pa.RecordBatch]:
        """The rows, as written (the declared schema)."""
        return pa.ipc.open_stream(pa.py_buffer(self.value)).read_all().to_batches()

    @classmethod
    def decode(cls, record: ConsumerRecord[Any, Any]) -> HandoffRecord:
        """A record as read from the data topic. A record some other program wrote there has
        no expected offset and never counts."""
        headers = dict(record.headers or ())
        try:
            return cls(
                record.offset,
                int(headers[_EXPECT]),
                headers[_SOURCE].decode(),
                headers[_CONSUMER].decode(),
                msgpack.unpackb(headers[_MARKS]),
                int(headers[_ROWS]),
                record.value or b"",
                headers.get(_EVENTS),
            )
        except (KeyError, ValueError, TypeError, msgpack.UnpackException):
            return cls(record.offset, -1, "", "", {}, 0, b"")


def encode_rows(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@dataclass
class PartitionMarks:
    """What a writer knows of one partition: the marks of every valid record below ``end``.

    Marks are per (source stream, consumer): per key, the newest window end handed off.
    """

    end: int = 0
    marks: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    events: dict[tuple[str, str], bytes] = field(default_factory=dict)  # EventMarks, encoded
    # Records folded in since the newest snapshot (not part of a snapshot itself).
    unsaved: int = field(default=0, compare=False)

    def of(self, source: str, consumer: str) -> dict[str, float]:
        return self.marks.setdefault((source, consumer), {})

    def fold(self, record: HandoffRecord) -> None:
        """Take in the next record of the partition."""
        if record.valid:
            self.move(record.source, record.consumer, record.marks, record.events)
        self.end = record.offset + 1
        self.unsaved += 1

    def move(self, source: str, consumer: str, moved: Mapping[str, float], events: bytes | None = None) -> None:
        if events is not None:  # an event mark replaces the one before (it includes it)
            self.events[(source, consumer)] = events
        marks = self.of(source, consumer)
        for key, end in moved.items():
            if end > marks.get(key, float("-inf")):
                marks[key] = end

    def to_bytes(self) -> bytes:
        return msgpack.packb(
            {
                "end": self.end,
                "marks": [[s, c, m] for (s, c), m in self.marks.items()],
                "events": [[s, c, m] for (s, c), m in self.events.items()],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PartitionMarks:
        snapshot = msgpack.unpackb(data)
        return cls(
            snapshot["end"],
            {(s, c): dict(m) for s, c, m in snapshot["marks"]},
            {(s, c): m for s, c, m in snapshot.get("events", ())},
        )


class KafkaHandoffLog:
    """The handoff streams on one Kafka cluster: declarations, offsets, reads and appends.

    ``client_options`` are aiokafka client keyword arguments (``bootstrap_servers`` and the
    cluster's security settings). Use it as an async context manager::

        async with KafkaHandoffLog({"bootstrap_servers": "127.0.0.1:9092"}) as log:
            start, end = await log.offsets("averages")
    """

    def __init__(
        self,
        client_options: Mapping[str, Any],
        prefix: str = "headrace",
        *,
        replication_factor: int = 1,
        request_timeout: float = 10.0,
    ) -> None:
        self.client_options = dict(client_options)
        self.topics = HandoffTopics(prefix)
        self.replication_factor = replication_factor
        self.request_timeout = request_timeout
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reading = anyio.Lock()  # one consumer, assigned to one partition at a time

    @property
    def server(self) -> str:
        servers = self.client_options.get("bootstrap_servers")
        return f"Kafka at {servers if isinstance(servers, str) else ','.join(servers or ())}"

    async def __aenter__(self) -> KafkaHandoffLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        producer, consumer, self._producer, self._consumer = (self._producer, self._consumer, None, None)
        if producer is not None:
            await producer.stop()
        if consumer is not None:
            await consumer.stop()

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
            found = await ensure_topic(self.client_options, topic, count, self.replication_factor, configs)
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
            start, end = await _bounds(consumer, tp)
            async for record in fetch_range(consumer, tp, start, end, self.request_timeout):
                if record.key is not None and record.value is not None:
                    declared.setdefault(record.key.decode(), Declaration.decode(record.value))
        return declared

    # -- offsets, reads, appends -------------------------------------------------------

    async def offsets(self, stream: str) -> tuple[dict[int, int], dict[int, int]]:
        """The first retained offset and the next offset, per partition of ``stream``."""
        declaration = await self.declaration(stream)  # an unknown stream is an error
        consumer = await self._consumer_started()
        topic = self.topics.data(stream)
        tps = [TopicPartition(topic, p) for p in range(declaration.partitions)]
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        return {tp.partition: begin[tp] for tp in tps}, {tp.partition: end[tp] for tp in tps}

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
        headers = [
            (_EXPECT, str(expected).encode()),
            (_SOURCE, source.encode()),
            (_CONSUMER, consumer.encode()),
            (_MARKS, msgpack.packb(dict(marks))),
            (_ROWS, str(table.num_rows).encode()),
        ]
        if events is not None:
            headers.append((_EVENTS, events))
        sent = await producer.send_and_wait(
            self.topics.data(stream), encode_rows(table), partition=partition, headers=headers
        )
        return int(sent.offset)

    # -- marks ----------------------------------------------------------------------------

    async def load_marks(self, stream: str, partition: int) -> PartitionMarks:
        """The marks of every valid record of a partition: the newest snapshot, then the
        records after it."""
        consumer = await self._consumer_started()
        snapshots = TopicPartition(self.topics.marks(stream), partition)
        first, last = await _bounds(consumer, snapshots)
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
        consumer = await self._consumer_started()
        return await _bounds(consumer, TopicPartition(self.topics.data(stream), partition))

    async def _read(self, tp: TopicPartition, start: int, end: int) -> list[ConsumerRecord[Any, Any]]:
        consumer = await self._consumer_started()
        async with self._reading:
            return [r async for r in fetch_range(consumer, tp, start, end, self.request_timeout)]

    async def _producer_started(self) -> AIOKafkaProducer:
        if self._producer is None:
            # No idempotent producer needed (nor available on every broker): a duplicate
            # from a retry lands after the original, where it does not count.
            producer = AIOKafkaProducer(**self.client_options, acks="all", max_request_size=16 << 20)
            await start_client(producer)
            self._producer = producer
        return self._producer

    async def _consumer_started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = open_reader(self.client_options)
            await start_client(consumer)
            self._consumer = consumer
        return self._consumer


def open_reader(client_options: Mapping[str, Any]) -> AIOKafkaConsumer:
    """A consumer that reads what it is told, from where it is told (no group, no commits)."""
    return AIOKafkaConsumer(
        **client_options,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",  # below the retained range: an error, never a silent skip
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=16 << 20,
    )


async def start_client(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
    try:
        await client.start()
    except BaseException:
        await client.stop()
        raise


async def _bounds(consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int]:
    first = await consumer.beginning_offsets([tp])
    end = await consumer.end_offsets([tp])
    return first[tp], end[tp]


async def fetch_range(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, timeout: float
) -> AsyncIterator[ConsumerRecord[Any, Any]]:
    """The records at offsets ``[start, end)`` of ``tp``, in order (``end`` at most the
    partition's end). Offsets no longer retained raise :class:`HandoffDataLostError`."""
    if start >= end:
        return
    consumer.assign([tp])
    consumer.seek(tp, start)
    try:
        async for record in _fetch_assigned(consumer, tp, start, end, timeout):
            yield record
    finally:
        consumer.unsubscribe()  # no fetching in the background until the next read


async def _fetch_assigned(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, timeout: float
) -> AsyncIterator[ConsumerRecord[Any, Any]]:
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
        for record in records:
            if record.offset >= end:
                return
            yield record
        if records:
            quiet_since = time.monotonic()
            if records[-1].offset + 1 >= end:
                return
        elif await consumer.position(tp) >= end:
            return
        elif time.monotonic() - quiet_since > timeout:
            raise TimeoutError(
                f"Kafka topic {tp.topic!r} partition {tp.partition} sent nothing for "
                f"{timeout:.0f} s while offsets {await consumer.position(tp)}..{end} were due"
            )
