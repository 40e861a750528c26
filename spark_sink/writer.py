"""The handoff writer: how the runtime hands a consumer's finalized output to Spark.

One writer per handoff stream (a consumer's declared output). The queue's owner appends what
the watermark finalized for that queue (closed windows, or events released in timestamp
order) to the partition of the same number, inside the transaction that also saves its input
checkpoint: after a crash either both are there or neither, so replay from the checkpoint
recomputes exactly the rows that were not handed off.
"""

from __future__ import annotations

import sqlite3

from spark_sink.log import HandoffLog, Segment, check_stream_name
from spark_sink.schema import HandoffData, HandoffSchema
from streams.core.ids import QueueId


class HandoffWriter:
    """Appends rows of one declared handoff stream, partition by partition.

    >>> import tempfile
    >>> from streams.embedded.store import EmbeddedStore
    >>> store = EmbeddedStore(tempfile.mkdtemp())
    >>> schema = HandoffSchema.windows({"count": "bigint"})
    >>> writer = HandoffWriter(HandoffLog(store), "counts", schema)
    >>> with store.transaction() as conn:  # the caller's checkpoint is saved here too
    ...     writer.append(conn, 0, [(0.0, 60.0, "a", 3), (0.0, 60.0, "b", 1)]).end_offset
    2
    >>> writer.end_offsets()
    {0: 2}
    """

    def __init__(self, log: HandoffLog, stream: str, schema: HandoffSchema) -> None:
        self.log = log
        self.stream = check_stream_name(stream)
        self.schema = schema
        log.declare(stream, schema)
        # Files of attempts that crashed before their commit: safe to drop at start-up.
        log.remove_orphans(stream)

    def append(self, conn: sqlite3.Connection, partition: int | QueueId, data: HandoffData) -> Segment | None:
        """Append ``data`` (rows or Arrow data of the declared schema) to ``partition``.

        A large append's segment file is written and fsynced now (blocking: in async code
        call it inside ``store.write(fn)``); a small one's rows go inline into its index row.
        The index row goes into ``conn``'s open write transaction and becomes visible to
        Spark when the caller commits. If the caller rolls back or crashes instead, an inline
        segment vanishes with the transaction, and a file is an orphan that readers ignore and
        a later writer removes. (Many concurrent small appends: ``GroupAppender``.)
        Returns the new segment (its offsets), or ``None`` when ``data`` has no rows.
        """
        table = self.schema.to_table(data)
        if table.num_rows == 0:
            return None
        return self.log.append(conn, self.stream, _number(partition), table)

    def end_offsets(self) -> dict[int, int]:
        """The next offset of each partition, as committed."""
        return self.log.end_offsets(self.stream)

    def trim(self, partition: int | QueueId, up_to: int) -> int:
        """Delete whole segments below ``up_to`` (what every reader has consumed)."""
        return self.log.trim(self.stream, _number(partition), up_to)


def _number(partition: int | QueueId) -> int:
    """Handoff partitions are numbered like the queues whose output they carry."""
    return partition.number if isinstance(partition, QueueId) else partition
