"""Keeping the embedded handoff log small: retention of what no Spark query trims, and
compaction of small segments into larger files.

Retention of the embedded handoff log: what stays when no Spark query trims it.

A Spark query with ``trimOnCommit`` deletes what it has read. Without one (none started yet,
or ``trimOnCommit=false``), nothing else would, and a busy stream's log would grow for ever.
The queues' :class:`~streams.adapters.retention.RetentionPolicy` applies to the handoff log
too, partition by partition, by whole segments, always a prefix (offsets never move):

- ``max_age``: segments whose newest row was appended longer ago go;
- ``max_records_per_queue``: the oldest segments go while the partition would still hold
  that many rows without them.

Nobody tells the log what Spark has read, so either limit can delete rows a stopped query
has not read yet; that query then fails with ``HandoffDataLostError`` (as a Kafka source
does when the topic's retention passed it). The appender applies it every ``interval``.

Compaction: small segments merged into files, invisibly to readers.

Small appends stay inline in the index (:mod:`streams.backends.embedded.handoff_log`); left so, a partition of a
busy stream would keep one index row per append. And a partition of many small files costs
each reader a file open per few thousand rows, and a copy to join them into the batches it
hands Spark. A compaction writes each run of consecutive inline segments as one Arrow file,
and joins small files into files of one Spark batch (``BATCH_ROWS``), in the same write
transaction replacing the merged segments' index rows by the file's. A reader that resolved
its range before the commit reads what it was given: inline rows it holds, files still there
or, once deleted, the same rows at the same offsets in the new file, which it looks up then.
Never a gap or a repeat; a file is never rewritten in place.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator

import pyarrow as pa

from spark_sink.storage import BATCH_ROWS
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.handoff_log import HandoffLog, Segment, decode_rows, read_segment

log = logging.getLogger("headrace.handoff")


def expire(handoff: HandoffLog, stream: str, policy: RetentionPolicy, now: float) -> dict[int, int]:
    """One retention pass over ``stream``'s partitions (one write transaction); returns the
    rows removed, by partition.

    >>> import tempfile
    >>> from streams.backends.embedded.store import EmbeddedStore
    >>> from spark_sink.schema import HandoffSchema
    >>> store = EmbeddedStore(tempfile.mkdtemp())
    >>> handoff, schema = HandoffLog(store), HandoffSchema.of({"n": "bigint"})
    >>> handoff.declare("s", schema)
    >>> for n in range(3):
    ...     with store.transaction() as conn:
    ...         _ = handoff.append(conn, "s", 0, schema.to_table([(n,), (n,)]))
    >>> expire(handoff, "s", RetentionPolicy(max_age=None, max_records_per_queue=3), 0.0)
    {0: 2}
    >>> handoff.start_offsets("s"), handoff.end_offsets("s")
    ({0: 2}, {0: 6})
    """
    if policy.max_age is None and policy.max_records_per_queue is None:
        return {}
    removed: dict[int, int] = {}
    files: list[str] = []
    with handoff.store.transaction() as conn:
        partitions = conn.execute(
            "SELECT partition, start_offset, end_offset FROM handoff_partitions WHERE stream = ?", (stream,)
        ).fetchall()
        for partition, start, end in partitions:
            cut = start
            segments = conn.execute(
                "SELECT first_offset + row_count, appended FROM handoff_segments "
                "WHERE stream = ? AND partition = ? ORDER BY first_offset",
                (stream, partition),
            )
            for segment_end, appended in segments:  # a prefix: stop at the first one that stays
                old = policy.max_age is not None and appended is not None and appended < now - policy.max_age
                over = policy.max_records_per_queue is not None and end - segment_end >= policy.max_records_per_queue
                if not (old or over):
                    break
                cut = segment_end
            segments.close()
            if cut > start:
                files += handoff.trim_in(conn, stream, partition, cut)
                removed[partition] = cut - start
    handoff.unlink(files)
    if removed:
        log.info(
            "retention removed %d rows of handoff stream %r (partitions %s); a Spark query that "
            "had not read them fails with HandoffDataLostError",
            sum(removed.values()),
            stream,
            sorted(removed),
        )
    return removed


# Compact once this many bytes of inline rows have gathered in a partition: the files it
# makes then hold about this much.
COMPACT_BYTES = 256 * 1024


def compact(
    log: HandoffLog,
    stream: str,
    partition: int,
    schema: pa.Schema,
    target_rows: int = BATCH_ROWS,
    groups: int | None = None,
) -> int:
    """Merge ``stream``/``partition``'s small segments, at most ``groups`` groups of them (all
    when ``None``); return how many segments were merged away.

    Two merges, each of consecutive segments of fewer than ``target_rows`` rows:

    - every run of two or more inline segments becomes one file (the index keeps a row per
      file, not per append);
    - small files, as large appends and the first merge leave them, are joined into files of
      up to ``target_rows`` rows once there are enough to fill one (a reader then opens one
      file per batch it hands Spark, and copies nothing to join them). A partial group waits
      for more, so a row is rewritten at most twice.

    Blocking (a write transaction a group, so that other writers wait for one file's write
    at most; the file is written and fsynced inside it, so that
    :meth:`HandoffLog.remove_orphans` never mistakes it for an orphan). A crash leaves
    either a group's old segments or its new file indexed, and at most an unindexed file
    behind; a failure removes its file and keeps the groups merged before it.
    A group's merged files are deleted after its commit; a read planned before it finds their rows
    in the new file (:class:`~streams.backends.embedded.handoff_log.SegmentSplit`).

    >>> import tempfile
    >>> from streams.backends.embedded.store import EmbeddedStore
    >>> from spark_sink.schema import HandoffSchema
    >>> store = EmbeddedStore(tempfile.mkdtemp())
    >>> log, schema = HandoffLog(store), HandoffSchema.of({"n": "bigint"})
    >>> log.declare("s", schema)
    >>> for n in range(3):
    ...     with store.transaction() as conn:
    ...         _ = log.append(conn, "s", 0, schema.to_table([(n,)]))
    >>> compact(log, "s", 0, schema.arrow)
    3
    >>> [(s.first_offset, s.row_count, s.inline) for s in log.segments("s", 0, 0, 3)]
    [(0, 3, False)]
    """
    merged = done = 0
    while groups is None or done < groups:  # a transaction a group: the lock is held for one file's write
        file = ""
        try:
            with log.store.transaction() as conn:
                group, newest = _next_merge(conn, stream, partition, target_rows)
                if not group:
                    break
                table = pa.Table.from_batches([b for s in group for b in _batches(log, s, schema)], schema=schema)
                first, last = group[0].first_offset, group[-1].first_offset
                file = log.write_file(stream, partition, first, table)
                conn.execute(
                    "DELETE FROM handoff_segments WHERE stream = ? AND partition = ? AND first_offset BETWEEN ? AND ?",
                    (stream, partition, first, last),
                )
                log.index(conn, stream, Segment(partition, first, table.num_rows, file), newest)
        except BaseException:
            log.unlink([file])  # not committed: each failed try would leave an orphan behind
            raise
        log.unlink([s.file for s in group])
        merged += len(group)
        done += 1
    return merged


def _next_merge(
    conn: sqlite3.Connection, stream: str, partition: int, target_rows: int
) -> tuple[list[Segment], float | None]:
    """The first group :func:`_merges` finds in the index now, and when its newest row was
    appended: the merged file is as young as that, so retention by age never takes a row early."""
    rows = conn.execute(
        "SELECT first_offset, row_count, file, data, appended FROM handoff_segments "
        "WHERE stream = ? AND partition = ? AND row_count < ? ORDER BY first_offset",
        (stream, partition, target_rows),
    ).fetchall()
    appended = {first: when for first, _, _, _, when in rows}
    segments = [Segment(partition, first, count, file, data) for first, count, file, data, _ in rows]
    for group in _merges(segments, target_rows):
        times = [appended[s.first_offset] for s in group if appended[s.first_offset] is not None]
        return group, max(times, default=None)
    return [], None


def _merges(segments: list[Segment], target_rows: int) -> list[list[Segment]]:
    """The groups :func:`compact` merges, from small ``segments`` in offset order: within each
    run of consecutive ones, greedy groups of up to ``target_rows`` rows that the next
    segment would overflow, then, in the last (partial) group, the runs of inline ones."""
    merges: list[list[Segment]] = []
    for run in _runs(segments):
        group: list[Segment] = []
        rows = 0
        for segment in run:
            if group and rows + segment.row_count > target_rows:
                merges.append(group)
                group, rows = [], 0
            group.append(segment)
            rows += segment.row_count
        merges += _runs([s for s in group if s.inline])
    return [group for group in merges if len(group) > 1]


def _batches(log: HandoffLog, segment: Segment, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    if segment.data is not None:
        yield decode_rows(segment.data, schema)
    else:
        yield from read_segment(os.path.join(log.path, segment.file))


def inline_bytes(log: HandoffLog, stream: str, partition: int) -> int:
    """How many bytes of inline rows ``stream``/``partition`` holds now."""
    with log.store.snapshot() as conn:
        (total,) = conn.execute(
            "SELECT coalesce(sum(length(data)), 0) FROM handoff_segments WHERE stream = ? AND partition = ?",
            (stream, partition),
        ).fetchone()
    return int(total)


def _runs(segments: list[Segment]) -> list[list[Segment]]:
    """``segments`` (in offset order) cut where one does not start at the previous one's end."""
    runs: list[list[Segment]] = []
    for segment in segments:
        if runs and runs[-1][-1].end_offset == segment.first_offset:
            runs[-1].append(segment)
        else:
            runs.append([segment])
    return runs
