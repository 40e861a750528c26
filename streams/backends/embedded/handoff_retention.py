"""Keeping the embedded handoff log small: retention of what no Spark query trims, and
compaction of inline segments into files.

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

Merging a handoff partition's inline segments into segment files, invisibly to readers.

Small appends stay inline in the index (:mod:`streams.backends.embedded.handoff_log`); left so, a partition of a
busy stream would keep one index row per append. A compaction reads a partition's inline
segments, writes each run of consecutive ones as one Arrow file, and in the same write
transaction replaces the run's index rows by the file's. A reader that resolved its range
before the commit keeps the inline rows it was given, one after reads the file: the same
rows at the same offsets either way, never a gap or a repeat. Files are never touched, so
a compaction cannot pull a file from under a reader.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.handoff_log import HandoffLog, Segment, decode_rows

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


def compact(log: HandoffLog, stream: str, partition: int, schema: pa.Schema) -> int:
    """Merge every run of two or more consecutive inline segments of ``stream``/``partition``
    into one file; return how many segments were merged away.

    Blocking (one write transaction; the file is written and fsynced inside it, so that
    :meth:`HandoffLog.remove_orphans` never mistakes it for an orphan). A crash leaves
    either the inline rows or the file indexed, and at most an unindexed file behind.

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
    merged = 0
    with log.store.transaction() as conn:
        rows = conn.execute(
            "SELECT first_offset, row_count, data, appended FROM handoff_segments "
            "WHERE stream = ? AND partition = ? AND data IS NOT NULL ORDER BY first_offset",
            (stream, partition),
        ).fetchall()
        appended = {first: when for first, _, _, when in rows}
        for run in _runs([Segment(partition, first, count, "", data) for first, count, data, _ in rows]):
            if len(run) < 2:
                continue
            table = pa.Table.from_batches([decode_rows(s.data or b"", schema) for s in run], schema=schema)
            first, last = run[0].first_offset, run[-1].first_offset
            file = log.write_file(stream, partition, first, table)
            conn.execute(
                "DELETE FROM handoff_segments WHERE stream = ? AND partition = ? AND first_offset BETWEEN ? AND ?",
                (stream, partition, first, last),
            )
            # The file is as young as its newest row: retention by age never takes a row early.
            newest = max((appended[s.first_offset] for s in run if appended[s.first_offset] is not None), default=None)
            log.index(conn, stream, Segment(partition, first, table.num_rows, file), newest)
            merged += len(run)
    return merged


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
