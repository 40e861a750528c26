"""Retention of the embedded handoff log: what stays when no Spark query trims it.

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
"""

from __future__ import annotations

import logging

from spark_sink.log import HandoffLog
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
