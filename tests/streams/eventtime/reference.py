"""A brute-force reference of steps 1-3, dedup and step 5 (docs/event-time.md), and a
runner feeding random rows to a processor in cuts: what the dedup and counted-window tests
compare the core with."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from streams.eventtime import EventOutcome, OrderingPolicy, Processor, WindowResult
from streams.eventtime.replay import Row
from tests.streams.eventtime.helpers import feed_rows

INF = math.inf


def steps_1_to_3(
    p: OrderingPolicy, arrival: float, event_time: float, w: float
) -> tuple[str, str | None, float | None]:
    """The contract's steps 1-3 for one event against its watermark ``w``: ``(status,
    reason, timestamp)``, the timestamp None when the event is dropped."""
    if p.early_arrival is not None and event_time - arrival > p.early_arrival:
        return "dropped", "early_arrival", None
    ts, status, reason = event_time, "kept", None
    if p.late_arrival is not None and arrival - event_time > p.late_arrival:
        reason = "late_arrival"
        if p.action == "drop":
            return "dropped", reason, None
        if p.action == "adjust":
            ts, status = arrival - p.late_arrival, "adjusted"
    if ts < w:
        reason = "out_of_order"
        if p.action == "drop":
            return "dropped", reason, None
        if p.action == "adjust":
            ts, status = w, "adjusted"
    return status, reason, ts


class Reference:
    """Steps 1-3, dedup (``within`` None: none; the dedup key is the row's value) and step
    5, written out plainly: every key ever registered kept in a list, every watermark
    recomputed, nothing expired. ``accepted`` lists the kept events in arrival order."""

    def __init__(self, policy: OrderingPolicy, within: float | None = None) -> None:
        self.p, self.within = policy, within
        self.substreams = policy.over is not None
        self.floor = -INF
        self.w: dict[Any, float] = {}
        self.registered: list[tuple[Any, Any, float]] = []  # (lane, dedup key, first timestamp)
        self.fates: dict[int, tuple[str, str | None, float | None]] = {}
        self.accepted: list[tuple[Row, float]] = []  # (row, timestamp), in arrival order

    def lane_w(self, lane: Any) -> float:
        return max(self.w.get(lane, -INF), self.floor)

    def run(self, rows: list[Row], flush: bool = False) -> Reference:
        for row in rows:
            if row.event_time is None:
                self.tick(row.arrival_time)
            else:
                self.event(row)
        if flush:
            self.floor = INF
            self.close(None)
        return self

    def tick(self, t: float) -> None:
        if self.p.late_arrival is not None:
            self.floor = max(self.floor, t - self.p.late_arrival)
            self.close(t)

    def arrive(self, arrival: float) -> None:
        """Before an event: what falls due before it (a subclass's idle timeouts)."""

    def window(self, row: Row, lane: Any, ts: float, w: float) -> bool:
        """Step 4 for a window kind (a subclass): False refuses the event ``window_closed``."""
        return True

    def close(self, clock: float | None) -> None:
        """Step 6 for a window kind (a subclass), after a watermark may have moved."""

    def event(self, row: Row) -> None:
        p, arr, et = self.p, row.arrival_time, row.event_time
        assert et is not None
        self.arrive(arr)
        lane = row.key if self.substreams else None
        w = self.lane_w(lane)
        status, reason, kept = steps_1_to_3(p, arr, et, w)
        if kept is None:
            self.fates[row.index] = (status, reason, None)
            return
        ts = kept
        if self.within is not None:
            if any(r[:2] == (lane, row.value) and r[2] + self.within > w for r in self.registered):
                self.fates[row.index] = ("dropped", "duplicate", None)
                return  # as if it never arrived: no watermark moves
            if ts + self.within > w:
                self.registered.append((lane, row.value, ts))
        if self.window(row, lane, ts, w):
            self.fates[row.index] = (status, reason, ts)
            self.accepted.append((row, ts))
        else:
            self.fates[row.index] = ("dead_letter", "window_closed", ts)
        self.w[lane] = max(w, ts - p.out_of_order)
        if p.late_arrival is not None:
            self.floor = max(self.floor, arr - p.late_arrival)
        self.close(arr)


class Rec:
    """A row as an event: its value names its key, dedup id and index."""

    __slots__ = ("value", "event_time", "arrival_time", "token")

    def __init__(self, row: Row) -> None:
        self.value = {"key": row.key, "id": row.value, "index": row.index}
        self.event_time, self.arrival_time, self.token = row.event_time, row.arrival_time, row.index


Fates = dict[int, tuple[str, str | None, float | None]]


def draw_rows(draw: Any, keys: str, most: int = 40, ids: Callable[[Any, int], Any] | None = None) -> list[Row]:
    """Random rows: arrivals a few seconds apart, one in seven a tick, events mostly a little
    late, one in four anywhere within 30 s; ``ids(draw, index)`` their values (dedup ids)."""
    rows, arrival = [], 0.0
    for i in range(draw(st.integers(1, most))):
        arrival += draw(st.sampled_from([0.0, 1.0, 2.0, 5.0]))
        if draw(st.integers(0, 6)) == 0:
            rows.append(Row(i, arrival, None))
        else:
            skew = draw(st.integers(-30, 30)) if draw(st.integers(0, 3)) == 0 else draw(st.integers(-3, 1))
            value = None if ids is None else ids(draw, i)
            rows.append(Row(i, arrival, arrival + skew, draw(st.sampled_from(keys)), value))
    return rows


def draw_policy(
    draw: Any,
    out_of_order: Sequence[float] = (0.0, 2.0, 5.0, 20.0),
    actions: Sequence[str] = ("adjust", "drop", "accept", "accept"),
) -> OrderingPolicy:
    """A random policy: every tolerance on or off, every action, substreams one time in three."""
    return OrderingPolicy(
        out_of_order=draw(st.sampled_from(out_of_order)),
        late_arrival=draw(st.sampled_from([None, 10.0])),
        early_arrival=draw(st.sampled_from([None, 10.0])),
        action=draw(st.sampled_from(actions)),
        over=draw(st.sampled_from([None, None, "key"])),
    )


def draw_cuts(draw: Any) -> list[int]:
    """How many events each call takes, in turn."""
    cuts: list[int] = draw(st.lists(st.integers(1, 5), min_size=1, max_size=10))
    return cuts


def run_core(
    make: Callable[[], Processor], rows: list[Row], cuts: list[int], restore_at: int = -1
) -> tuple[Fates, list[WindowResult], Processor]:
    """Fates and windows of ``make()``'s processor (``trace=True``), the rows fed in calls
    of ``cuts`` events, ticks alone, then a flush; ``restore_at``: after that many calls,
    carry on in a fresh processor restored from a snapshot. Asserts one fate an event, and
    a dead letter for each drop, in order."""
    fates: Fates = {}
    windows: list[WindowResult] = []
    outs, p = feed_rows(make, rows, cuts, restore_at, record=Rec)
    for out in outs:
        for item in out.trace:
            if isinstance(item, EventOutcome):
                assert item.record.value["index"] not in fates  # one fate each
                fates[item.record.value["index"]] = (item.status, item.reason, item.timestamp)
            elif isinstance(item, WindowResult):
                windows.append(item)
        refused = [o for o in out.trace if isinstance(o, EventOutcome) and o.status in ("dropped", "dead_letter")]
        assert [d.value["index"] for d in out.dead_letters] == [o.record.value["index"] for o in refused]
    assert sorted(fates) == [r.index for r in rows if r.event_time is not None]
    return fates, windows, p
