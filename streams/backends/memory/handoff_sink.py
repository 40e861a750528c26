"""A handoff stream kept in this process's memory: what ``streams.testing`` hands off to.

It takes the same path as the embedded log up to the write: the same per-key marks (a replay
writes no window twice), the same conversion to the declared columns, and the same refusals
(:class:`~streams.core.errors.HandoffRefusedError`, dead-lettered by the runtime as
``handoff_failed``). The rows are kept as Spark reads them (timestamps as aware datetimes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_sink.handoff import EventHandoff, EventMark, Handoff, conform, fresh_events, fresh_windows
from streams.eventtime.release import Position
from streams.eventtime.results import EventOutcome, WindowResult


class MemoryHandoffSink:
    """The rows of one handoff stream, in the order they were appended.

    >>> import anyio
    >>> sink = MemoryHandoffSink(Handoff("totals", {"n": "bigint"}))
    >>> windows = [WindowResult("a", 0, 60, 2, 61.0)]
    >>> anyio.run(sink.write, "tolls/a", "Totals", 0, windows), anyio.run(sink.write, "tolls/a", "Totals", 0, windows)
    (1, 0)
    >>> [(r["key"], r["n"], r["window_end"].timestamp()) for r in sink.rows]
    [('a', 2, 60.0)]
    """

    def __init__(self, handoff: Handoff | EventHandoff) -> None:
        self.handoff = handoff
        self.rows: list[dict[str, Any]] = []
        self._schema = handoff.schema()
        self._window_marks: dict[tuple[str, str], dict[str, float]] = {}
        self._event_marks: dict[tuple[str, str], EventMark] = {}

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]) -> int:
        handoff = self.handoff
        assert isinstance(handoff, Handoff)
        marks = self._window_marks.setdefault((source, consumer), {})
        fresh, moved = fresh_windows(windows, marks)
        if fresh:  # refused rows raise here, before any mark moves: nothing is appended
            self.rows.extend(conform(self._schema, fresh, lambda w: handoff.row(source, w), handoff.stream).to_pylist())
            marks.update(moved)
        return len(fresh)

    async def write_events(
        self, source: str, consumer: str, partition: int, released: Sequence[EventOutcome], below: Position | None
    ) -> int:
        handoff = self.handoff
        assert isinstance(handoff, EventHandoff)
        fresh, mark = fresh_events(released, self._event_marks.get((source, consumer), EventMark()), below)
        if fresh:
            self.rows.extend(conform(self._schema, fresh, lambda e: handoff.row(source, e), handoff.stream).to_pylist())
            self._event_marks[(source, consumer)] = mark
        return len(fresh)

    async def close(self) -> None:
        return None
