"""The handoff sink of the embedded store: rows and marks in one SQLite transaction of the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from spark_sink.handoff import EventHandoff, EventMark, Handoff, conform, fresh_events, fresh_windows
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.handoff_commit import GroupAppender
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter
from streams.backends.embedded.mark_retention import MARKS_SCHEMA, MarkRetention
from streams.backends.embedded.store import EmbeddedStore
from streams.core.clock import wall_time
from streams.eventtime.release import Position
from streams.eventtime.results import EventOutcome, WindowResult


class EmbeddedHandoffSink:
    """Appends one handoff stream's windows (or events) to an embedded store, exactly once
    per (source, consumer, key, end) (or per event). Appends of many activations that
    arrive together share one write (:class:`~streams.backends.embedded.handoff_commit.GroupAppender`)."""

    def __init__(
        self,
        store: EmbeddedStore,
        handoff: Handoff | EventHandoff,
        retention: MarkRetention | None = None,
        log_retention: RetentionPolicy | None = None,
    ) -> None:
        store.require_schema("handoff_marks", MARKS_SCHEMA)
        self.store = store
        self.handoff = handoff
        # Given where the store's queues stand, marks no replay can need go.
        self._retention = retention
        self._writer = HandoffWriter(HandoffLog(store), handoff.stream, handoff.schema())  # blocking
        # log_retention: what the log keeps when no Spark query trims it (streams.backends.embedded.handoff_retention)
        self._appender = GroupAppender(store, self._writer, retention=log_retention)

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]) -> int:
        if not windows:
            return 0
        appended = await self._appender.append(lambda conn: self._stage(conn, source, consumer, partition, windows))
        return appended.row_count

    async def write_events(
        self, source: str, consumer: str, partition: int, released: Sequence[EventOutcome], below: Position | None
    ) -> int:
        if not released:
            return 0
        appended = await self._appender.append(
            lambda conn: self._stage_events(conn, source, consumer, partition, released, below)
        )
        return appended.row_count

    async def close(self) -> None:
        pass  # the store belongs to the provider

    def _stage_events(
        self,
        conn: sqlite3.Connection,
        source: str,
        consumer: str,
        partition: int,
        released: Sequence[EventOutcome],
        below: Position | None,
    ) -> tuple[int, pa.Table]:
        assert isinstance(self.handoff, EventHandoff)
        key = (self.handoff.stream, source, consumer)
        row = conn.execute(
            "SELECT mark FROM handoff_event_marks WHERE handoff = ? AND source = ? AND consumer = ?", key
        ).fetchone()
        fresh, mark = fresh_events(released, EventMark.from_bytes(row[0]) if row else EventMark(), below)
        table = self._table(source, fresh)
        if fresh:  # the mark goes into the write that appends the rows: both commit, or neither
            now = self._trim(conn)
            conn.execute(
                "INSERT INTO handoff_event_marks(handoff, source, consumer, mark, written) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(handoff, source, consumer) DO UPDATE SET mark = excluded.mark, written = excluded.written",
                (*key, mark.to_bytes(), now),
            )
        return partition, table

    def _table(self, source: str, fresh: Sequence[Any]) -> pa.Table:
        """The rows of ``fresh`` (windows or events of ``source``), before any mark is written:
        what the schema refuses raises here, with nothing written for this caller."""
        handoff = self.handoff
        if not fresh:
            return self._writer.schema.arrow.empty_table()
        return conform(self._writer.schema, fresh, lambda item: handoff.row(source, item), handoff.stream)

    def _stage(
        self, conn: sqlite3.Connection, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]
    ) -> tuple[int, pa.Table]:
        assert isinstance(self.handoff, Handoff)
        name = self.handoff.stream
        marks: dict[str, float] = dict(
            conn.execute(
                "SELECT key, last_end FROM handoff_marks WHERE handoff = ? AND source = ? AND consumer = ?",
                (name, source, consumer),
            )
        )
        fresh, moved = fresh_windows(windows, marks)
        table = self._table(source, fresh)
        if fresh:
            now = self._trim(conn)
            conn.executemany(
                "INSERT INTO handoff_marks(handoff, source, consumer, key, last_end, written) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(handoff, source, consumer, key) "
                "DO UPDATE SET last_end = excluded.last_end, written = excluded.written",
                [(name, source, consumer, k, end, now) for k, end in moved.items()],
            )
        return partition, table

    def _trim(self, conn: sqlite3.Connection) -> float:
        """Now; the marks no replay can need go first, when a trim is due (at most once a minute)."""
        now = wall_time()
        retention = self._retention
        if retention is not None and now >= retention.due_at:
            retention.trim(conn, now)
        return now
