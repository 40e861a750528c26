"""Group commit of handoff appends: what arrives while one write is under way rides in the next.

Thousands of activations of one worker each close a window now and then; written one by
one, each append is a write transaction of its own (and, before inline segments, a file).
A :class:`GroupAppender` lets the first caller write and the others gather meanwhile: the
caller that finds no write under way becomes the leader and writes every pending append
in one transaction, one segment per partition; when it is done, the first of those that
gathered meanwhile leads the next write. Nobody waits on a timer, so a lone append is
written at once, and under load a write carries whatever the previous one left time for.

The leader and its waiters are the queues' own group commit
(:class:`~streams.backends.embedded.group_commit.GroupCommitter`); this module adds what a handoff
append needs on top: each caller's offsets, its own errors, and compaction and retention run
by the leader after its write. Every caller still returns only once its rows are committed (or with the error that kept
them out), so "durable before anyone else hears of it" holds for each of them, and each
learns the exact offsets of its rows. A caller whose rows the stage function refuses gets
its own error; the others' rows are written all the same.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import anyio
import pyarrow as pa

from spark_sink.storage import BATCH_ROWS
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.group_commit import GroupCommitter
from streams.backends.embedded.handoff_log import HandoffWriter, Segment
from streams.backends.embedded.handoff_retention import COMPACT_BYTES, compact, expire
from streams.backends.embedded.store import EmbeddedStore
from streams.core.clock import wall_time

log = logging.getLogger("headrace.handoff")

# What one caller adds to a write: given the open transaction, its partition and rows (it may
# read and write its own bookkeeping there too, after the last thing that can fail).
Stage = Callable[[sqlite3.Connection], tuple[int, pa.Table]]


@dataclass(frozen=True, slots=True)
class Appended:
    """Where one caller's rows went: offsets ``[first_offset, first_offset + row_count)``."""

    partition: int
    first_offset: int
    row_count: int


class _Waiter:
    __slots__ = ("cancelled", "error", "result", "stage")

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.result: Appended | None = None
        self.error: BaseException | None = None
        self.cancelled = False  # its caller gave up before the write began: not written


class GroupAppender:
    """Appends of one handoff stream, written together when they arrive together: the
    leader and its waiters are :class:`streams.backends.embedded.group_commit.GroupCommitter`'s, the
    one group commit the queues use too.

    Use it from one event loop (the worker's).

    >>> import tempfile
    >>> from spark_sink import HandoffSchema
    >>> from streams.backends.embedded.handoff_log import HandoffLog
    >>> store = EmbeddedStore(tempfile.mkdtemp())
    >>> schema = HandoffSchema.of({"n": "bigint"})
    >>> appender = GroupAppender(store, HandoffWriter(HandoffLog(store), "s", schema))
    >>> async def three():
    ...     async with anyio.create_task_group() as tg:
    ...         for n in range(3):
    ...             tg.start_soon(appender.append, lambda conn, n=n: (0, schema.to_table([(n,)])))
    >>> anyio.run(three)
    >>> appender.writer.end_offsets()
    {0: 3}
    """

    def __init__(
        self,
        store: EmbeddedStore,
        writer: HandoffWriter,
        *,
        compact_bytes: int = COMPACT_BYTES,
        retention: RetentionPolicy | None = None,
    ) -> None:
        self.store = store
        self.writer = writer
        self.compact_bytes = compact_bytes
        self.retention = retention  # applied every retention.interval (None: never)
        self._next_retention = float("-inf")
        self.writes = 0  # write transactions so far (the bench divides appends by it)
        self._committer: GroupCommitter[_Waiter] = GroupCommitter(self._write_and_maintain)
        self._inline: dict[int, int] = {}  # inline bytes this appender wrote since the last compaction
        self._small: dict[int, int] = {}  # rows in small segments since then, which compaction may join

    async def append(self, stage: Stage) -> Appended:
        """Stage rows into the next write and return once they are committed.

        ``stage`` runs in a worker thread inside the write transaction; what it raises is
        this caller's error alone (an ``sqlite3.Error`` fails the whole write, which the
        store rolls back: its callers all get it).
        """
        waiter = _Waiter(stage)
        try:
            await self._committer.submit([waiter])
        except BaseException:
            waiter.cancelled = True  # a write not yet begun leaves its rows out
            raise
        return _outcome(waiter)

    async def _write_and_maintain(self, batch: list[_Waiter]) -> None:
        """The committer's write: one transaction, then (still the only writer, and shielded:
        the rows are in) compaction and retention."""
        segments = await self.store.write(lambda conn: self._write(conn, batch))
        with anyio.CancelScope(shield=True):
            for segment in segments:
                partition = segment.partition
                if segment.data is not None:
                    self._inline[partition] = self._inline.get(partition, 0) + len(segment.data)
                if segment.row_count < BATCH_ROWS:
                    self._small[partition] = self._small.get(partition, 0) + segment.row_count
            await self._compact_full()
            await self._retain()

    def _write(self, conn: sqlite3.Connection, batch: list[_Waiter]) -> list[Segment]:
        """One transaction: every waiter's rows, one segment per partition, in arrival order."""
        self.writes += 1
        staged: dict[int, list[tuple[_Waiter, pa.Table]]] = {}
        for waiter in batch:
            if waiter.cancelled:
                continue
            try:
                partition, table = waiter.stage(conn)
            except sqlite3.Error:
                raise
            except Exception as exc:  # this caller's rows only: the others go ahead
                waiter.error = exc
                continue
            staged.setdefault(partition, []).append((waiter, table))
        segments = []
        for partition, entries in staged.items():
            tables = [table for _, table in entries if table.num_rows]
            segment = self.writer.append(conn, partition, pa.concat_tables(tables)) if tables else None
            offset = segment.first_offset if segment is not None else 0
            for waiter, table in entries:
                waiter.result = Appended(partition, offset, table.num_rows)
                offset += table.num_rows
            if segment is not None:
                segments.append(segment)
        return segments

    async def _compact_full(self) -> None:
        """Compact the partitions that gathered ``compact_bytes`` of inline rows or a Spark
        batch of rows in small segments, one group each per write; a failure is logged and tried
        again once as much more has gathered (the rows are safe where they are; a try after every
        write would re-read a batch under the write lock each time a bad file fails it)."""
        writer = self.writer
        for partition in sorted(self._small.keys() | self._inline.keys()):
            if self._inline.get(partition, 0) < self.compact_bytes and self._small.get(partition, 0) < BATCH_ROWS:
                continue
            self._inline[partition] = self._small[partition] = 0
            try:
                # One group a write: its callers wait for one file's merge, never a backlog's.
                merged = await anyio.to_thread.run_sync(
                    partial(compact, writer.log, writer.stream, partition, writer.schema.arrow, groups=1)
                )
            except Exception:
                log.warning("compacting handoff stream %r partition %d failed", writer.stream, partition, exc_info=True)
                continue
            if merged:  # perhaps more: the next write looks again
                self._small[partition] = BATCH_ROWS

    async def _retain(self) -> None:
        """Apply the retention policy to the stream once every ``interval`` (after a write:
        a stream nobody appends to stays as it is)."""
        policy, now = self.retention, wall_time()
        if policy is None or now < self._next_retention:
            return
        self._next_retention = now + policy.interval
        try:
            await anyio.to_thread.run_sync(expire, self.writer.log, self.writer.stream, policy, now)
        except Exception:
            log.warning("retention of handoff stream %r failed", self.writer.stream, exc_info=True)


def _outcome(waiter: _Waiter) -> Appended:
    if waiter.error is not None:
        raise waiter.error
    assert waiter.result is not None, "a waiter is woken with a result or an error"
    return waiter.result
