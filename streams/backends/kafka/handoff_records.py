"""What the Kafka handoff log's topics hold, and their names: a record is one append (its
rows as an Arrow IPC stream, in its headers the writer's source, consumer, marks and expected
offset); a declaration names a stream's schema and partition count; a marks snapshot is what
a writer knows of one partition (:class:`PartitionMarks`). How they are read and written is
:mod:`streams.backends.kafka.handoff_log`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgpack
import pyarrow as pa
from aiokafka import ConsumerRecord

from spark_sink.schema import HandoffSchema
from spark_sink.storage import check_stream_name

_EXPECT, _SOURCE, _CONSUMER, _MARKS, _ROWS, _EVENTS = (
    "headrace-expect",
    "headrace-source",
    "headrace-consumer",
    "headrace-marks",
    "headrace-rows",
    "headrace-events",
)


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
        return list(pa.ipc.open_stream(self.value, options=_READ_OPTIONS))

    @classmethod
    def decode(cls, record: ConsumerRecord[bytes, bytes]) -> HandoffRecord:
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


def record_headers(
    expected: int, source: str, consumer: str, marks: Mapping[str, float], rows: int, events: bytes | None = None
) -> list[tuple[str, bytes]]:
    """The headers of a record that :meth:`HandoffRecord.decode` reads back."""
    headers = [
        (_EXPECT, str(expected).encode()),
        (_SOURCE, source.encode()),
        (_CONSUMER, consumer.encode()),
        (_MARKS, msgpack.packb(dict(marks))),
        (_ROWS, str(rows).encode()),
    ]
    if events is not None:
        headers.append((_EVENTS, events))
    return headers


# Arrow's own body compression, read back by any Arrow IPC reader: window rows shrink about
# sevenfold, and a Kafka read is bound by the bytes the broker serves, not by the LZ4 decoding.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
# Decoded on the caller's thread: Arrow's thread pool, decompressing a record's few buffers in
# parallel, costs more than it saves at an append's size (a fifth more CPU for 5,000 rows).
_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)


def encode_rows(table: pa.Table) -> bytes:
    """One append's rows as the record's value: an Arrow IPC stream, its buffers LZ4-compressed.

    >>> table = pa.table({"n": list(range(1000))})
    >>> len(encode_rows(table)) < table.nbytes
    True
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    encoded: bytes = sink.getvalue().to_pybytes()
    return encoded


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
        encoded: bytes = msgpack.packb(
            {
                "end": self.end,
                "marks": [[s, c, m] for (s, c), m in self.marks.items()],
                "events": [[s, c, m] for (s, c), m in self.events.items()],
            }
        )
        return encoded

    @classmethod
    def from_bytes(cls, data: bytes) -> PartitionMarks:
        snapshot = msgpack.unpackb(data)
        return cls(
            snapshot["end"],
            {(s, c): dict(m) for s, c, m in snapshot["marks"]},
            {(s, c): m for s, c, m in snapshot.get("events", ())},
        )
