"""Small builders shared by the event-time tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from hypothesis import strategies as st

from streams.cli.simulate import TimeForm, read_rows
from streams.core.batch import Event
from streams.core.ids import SequenceToken, StreamId
from streams.eventtime import EventOutcome, Output, Processor, WatermarkAdvance, WindowResult
from streams.eventtime.replay import ReplayOptions, Row, replay
from streams.eventtime.snapshot import restore, snapshot

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


class RowRecord:
    """A sample row as the core takes it: the value ``{"key", "index"}``, its index the token."""

    __slots__ = ("value", "event_time", "arrival_time", "token")

    def __init__(self, row: Row) -> None:
        self.value = {"key": row.key, "index": row.index}
        self.event_time, self.arrival_time, self.token = row.event_time, row.arrival_time, row.index


def draw_rows(draw: Any, *, ticks: int, near: tuple[int, int]) -> list[Row]:
    """Up to 40 rows of a hypothesis sample in arrival order, keys ``a``-``c``: about one in
    ``ticks`` a tick; an event's time is its arrival plus a skew, one in four anywhere in
    ±30 s, the others within ``near``."""
    rows, arrival = [], 0.0
    for i in range(draw(st.integers(1, 40))):
        arrival += draw(st.sampled_from([0.0, 1.0, 2.0, 5.0]))
        if draw(st.integers(0, ticks - 1)) == 0:
            rows.append(Row(i, arrival, None))
        else:
            skew = draw(st.integers(-30, 30)) if draw(st.integers(0, 3)) == 0 else draw(st.integers(*near))
            rows.append(Row(i, arrival, arrival + skew, draw(st.sampled_from("abc"))))
    return rows


def ev(t: float, arrival: float | None = None, key: str = "k", index: int = 0) -> RowRecord:
    """One event at time ``t`` arriving at ``arrival`` (by default then)."""
    return RowRecord(Row(index, t if arrival is None else arrival, t, key))


def feed_rows(
    make: Callable[[], Processor],
    rows: Sequence[Row],
    cuts: Sequence[int],
    restore_at: int = -1,
    record: Callable[[Row], Any] = RowRecord,
) -> tuple[list[Output], Processor]:
    """The outputs of a processor ``make()`` gives, fed ``rows`` (ticks alone, events, made
    by ``record``, in calls of the sizes ``cuts`` repeats), then flushed, and the processor
    that took the last call; ``restore_at``: after that many calls, carry on in a fresh
    processor restored from a snapshot of the first."""
    p, outs, calls, i = make(), [], 0, 0
    sizes = iter(list(cuts) * (len(rows) + 1))
    while i < len(rows):
        if calls == restore_at:
            q = make()
            restore(q, snapshot(p))
            p = q
        calls += 1
        if rows[i].event_time is None:
            outs.append(p.on_tick(rows[i].arrival_time))
            i += 1
            continue
        j, size = i, next(sizes)
        while j < len(rows) and j - i < size and rows[j].event_time is not None:
            j += 1
        outs.append(p.on_events([record(r) for r in rows[i:j]]))
        i = j
    outs.append(p.flush())
    assert p.open_windows() == []  # a flush closes every window
    return outs, p


class Model(Protocol):
    """A brute-force reference of the contract, fed as the core is."""

    def tick(self, t: float) -> None: ...

    def event(self, row: Row) -> None: ...

    def flush(self) -> None: ...


def model_rows(model: Model, rows: Sequence[Row]) -> None:
    """Feed ``rows`` (ticks and events) to ``model``, then flush it."""
    for row in rows:
        if row.event_time is None:
            model.tick(row.arrival_time)
        else:
            model.event(row)
    model.flush()
