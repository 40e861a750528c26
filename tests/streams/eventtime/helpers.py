"""Small builders shared by the event-time tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from streams.cli.simulate import TimeForm, read_rows
from streams.core.batch import Event
from streams.core.ids import SequenceToken, StreamId
from streams.eventtime import EventOutcome, Processor, WatermarkAdvance, WindowResult
from streams.eventtime.replay import ReplayOptions, Row, replay

DATA = Path(__file__).parent / "data"
SID = StreamId("sensors", "s-1")


def clock(t: float | None) -> str | None:
    """A time of day (seconds, any date, UTC) as ``"HH:MM"`` (``"HH:MM:SS"`` when seconds
    are not 0)."""
    if t is None:
        return None
    t = int(t) % 86400
    h, m, s = t // 3600, t % 3600 // 60, t % 60
    return f"{h:02d}:{m:02d}:{s:02d}" if s else f"{h:02d}:{m:02d}"


def events(rows: Iterable[Sequence[Any]], start: int = 0) -> list[Event]:
    """Runtime events from ``(event_time, arrival_time[, key])``; value ``{"key", "n"}``,
    token ``0:n``."""
    made = []
    for n, row in enumerate(rows, start):
        et, arr, *rest = row
        key = rest[0] if rest else None
        made.append(Event({"key": key, "n": n}, float(et), float(arr), SequenceToken(0, n), SID))
    return made


def outcomes(trace: Iterable[Any]) -> list[EventOutcome]:
    return [item for item in trace if isinstance(item, EventOutcome)]


def windows(trace: Iterable[Any]) -> list[WindowResult]:
    return [item for item in trace if isinstance(item, WindowResult)]


def advances(trace: Iterable[Any]) -> list[WatermarkAdvance]:
    return [item for item in trace if isinstance(item, WatermarkAdvance)]


def sample(name: str) -> list[Row]:
    """A seed table from ``data/``, read like ``headrace simulate`` reads it."""
    return read_rows(str(DATA / name), TimeForm())


def run_sample(name: str, options: ReplayOptions) -> list[Any]:
    return replay(sample(name), options)


def feed(processor: Processor, evs: Iterable[Event], partition: Any = 0) -> list[Any]:
    """One event per call (so each call's output can be looked at); the concatenated trace."""
    trace: list[Any] = []
    for e in evs:
        trace.extend(processor.on_events([e], partition).trace)
    return trace
