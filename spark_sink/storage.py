"""What the Spark DataSource needs from the storage below a handoff log.

The DataSource deals in offsets and ranges only; a :class:`HandoffStorage` turns ranges into
picklable :class:`HandoffSplit` objects that Spark's executors read. Each backend keeps its
own: the embedded store's (:mod:`streams.backends.embedded.handoff_log`) and Kafka's
(:mod:`streams.backends.kafka.handoff_storage`); :mod:`spark_sink.options` finds the one a
read's options name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import pyarrow as pa

from spark_sink.offsets import OffsetRange, Offsets
from spark_sink.schema import HandoffSchema
from streams.core.errors import ConfigurationError

_STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def check_stream_name(stream: str) -> str:
    if not isinstance(stream, str) or not _STREAM_NAME.match(stream):
        raise ConfigurationError(
            f"handoff stream name {stream!r} must be letters, digits, '_', '.', '-' (it names a directory)"
        )
    return stream


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

    def offsets(self, stream: str) -> tuple[dict[int, int], dict[int, int]]:
        """:meth:`start_offsets` and :meth:`end_offsets` at once (on Kafka, one request)."""
        ...

    def admit(self, stream: str, start: Offsets, end: Offsets, max_rows: int) -> Offsets:
        """How far from ``start`` towards ``end`` a batch of at most ``max_rows`` rows goes."""
        ...

    def plan(self, stream: str, ranges: Sequence[OffsetRange]) -> list[HandoffSplit]:
        """One split per range (ranges come already cut to a task's size)."""
        ...

    def record_commit(self, stream: str, offsets: Mapping[int, int]) -> None:
        """Record that a Spark query has read and committed everything below ``offsets``,
        for ``headrace status`` (the latest commit of any query reading ``stream``)."""
        ...

    def trim(self, stream: str, offsets: Mapping[int, int]) -> None:
        """Release what lies below ``offsets`` (all readers are past it)."""
        ...

    def close(self) -> None: ...


def rebatch(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """Re-cut a stream of batches into batches of at most ``rows`` rows.

    A batch of over half ``rows`` goes as it is (sliced if over ``rows``: no copy); runs of
    smaller ones, as many small appends leave, are concatenated up to ``rows``, so Spark gets
    a few sizeable batches instead of many tiny ones.

    >>> small = [pa.record_batch({"x": [i]}) for i in range(5)]
    >>> [b.num_rows for b in rebatch(small, 2)]
    [2, 2, 1]
    >>> [b.num_rows for b in rebatch([pa.record_batch({"x": range(7)}), *small], 4)]
    [4, 3, 4, 1]
    """
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in batches:
        large = batch.num_rows * 2 > rows
        if pending and (large or pending_rows + batch.num_rows > rows):
            yield _joined(pending)
            pending, pending_rows = [], 0
        if large:
            for offset in range(0, batch.num_rows, rows):
                yield batch.slice(offset, rows)
        elif batch.num_rows:
            pending.append(batch)
            pending_rows += batch.num_rows
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
