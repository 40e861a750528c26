"""Declaring that a consumer's closed windows go to Spark, and writing them exactly once.

A consumer type sets ``handoff = Handoff("name", {"column": "type", ...})`` next to its
``event_time``; the runtime appends every window it closes to the handoff stream ``name``
(partition = the source stream's queue) through a :class:`HandoffSink`. Each append carries,
atomically, a per-key mark of the newest window end handed off; a replay after a crash or a
queue move (the checkpoint is held at the oldest event of an open window) therefore skips
windows already written, and never writes one twice. :class:`EmbeddedHandoffSink` keeps
rows and marks in one SQLite transaction of the store; the Kafka sink
(:mod:`spark_sink.kafka_sink`) in one Kafka record.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.errors import ConfigurationError
from streams.eventtime.processor import WindowResult
from streams.store import EmbeddedStore

from .log import HandoffLog, check_stream_name
from .schema import HandoffSchema
from .writer import HandoffWriter

_MARKS = [
    [
        "CREATE TABLE handoff_marks(handoff TEXT NOT NULL, source TEXT NOT NULL, "
        "consumer TEXT NOT NULL, key TEXT NOT NULL, last_end REAL NOT NULL, "
        "PRIMARY KEY(handoff, source, consumer, key))"
    ]
]


@dataclass(frozen=True)
class Handoff:
    """Where a windowed consumer's results go: a handoff stream and its columns.

    One aggregate column takes the window's value; several take the entries of a
    ``Combined`` aggregate's result by name.

    >>> Handoff("tolls", {"count": "bigint", "total": "double"}).schema().ddl()
    'window_start timestamp, window_end timestamp, key string, count bigint, total double'
    """

    stream: str
    aggregates: Mapping[str, str] = field(default_factory=lambda: {"value": "double"})
    key: bool = True  # False for global windows: no key column

    def __post_init__(self) -> None:
        check_stream_name(self.stream)
        if not self.aggregates:
            raise ConfigurationError(f"handoff {self.stream!r} needs at least one aggregate column")

    def schema(self) -> HandoffSchema:
        return HandoffSchema.windows(dict(self.aggregates), key=self.key)

    def row(self, result: WindowResult) -> dict[str, Any]:
        row: dict[str, Any] = {"window_start": result.start, "window_end": result.end}
        if self.key:
            row["key"] = None if result.key is None else str(result.key)
        names = list(self.aggregates)
        if len(names) == 1:
            row[names[0]] = result.value
        elif isinstance(result.value, Mapping):
            for name in names:
                row[name] = result.value.get(name)
        else:
            raise ConfigurationError(
                f"handoff {self.stream!r} declares columns {names}, but the window value is "
                f"{type(result.value).__name__}: use a Combined aggregate with those names"
            )
        return row


def handoff_of(cls: type) -> Handoff | None:
    spec = getattr(cls, "handoff", None)
    return spec if isinstance(spec, Handoff) else None


def fresh_windows(
    windows: Sequence[WindowResult], marks: Mapping[str, float]
) -> tuple[list[WindowResult], dict[str, float]]:
    """The windows not handed off yet (per key, an end beyond the key's mark), and the
    marks they move.

    >>> from streams.eventtime.processor import WindowResult
    >>> w = [WindowResult("a", 0, 60, 1, None), WindowResult("a", 60, 120, 2, None)]
    >>> fresh, moved = fresh_windows(w, {"a": 60})
    >>> [r.end for r in fresh], moved
    ([120], {'a': 120})
    """
    fresh = []
    moved: dict[str, float] = {}
    for result in windows:
        key = "" if result.key is None else str(result.key)
        if result.end > moved.get(key, marks.get(key, float("-inf"))):  # per key, in order of end
            fresh.append(result)
            moved[key] = result.end
    return fresh, moved


class HandoffSink(Protocol):
    """Where the runtime appends one handoff stream's closed windows."""

    async def write(
        self, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]
    ) -> int:
        """Append the windows of ``source`` (a stream) and ``consumer`` (a consumer type) not
        yet handed off, to ``partition`` (the stream's queue); return how many were."""
        ...

    async def close(self) -> None: ...


class EmbeddedHandoffSink:
    """Appends one handoff stream's windows to an embedded store, exactly once per
    (source, consumer, key, end)."""

    def __init__(self, store: EmbeddedStore, handoff: Handoff) -> None:
        store.require_schema("handoff_marks", _MARKS)
        self.store = store
        self.handoff = handoff
        self._writer = HandoffWriter(HandoffLog(store), handoff.stream, handoff.schema())  # blocking

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]) -> int:
        if not windows:
            return 0
        return await self.store.write(lambda conn: self._append(conn, source, consumer, partition, windows))

    async def close(self) -> None:
        pass  # the store belongs to the provider

    def _append(
        self, conn: sqlite3.Connection, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]
    ) -> int:
        name = self.handoff.stream
        marks: dict[str, float] = dict(
            conn.execute(
                "SELECT key, last_end FROM handoff_marks WHERE handoff = ? AND source = ? AND consumer = ?",
                (name, source, consumer),
            )
        )
        fresh, moved = fresh_windows(windows, marks)
        if fresh:
            self._writer.append(conn, partition, [self.handoff.row(w) for w in fresh])
            conn.executemany(
                "INSERT INTO handoff_marks(handoff, source, consumer, key, last_end) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(handoff, source, consumer, key) DO UPDATE SET last_end = excluded.last_end",
                [(name, source, consumer, k, end) for k, end in moved.items()],
            )
        return len(fresh)
