"""Keeping the embedded handoff log small: retention of what no Spark query trims, compaction of
inline segments into files, and forgetting exactly-once marks no replay can need.

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

Small appends stay inline in the index (:mod:`spark_sink.log`); left so, a partition of a
busy stream would keep one index row per append. A compaction reads a partition's inline
segments, writes each run of consecutive ones as one Arrow file, and in the same write
transaction replaces the run's index rows by the file's. A reader that resolved its range
before the commit keeps the inline rows it was given, one after reads the file: the same
rows at the same offsets either way, never a gap or a repeat. Files are never touched, so
a compaction cannot pull a file from under a reader.

Forgetting the exactly-once marks no replay can need any more.

A handoff sink keeps a mark per source stream and key (:mod:`spark_sink.handoff`), so that a
replay after a crash does not hand a window off twice. Only a replay needs it, and a replay
reads records from the queue's checkpoint on: a mark last written before the oldest record a
restart could read again was written (the store's *replay horizon*) guards windows no replay
can make again. Left alone, marks would grow with every device that ever published; with
this they stay proportional to the streams of the last few minutes.

``margin`` allows for the clocks of the processes that enqueue records and the worker that
writes marks to differ.

>>> import sqlite3
>>> conn = sqlite3.connect(":memory:")
>>> for sql in MARKS_SCHEMA[0] + MARKS_SCHEMA[1] + MARKS_SCHEMA[2]:
...     _ = conn.execute(sql)
>>> _ = conn.execute("INSERT INTO handoff_marks VALUES ('h', 'devices/a', 'C', '', 60.0, 1000.0)")
>>> _ = conn.execute("INSERT INTO handoff_marks VALUES ('h', 'devices/b', 'C', '', 60.0, 1500.0)")
>>> retention = MarkRetention(lambda conn: 1400.0, margin=100.0, interval=0.0)
>>> retention.trim(conn, now=2000.0)
1
>>> [source for (source,) in conn.execute("SELECT source FROM handoff_marks")]
['devices/b']
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence

import pyarrow as pa

from spark_sink.log import HandoffLog, Segment, decode_rows
from streams.adapters.retention import RetentionPolicy

log = logging.getLogger("headrace.handoff")


def expire(handoff: HandoffLog, stream: str, policy: RetentionPolicy, now: float) -> dict[int, int]:
    """One retention pass over ``stream``'s partitions (one write transaction); returns the
    rows removed, by partition.

    >>> import tempfile
    >>> from streams.embedded.store import EmbeddedStore
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
    >>> from streams.embedded.store import EmbeddedStore
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


ReplayHorizon = Callable[[sqlite3.Connection], float | None]
"""When the oldest record a restart could read again was written (None: nothing to replay)."""

MARKS_SCHEMA: Sequence[Sequence[str]] = [
    [
        "CREATE TABLE handoff_marks(handoff TEXT NOT NULL, source TEXT NOT NULL, "
        "consumer TEXT NOT NULL, key TEXT NOT NULL, last_end REAL NOT NULL, "
        "PRIMARY KEY(handoff, source, consumer, key))"
    ],
    [
        "CREATE TABLE handoff_event_marks(handoff TEXT NOT NULL, source TEXT NOT NULL, "
        "consumer TEXT NOT NULL, mark BLOB NOT NULL, "  # EventMark.to_bytes()
        "PRIMARY KEY(handoff, source, consumer))"
    ],
    [
        # When each mark was last written (marks older than this version count from now).
        "ALTER TABLE handoff_marks ADD COLUMN written REAL NOT NULL DEFAULT 0",
        "ALTER TABLE handoff_event_marks ADD COLUMN written REAL NOT NULL DEFAULT 0",
        "UPDATE handoff_marks SET written = (julianday('now') - 2440587.5) * 86400.0",
        "UPDATE handoff_event_marks SET written = (julianday('now') - 2440587.5) * 86400.0",
    ],
]


class MarkRetention:
    """Deletes, at most once per ``interval`` seconds, the marks written more than ``margin``
    seconds before the store's replay horizon."""

    MARGIN = 300.0  # [s] clocks of different processes may differ by this much
    INTERVAL = 60.0  # [s] a trim reads each queue's first record after its checkpoint

    def __init__(self, horizon: ReplayHorizon, *, margin: float | None = None, interval: float | None = None) -> None:
        self._horizon = horizon
        self.margin = self.MARGIN if margin is None else margin
        self.interval = self.INTERVAL if interval is None else interval
        self._last = float("-inf")

    def trim(self, conn: sqlite3.Connection, now: float) -> int:
        """In ``conn``'s write transaction: forget the marks no replay can need; how many went."""
        if now - self._last < self.interval:
            return 0
        self._last = now
        horizon = self._horizon(conn)
        cutoff = (now if horizon is None else min(horizon, now)) - self.margin
        gone = conn.execute("DELETE FROM handoff_marks WHERE written < ?", (cutoff,)).rowcount
        gone += conn.execute("DELETE FROM handoff_event_marks WHERE written < ?", (cutoff,)).rowcount
        return gone
