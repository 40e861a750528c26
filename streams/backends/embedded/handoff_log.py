"""The embedded handoff log: Arrow IPC segments indexed in the store's SQLite db, the writer the
runtime appends through, and the reading side the Spark DataSource plans on.

Layout under a store directory ``path`` (shared with the embedded queues, checkpoints, ...)::

    path/headrace.db                                    handoff_* tables (streams.backends.embedded.store)
    path/handoff/<stream>/<partition>/<offset>-<tag>.arrow    segment files

Offsets are dense per (stream, partition): an append of ``n`` rows takes offsets
``[end, end + n)``. A segment exists for readers only once its index row is committed, and
that row is written in the *caller's* transaction, so a handoff commits or vanishes together
with whatever else the caller writes there (its input checkpoint).

A small append (up to ``inline_bytes`` as an Arrow record batch) is kept *inline*: its
record batch message sits in its index row, and no file is made. A file costs a disk block
(4 KiB for one 400-byte row), two fsyncs and an inode; the inline row costs its bytes, and is
exactly as durable as the index that makes it visible.
:mod:`streams.backends.embedded.handoff_retention` later merges runs of inline segments into
one file, swapping the index rows in one transaction.

A file whose index row never committed is an orphan: readers never see it, and
:meth:`HandoffLog.remove_orphans` deletes it once the partition has moved past its offset.

Segment files are written durably once and read memory-mapped, without copying. A segment
holds a run of consecutive offsets of one handoff partition. Files are never rewritten: a
name is unique to one write attempt, so a retried append never touches the file of an
earlier attempt that another process might still be reading.

The writer (:class:`HandoffWriter`), one per handoff stream (a consumer's declared output):
the queue's owner appends what the watermark finalized for that queue (closed windows, or
events released in timestamp order) to the partition of the same number, inside the
transaction that also saves its input checkpoint: after a crash either both are there or
neither, so replay from the checkpoint recomputes exactly the rows that were not handed off.

The reading side: :class:`EmbeddedStorage` is the store directory as the Spark DataSource sees
it (a :class:`~spark_sink.storage.HandoffStorage`), and :class:`SegmentSplit` what an executor
reads of it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_sink.offsets import OffsetRange, Offsets, admit
from spark_sink.options import ReadOptions
from spark_sink.schema import HandoffData, HandoffSchema
from spark_sink.storage import BATCH_ROWS, HandoffSplit, check_stream_name, rebatch
from streams.backends.embedded import spark_commits
from streams.backends.embedded.store import EmbeddedStore, Schema
from streams.core.clock import wall_time
from streams.core.errors import (
    ConfigurationError,
    HandoffDataLostError,
    HandoffSchemaError,
    HandoffStoreNotFoundError,
    UnknownHandoffStreamError,
)
from streams.core.ids import QueueId

HANDOFF_DIR = "handoff"
# Appends up to this size (as an Arrow record batch) stay inline in the index; larger ones
# get a file of their own, read memory-mapped.
INLINE_BYTES = 64 * 1024

HANDOFF_SCHEMA: Schema = [
    "CREATE TABLE handoff_streams( stream TEXT PRIMARY KEY, schema TEXT NOT NULL)",  # HandoffSchema.to_json()
    "CREATE TABLE handoff_partitions("
    " stream TEXT NOT NULL, partition INTEGER NOT NULL,"
    " start_offset INTEGER NOT NULL,"  # the first offset still retained (trim moves it)
    " end_offset INTEGER NOT NULL,"  # the offset the next append takes
    " PRIMARY KEY (stream, partition)) WITHOUT ROWID",
    "CREATE TABLE handoff_segments("
    " stream TEXT NOT NULL, partition INTEGER NOT NULL,"
    " first_offset INTEGER NOT NULL, row_count INTEGER NOT NULL,"
    " file TEXT NOT NULL,"  # relative to the store directory
    " data BLOB,"  # an inline segment: file '' and its rows here (segments.encode_rows), NULL for a file
    " appended REAL,"  # when the segment's newest row was appended (wall_time()), for retention by age
    " PRIMARY KEY (stream, partition, first_offset)) WITHOUT ROWID",
]


@dataclass(frozen=True, slots=True)
class Segment:
    """One committed segment: rows ``[first_offset, end_offset)`` of a partition, in a file
    or inline (``file`` is then ``''`` and ``data`` holds the rows)."""

    partition: int
    first_offset: int
    row_count: int
    file: str  # relative to the store directory; '' for an inline segment
    data: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.row_count

    @property
    def inline(self) -> bool:
        return self.data is not None


class HandoffLog:
    """The handoff log of one embedded store: declared streams, offsets, segments, trimming.

    >>> import tempfile
    >>> log = HandoffLog(EmbeddedStore(tempfile.mkdtemp()))
    >>> log.declare("averages", HandoffSchema.windows({"mean": "double"}))
    >>> log.end_offsets("averages")
    {}
    """

    def __init__(self, store: EmbeddedStore, *, create_tables: bool = True, inline_bytes: int = INLINE_BYTES) -> None:
        if create_tables:
            store.require_schema("handoff", HANDOFF_SCHEMA)
        self.store = store
        self.path = os.path.abspath(store.path)
        self.inline_bytes = inline_bytes
        self._database = os.path.realpath(store.database)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> HandoffLog:
        """The log of an existing store, for readers (Spark): a wrong path is an error, not
        a new empty store, and opening writes nothing (no schema migration)."""
        if not os.path.isfile(os.path.join(path, EmbeddedStore.FILE_NAME)):
            raise HandoffStoreNotFoundError(
                f"no headrace store at {os.fspath(path)!r} (no {EmbeddedStore.FILE_NAME} "
                "there): the path option names the store directory the runtime writes to"
            )
        store = EmbeddedStore(path)
        with store.snapshot() as conn:
            (tables,) = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                ("handoff_streams",),
            ).fetchone()
            store.check_layout(conn)
        if not tables:
            store.close()
            raise UnknownHandoffStreamError(
                f"the store at {os.fspath(path)!r} has no handoff streams yet: start the "
                "runtime with a consumer that hands off to Spark first"
            )
        return cls(store, create_tables=False)

    def close(self) -> None:
        self.store.close()

    # -- declarations -------------------------------------------------------------------

    def declare(self, stream: str, schema: HandoffSchema) -> None:
        """Record ``stream``'s output schema; declaring it again must declare the same."""
        check_stream_name(stream)
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO handoff_streams (stream, schema) VALUES (?, ?)",
                (stream, schema.to_json()),
            )
            (stored,) = conn.execute("SELECT schema FROM handoff_streams WHERE stream = ?", (stream,)).fetchone()
        if stored != schema.to_json():
            raise HandoffSchemaError(
                f"handoff stream {stream!r} is already declared as "
                f"({HandoffSchema.from_json(stored).ddl()}), not ({schema.ddl()}): a changed "
                "output needs a new stream name"
            )

    def schema(self, stream: str) -> HandoffSchema:
        """The declared output of ``stream``."""
        row = self._query("SELECT schema FROM handoff_streams WHERE stream = ?", (stream,))
        if not row:
            known = ", ".join(sorted(self.streams())) or "none yet"
            raise UnknownHandoffStreamError(
                f"no handoff stream {stream!r} in the store at {self.path!r} "
                f"(declared streams: {known}); the stream option names a consumer's output"
            )
        return HandoffSchema.from_json(row[0][0])

    def streams(self) -> dict[str, HandoffSchema]:
        """Every declared stream and its schema."""
        rows = self._query("SELECT stream, schema FROM handoff_streams", ())
        return {stream: HandoffSchema.from_json(text) for stream, text in rows}

    # -- offsets and segments -----------------------------------------------------------

    def start_offsets(self, stream: str) -> dict[int, int]:
        """The first retained offset of each partition that has ever received rows."""
        return self._offsets(stream, "start_offset")

    def end_offsets(self, stream: str) -> dict[int, int]:
        """The offset the next append takes, per partition (everything below is readable)."""
        return self._offsets(stream, "end_offset")

    def _offsets(self, stream: str, column: str) -> dict[int, int]:
        rows = self._query(
            f"SELECT partition, {column} FROM handoff_partitions WHERE stream = ? ORDER BY partition",
            (stream,),
        )
        return dict(rows)

    def segments(self, stream: str, partition: int, start: int, end: int) -> list[Segment]:
        """The committed segments that together hold offsets ``[start, end)``.

        Raises :class:`HandoffDataLostError` when part of the range is no longer retained.
        """
        if start >= end:
            return []
        rows = self._query(
            "SELECT first_offset, row_count, file, data FROM handoff_segments "
            "WHERE stream = ? AND partition = ? AND first_offset < ? "
            "AND first_offset + row_count > ? ORDER BY first_offset",
            (stream, partition, end, start),
        )
        found = [Segment(partition, first, count, file, data) for first, count, file, data in rows]
        covered, gap_end = start, end
        for segment in found:
            if segment.first_offset > covered:
                gap_end = segment.first_offset
                break
            covered = segment.end_offset
        if covered < end:
            raise HandoffDataLostError(
                f"offsets {covered}..{gap_end} of handoff stream {stream!r} partition {partition} "
                f"are not in the log at {self.path!r} (trimmed after another reader's commit, "
                "removed by the store's retention policy, or the store was replaced): restart "
                "the query with a new checkpoint"
            )
        return found

    def partition_dir(self, stream: str, partition: int) -> str:
        return os.path.join(self.path, HANDOFF_DIR, stream, str(partition))

    def append(self, conn: sqlite3.Connection, stream: str, partition: int, table: pa.Table) -> Segment:
        """Write ``table`` as the next segment of ``stream``/``partition`` and index it in
        ``conn``'s open write transaction. The caller commits; until it does, no reader sees
        the rows. ``table`` must already match the declared schema. Up to ``inline_bytes``
        the rows go into the index row itself, else into a new file.
        """
        self._check_same_db(conn)
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ConfigurationError(f"a handoff partition is an int >= 0, not {partition!r}")
        if not conn.in_transaction:
            raise ConfigurationError(
                "append runs inside the caller's write transaction (store.transaction() or "
                "store.write(fn)), so that the handoff commits with the caller's checkpoint"
            )
        row = conn.execute(
            "SELECT end_offset FROM handoff_partitions WHERE stream = ? AND partition = ?",
            (stream, partition),
        ).fetchone()
        first = row[0] if row else 0
        # nbytes first: a large table is never encoded only to learn that it is large.
        data = encode_rows(table) if table.nbytes <= self.inline_bytes else None
        if data is not None and len(data) > self.inline_bytes:
            data = None
        relative = "" if data is not None else self.write_file(stream, partition, first, table)
        segment = Segment(partition, first, table.num_rows, relative, data)
        try:
            conn.execute(
                "INSERT INTO handoff_partitions (stream, partition, start_offset, end_offset) "
                "VALUES (?, ?, 0, ?) ON CONFLICT (stream, partition) "
                "DO UPDATE SET end_offset = excluded.end_offset",
                (stream, partition, segment.end_offset),
            )
            self.index(conn, stream, segment)
        except BaseException:
            self.unlink([relative])
            raise
        return segment

    def write_file(self, stream: str, partition: int, first: int, table: pa.Table) -> str:
        """Write ``table`` durably as a new segment file starting at offset ``first``; return
        its path relative to the store. Index it in the same write transaction (an unindexed
        file below the partition's end is an orphan to :meth:`remove_orphans`)."""
        directory = self.partition_dir(stream, partition)
        self._make_dirs(directory)
        file = os.path.join(directory, segment_name(first))
        write_segment(file, table, self.store.file_mode)
        return os.path.relpath(file, self.path)

    @staticmethod
    def index(conn: sqlite3.Connection, stream: str, segment: Segment, appended: float | None = None) -> None:
        """Insert ``segment``'s index row in ``conn``'s write transaction; ``appended`` is
        when its newest row was (now, unless given)."""
        s = segment
        conn.execute(
            "INSERT INTO handoff_segments (stream, partition, first_offset, row_count, file, data, appended) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (stream, s.partition, s.first_offset, s.row_count, s.file, s.data, appended or wall_time()),
        )

    # -- housekeeping -------------------------------------------------------------------

    def trim(self, stream: str, partition: int, up_to: int) -> int:
        """Delete the segments that lie wholly below offset ``up_to``; return how many.

        Offsets stay as they are: trimming only raises the partition's start offset.
        """
        with self.store.transaction() as conn:
            files = self.trim_in(conn, stream, partition, up_to)
        self.unlink(files)
        return len(files)

    @staticmethod
    def trim_in(conn: sqlite3.Connection, stream: str, partition: int, up_to: int) -> list[str]:
        """:meth:`trim` in ``conn``'s write transaction; returns the trimmed segments' files
        ('' for an inline one), to :meth:`unlink` once the transaction has committed."""
        doomed = conn.execute(
            "SELECT first_offset + row_count, file FROM handoff_segments "
            "WHERE stream = ? AND partition = ? AND first_offset + row_count <= ?",
            (stream, partition, up_to),
        ).fetchall()
        if doomed:
            conn.execute(
                "DELETE FROM handoff_segments WHERE stream = ? AND partition = ? AND first_offset + row_count <= ?",
                (stream, partition, up_to),
            )
            conn.execute(
                "UPDATE handoff_partitions SET start_offset = MAX(start_offset, ?) WHERE stream = ? AND partition = ?",
                (max(end for end, _ in doomed), stream, partition),
            )
        return [file for _, file in doomed]

    def unlink(self, files: list[str]) -> None:
        """Delete trimmed segments' files. Only after the commit: a crash in between leaves
        orphans, removed later."""
        for file in files:
            if file:  # '' is an inline segment: gone with its row
                _unlink(os.path.join(self.path, file))

    def remove_orphans(self, stream: str) -> int:
        """Delete segment files that can never be committed; return how many.

        A file is dead when its index row is absent and its partition has already moved
        past its first offset (a crash or rollback before the commit, a trim interrupted
        before its unlink, a compaction that did not commit). One at the current end is
        kept until an append moves past it.
        """
        root = Path(self.path, HANDOFF_DIR, stream)
        if not root.is_dir():
            return 0
        # Under the write lock: a writer writes a file and commits its index row inside one
        # write transaction (appends and compaction alike), so no file seen here unindexed
        # is about to be indexed.
        removed = 0
        with self.store.transaction() as conn:
            indexed = {
                file for (file,) in conn.execute("SELECT file FROM handoff_segments WHERE stream = ?", (stream,))
            }
            ends = dict(
                conn.execute(
                    "SELECT partition, end_offset FROM handoff_partitions WHERE stream = ?",
                    (stream,),
                ).fetchall()
            )
            for directory in root.iterdir():
                if not directory.name.isdigit():
                    continue
                end = ends.get(int(directory.name), 0)
                for file in directory.iterdir():
                    first = first_offset_of(file.name)
                    if first is None or first >= end:
                        continue
                    if os.path.relpath(file, self.path) not in indexed:
                        _unlink(str(file))
                        removed += 1
        return removed

    # -- plumbing -----------------------------------------------------------------------

    def _query(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        with self.store.snapshot() as conn:
            return conn.execute(sql, args).fetchall()

    def _check_same_db(self, conn: sqlite3.Connection) -> None:
        for _, name, file in conn.execute("PRAGMA database_list"):
            if name == "main" and os.path.realpath(file) == self._database:
                return
        raise ConfigurationError(
            f"append needs a connection to {self._database!r}, the store the handoff log "
            "lives in, so that the handoff commits with the caller's checkpoint"
        )

    def _make_dirs(self, directory: str) -> None:
        if os.path.isdir(directory):
            return
        self.store.make_dir(directory)
        # New directory entries must survive a crash, like the files inside them: fsync
        # the parents of <partition>, <stream> and handoff/.
        parent = directory
        for _ in range(3):
            parent = os.path.dirname(parent)
            fsync_dir(parent)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


SUFFIX = ".arrow"


def segment_name(first_offset: int) -> str:
    """A fresh file name that sorts by offset and is unique to this write attempt."""
    return f"{first_offset:020d}-{secrets.token_hex(4)}{SUFFIX}"


def first_offset_of(name: str) -> int | None:
    """The first offset encoded in a segment file name, or ``None`` if it is not one."""
    if not name.endswith(SUFFIX):
        return None
    head = name.partition("-")[0]
    return int(head) if head.isdigit() else None


def fsync_dir(path: str) -> None:
    """Make a directory's entries durable (a new file's name, not only its bytes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(path: str, table: pa.Table, mode: int = 0o600) -> None:
    """Write ``table`` to a new IPC file at ``path`` and fsync it and its directory.

    ``path`` must not exist. On failure the partial file is removed. Uncompressed on
    purpose: readers map the file and hand its buffers to Spark as they are.
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        # One record batch: many small chunks (merged appends) would each pay a batch's
        # metadata and padding in the file.
        writer.write_table(table.combine_chunks())
    view = memoryview(sink.getvalue())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.fchmod(fd, mode)  # exactly: open's mode is narrowed by the umask
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(os.path.dirname(path))
    except BaseException:
        os.unlink(path)
        raise


def encode_rows(table: pa.Table) -> bytes:
    """``table``'s rows as one Arrow IPC record batch message, without the schema (the log
    declares it once): the lean form of a small append, about 400 bytes for one row of a
    window, where a segment file takes a 4 KiB block.

    >>> table = pa.table({"x": [1, 2]})
    >>> decode_rows(encode_rows(table), table.schema).num_rows
    2
    """
    (batch,) = table.combine_chunks().to_batches(max_chunksize=max(table.num_rows, 1)) or [
        pa.record_batch([pa.array([], f.type) for f in table.schema], schema=table.schema)
    ]
    data: bytes = batch.serialize().to_pybytes()
    return data


def decode_rows(data: bytes, schema: pa.Schema) -> pa.RecordBatch:
    """The record batch :func:`encode_rows` made (zero-copy over ``data``)."""
    return pa.ipc.read_record_batch(pa.py_buffer(data), schema)


def read_segment(path: str, skip: int = 0, take: int | None = None) -> Iterator[pa.RecordBatch]:
    """The record batches of rows ``[skip, skip + take)`` of a segment, zero-copy from a map.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), segment_name(0))
    >>> write_segment(p, pa.table({"x": [1, 2, 3]}))
    >>> [b.num_rows for b in read_segment(p, skip=1)]
    [2]
    """
    with pa.memory_map(path) as source:
        table = pa.ipc.open_file(source).read_all()
    # The batches keep the mapping alive after the file object is closed.
    yield from table.slice(skip, take).to_batches()


class HandoffWriter:
    """Appends rows of one declared handoff stream, partition by partition.

    >>> import tempfile
    >>> from streams.backends.embedded.store import EmbeddedStore
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
        start, hi = self.range.start, self.range.end
        segments: Sequence[tuple[str, int, int, bytes | None]] = self.segments
        while True:
            try:
                for file, first, count, data in segments:
                    skip, take = max(start - first, 0), min(hi, first + count) - max(start, first)
                    if data is not None:
                        yield decode_rows(data, self.schema).slice(skip, take)
                    else:
                        yield from read_segment(os.path.join(self.root, file), skip, take)
                    start = first + count
                return
            except FileNotFoundError:
                # Compacted into a larger file after planning, or trimmed: the index says which.
                refound = self._segments_now(start)
                if [s[0] for s in refound] == [s[0] for s in segments if s[1] + s[2] > start]:
                    raise self._trimmed(segments, start) from None
                segments = refound

    def _segments_now(self, start: int) -> list[tuple[str, int, int, bytes | None]]:
        """The segments that hold ``[start, range.end)`` per the store's index now."""
        log = HandoffLog.open(self.root)
        try:
            found = log.segments(self.stream, self.range.partition, start, self.range.end)
        finally:
            log.close()
        return [(s.file, s.first_offset, s.row_count, s.data) for s in found]

    def _trimmed(self, segments: Sequence[tuple[str, int, int, bytes | None]], start: int) -> HandoffDataLostError:
        file = next(s[0] for s in segments if s[1] + s[2] > start)
        return HandoffDataLostError(
            f"segment {file!r} of handoff stream {self.stream!r} was trimmed before "
            "this read: another query committed past it with trimOnCommit (give each "
            "query but one trimOnCommit=false), or the store's retention policy removed "
            "it (keep more: [provider.retention])"
        )


class EmbeddedStorage:
    """A store directory's handoff log, for the DataSource.

    >>> import tempfile
    >>> EmbeddedStorage(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streams.core.errors.HandoffStoreNotFoundError: no headrace store at ...
    """

    def __init__(self, path: str) -> None:
        self.log = HandoffLog.open(path)

    def schema(self, stream: str) -> HandoffSchema:
        return self.log.schema(stream)

    def start_offsets(self, stream: str) -> dict[int, int]:
        return self.log.start_offsets(stream)

    def end_offsets(self, stream: str) -> dict[int, int]:
        return self.log.end_offsets(stream)

    def offsets(self, stream: str) -> tuple[dict[int, int], dict[int, int]]:
        return self.log.start_offsets(stream), self.log.end_offsets(stream)

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

    def record_commit(self, stream: str, offsets: Mapping[int, int]) -> None:
        spark_commits.record(self.log.store, stream, offsets, wall_time())

    def trim(self, stream: str, offsets: Mapping[int, int]) -> None:
        for partition, offset in offsets.items():
            self.log.trim(stream, partition, offset)
        self.log.remove_orphans(stream)

    def close(self) -> None:
        self.log.close()


def open_storage(options: ReadOptions) -> EmbeddedStorage:
    """The store directory ``options.path`` names (``embedded`` in
    :data:`spark_sink.options.STORAGES`)."""
    assert options.path is not None
    return EmbeddedStorage(options.path)
