"""What the Spark DataSource needs from the storage below a handoff log.

The DataSource deals in offsets and ranges only; a :class:`HandoffStorage` turns ranges into
picklable :class:`HandoffSplit`\\ s that Spark's executors read. :class:`EmbeddedStorage` is
the store directory (:class:`~spark_sink.log.HandoffLog`); Kafka topics are the other
(:mod:`spark_sink.kafka.storage`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from spark_sink.errors import HandoffDataLostError
from spark_sink.log import HandoffLog, decode_rows, read_segment, rebatch
from spark_sink.offsets import OffsetRange, Offsets, admit
from spark_sink.schema import HandoffSchema

# Rows per record batch handed to Spark: large enough that per-batch costs vanish, small
# enough that a batch stays a few MB.
BATCH_ROWS = 1 << 16


class HandoffSplit(Protocol):
    """One Spark task's share of a read. Pickled to an executor and read there."""

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows of the split in offset order, as batches of the declared schema."""
        ...


class HandoffStorage(Protocol):
    """The durable log a handoff stream lives in, as the DataSource sees it."""

    def schema(self, stream: str) -> HandoffSchema:
        """The stream's declared output; unknown streams raise ``UnknownHandoffStreamError``."""
        ...

    def start_offsets(self, stream: str) -> dict[int, int]:
        """The first offset still retained, per partition."""
        ...

    def end_offsets(self, stream: str) -> dict[int, int]:
        """One past the last committed offset, per partition."""
        ...

    def admit(self, stream: str, start: Offsets, end: Offsets, max_rows: int) -> Offsets:
        """How far from ``start`` towards ``end`` a batch of at most ``max_rows`` rows goes."""
        ...

    def plan(self, stream: str, ranges: Sequence[OffsetRange]) -> list[HandoffSplit]:
        """One split per range (ranges come already cut to a task's size)."""
        ...

    def trim(self, stream: str, offsets: Mapping[int, int]) -> None:
        """Release what lies below ``offsets`` (all readers are past it)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SegmentSplit:
    """Offsets ``range`` of an embedded handoff log, with the segments that hold them,
    resolved at planning time (one query a range) so executors need no database: files by name,
    inline segments by their rows (a compaction that merges them into a file later changes
    nothing for this split)."""

    root: str
    stream: str
    range: OffsetRange
    segments: tuple[tuple[str, int, int, bytes | None], ...]  # (file, first_offset, row_count, inline rows)
    schema: pa.Schema  # what the inline rows decode to

    def batches(self) -> Iterator[pa.RecordBatch]:
        return rebatch(self._segment_batches(), BATCH_ROWS)

    def _segment_batches(self) -> Iterator[pa.RecordBatch]:
        lo, hi = self.range.start, self.range.end
        for file, first, count, data in self.segments:
            skip = max(lo - first, 0)
            take = min(hi, first + count) - max(lo, first)
            if data is not None:
                yield decode_rows(data, self.schema).slice(skip, take)
                continue
            try:
                yield from read_segment(os.path.join(self.root, file), skip, take)
            except FileNotFoundError:
                raise HandoffDataLostError(
                    f"segment {file!r} of handoff stream {self.stream!r} was trimmed before "
                    "this read: another query committed past it with trimOnCommit (give each "
                    "query but one trimOnCommit=false), or the store's retention policy removed "
                    "it (keep more: [provider.retention])"
                ) from None


class EmbeddedStorage:
    """A store directory's handoff log, for the DataSource.

    >>> import tempfile
    >>> EmbeddedStorage(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_sink.errors.HandoffStoreNotFoundError: no headrace store at ...
    """

    def __init__(self, path: str) -> None:
        self.log = HandoffLog.open(path)

    def schema(self, stream: str) -> HandoffSchema:
        return self.log.schema(stream)

    def start_offsets(self, stream: str) -> dict[int, int]:
        return self.log.start_offsets(stream)

    def end_offsets(self, stream: str) -> dict[int, int]:
        return self.log.end_offsets(stream)

    def admit(self, stream: str, start: Offsets, end: Offsets, max_rows: int) -> Offsets:
        return admit(start, end, max_rows)  # an offset is a row here

    def plan(self, stream: str, ranges: Sequence[OffsetRange]) -> list[HandoffSplit]:
        schema = self.log.schema(stream).arrow
        return [
            SegmentSplit(
                self.log.path,
                stream,
                r,
                tuple(
                    (s.file, s.first_offset, s.row_count, s.data)
                    for s in self.log.segments(stream, r.partition, r.start, r.end)
                ),
                schema,
            )
            for r in ranges
        ]

    def trim(self, stream: str, offsets: Mapping[int, int]) -> None:
        for partition, offset in offsets.items():
            self.log.trim(stream, partition, offset)
        self.log.remove_orphans(stream)

    def close(self) -> None:
        self.log.close()
