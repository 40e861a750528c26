"""Arrow IPC segment files: written durably once, read memory-mapped without copying.

A segment holds a run of consecutive offsets of one handoff partition. Files are never
rewritten: a name is unique to one write attempt, so a retried append never touches the file
of an earlier attempt that another process might still be reading.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator

import pyarrow as pa

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


def write_segment(path: str, table: pa.Table) -> None:
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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
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


def rebatch(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """Re-cut a stream of batches into batches of at most ``rows`` rows.

    Large batches are sliced (no copy); runs of small ones, as many small appends leave, are
    concatenated, so Spark gets a few sizeable batches instead of many tiny ones.

    >>> small = [pa.record_batch({"x": [i]}) for i in range(5)]
    >>> [b.num_rows for b in rebatch(small, 2)]
    [2, 2, 1]
    """
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in batches:
        offset = 0
        while offset < batch.num_rows:
            piece = batch.slice(offset, rows - pending_rows)
            offset += piece.num_rows
            pending.append(piece)
            pending_rows += piece.num_rows
            if pending_rows == rows:
                yield _joined(pending)
                pending, pending_rows = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
