"""Deduplication (``EventTime(dedup=Dedup(...))``) against a brute-force reference of the
contract (docs/event-time.md, "Deduplication"), on random samples with retries, disorder,
ticks, every action and substreams; its state bounded by the horizon, saved in a snapshot,
and a key function that raises or returns nonsense isolated to its event."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigurationError
from streams.eventtime import Collect, EventOutcome, EventTime, OrderingPolicy, Processor, Tumbling, WindowResult
from streams.eventtime.dedup import Dedup
from streams.eventtime.replay import Row
from streams.eventtime.snapshot import is_empty, restore, snapshot

INF = math.inf


class Reference:
    """Steps 1-3, dedup, and step 5 for a windowless consumer, written out plainly: every
    key ever registered kept in a list, every watermark recomputed, nothing expired."""

    def __init__(self, policy: OrderingPolicy, within: float) -> None:
        self.p, self.within = policy, within
        self.substreams = policy.over is not None
        self.floor = -INF
        self.w: dict[Any, float] = {}
        self.registered: list[tuple[Any, Any, float]] = []  # (lane, dedup key, first timestamp)
        self.fates: dict[int, tuple[str, str | None, float | None]] = {}

    def lane_w(self, lane: Any) -> float:
        return max(self.w.get(lane, -INF), self.floor)

    def tick(self, t: float) -> None:
        if self.p.late_arrival is not None:
            self.floor = max(self.floor, t - self.p.late_arrival)

    def event(self, row: Row) -> None:
        p, arr, et = self.p, row.arrival_time, row.event_time
        assert et is not None
        lane = row.key if self.substreams else None
        w = self.lane_w(lane)
        if p.early_arrival is not None and et - arr > p.early_arrival:
            self.fates[row.index] = ("dropped", "early_arrival", None)
            return
        ts, status, reason = et, "kept", None
        if p.late_arrival is not None and arr - et > p.late_arrival:
            reason = "late_arrival"
            if p.action == "drop":
                self.fates[row.index] = ("dropped", reason, None)
                return
            if p.action == "adjust":
                ts, status = arr - p.late_arrival, "adjusted"
        if ts < w:
            reason = "out_of_order"
            if p.action == "drop":
                self.fates[row.index] = ("dropped", reason, None)
                return
            if p.action == "adjust":
                ts, status = w, "adjusted"
        dedup_key = row.value
        if any(r[0] == lane and r[1] == dedup_key and r[2] + self.within > w for r in self.registered):
            self.fates[row.index] = ("dropped", "duplicate", None)
            return  # as if it never arrived: no watermark moves
        if ts + self.within > w:
            self.registered.append((lane, dedup_key, ts))
        self.fates[row.index] = (status, reason, ts)
        self.w[lane] = max(w, ts - p.out_of_order)
        if p.late_arrival is not None:
            self.floor = max(self.floor, arr - p.late_arrival)


class _Rec:
    __slots__ = ("value", "event_time", "arrival_time", "token")

    def __init__(self, row: Row) -> None:
        self.value = {"key": row.key, "id": row.value, "index": row.index}
        self.event_time, self.arrival_time, self.token = row.event_time, row.arrival_time, row.index


@st.composite
def samples(draw: Any) -> tuple[list[Row], OrderingPolicy, float, list[int]]:
    """Events with ids drawn from a few (so retries are common), ticks, and a policy."""
    n = draw(st.integers(1, 40))
    rows, arrival = [], 0.0
    for i in range(n):
        arrival += draw(st.sampled_from([0.0, 1.0, 2.0, 5.0]))
        if draw(st.integers(0, 6)) == 0:
            rows.append(Row(i, arrival, None))
        else:
            skew = draw(st.integers(-30, 30)) if draw(st.integers(0, 3)) == 0 else draw(st.integers(-3, 1))
            rows.append(Row(i, arrival, arrival + skew, draw(st.sampled_from("ab")), draw(st.integers(0, 5))))
    policy = OrderingPolicy(
        out_of_order=draw(st.sampled_from([0.0, 2.0, 5.0, 20.0])),
        late_arrival=draw(st.sampled_from([None, 10.0])),
        early_arrival=draw(st.sampled_from([None, 10.0])),
        action=draw(st.sampled_from(["adjust", "drop", "accept"])),
        over=draw(st.sampled_from([None, None, "key"])),
    )
    within = draw(st.sampled_from([1.0, 5.0, 15.0, 60.0]))
    cuts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=10))
    return rows, policy, within, cuts


def run_core(
    rows: list[Row],
    policy: OrderingPolicy,
    within: float,
    cuts: list[int],
    *,
    window: Tumbling | None = None,
    restore_at: int = -1,
) -> tuple[dict[int, tuple], list[tuple], Processor]:
    """Fates and windows of the processor, the rows fed in calls of ``cuts`` events;
    ``restore_at``: after that many calls, carry on in a fresh processor restored from a
    snapshot."""

    def make() -> Processor:
        return Processor(policy, window, Collect(), select="index", trace=True, dedup=Dedup(key="id", within=within))

    p, fates, windows = make(), {}, []
    sizes, i, calls = iter(cuts * (len(rows) + 1)), 0, 0
    outs = []
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
        outs.append(p.on_events([_Rec(r) for r in rows[i:j]]))
        i = j
    outs.append(p.flush())
    for out in outs:
        for item in out.trace:
            if isinstance(item, EventOutcome):
                assert item.record.value["index"] not in fates  # one fate each
                fates[item.record.value["index"]] = (item.status, item.reason, item.timestamp)
            elif isinstance(item, WindowResult):
                windows.append((item.start, tuple(item.value)))
        # every drop is a letter, in the order of the trace
        refused = [o for o in out.trace if isinstance(o, EventOutcome) and o.status in ("dropped", "dead_letter")]
        assert [d.value["index"] for d in out.dead_letters] == [o.record.value["index"] for o in refused]
    return fates, windows, p


def run_reference(rows: list[Row], policy: OrderingPolicy, within: float) -> dict[int, tuple]:
    ref = Reference(policy, within)
    for row in rows:
        if row.event_time is None:
            ref.tick(row.arrival_time)
        else:
            ref.event(row)
    return ref.fates


def _events(rows: list[Row]) -> list[int]:
    return [r.index for r in rows if r.event_time is not None]


@settings(max_examples=400, deadline=None)
@given(samples())
def test_dedup_matches_the_brute_force_reference(sample):
    rows, policy, within, cuts = sample
    fates, _, p = run_core(rows, policy, within, cuts)
    assert fates == run_reference(rows, policy, within)
    assert sorted(fates) == _events(rows)  # every event has exactly one fate
    duplicates = [i for i, f in fates.items() if f[1] == "duplicate"]
    assert p.counters.duplicate == len(duplicates)
    assert p.counters.events == len(_events(rows))


@settings(max_examples=150, deadline=None)
@given(samples())
def test_dedup_before_windows_each_kept_event_in_its_window(sample):
    """Windows see exactly the events dedup kept, each in the window of its timestamp."""
    rows, policy, within, cuts = sample
    fates, windows, _ = run_core(rows, policy, within, cuts, window=Tumbling(10))
    ref = run_reference(rows, policy, within)
    members = {i: start for start, events in windows for i in events}
    for index, (status, reason, ts) in fates.items():
        if status == "dead_letter":  # only accept lets an event below a closed window through
            assert (policy.action, reason) == ("accept", "window_closed")
            assert ref[index][0] == "kept"
        else:
            assert (status, reason, ts) == ref[index]
        if status in ("kept", "adjusted"):
            assert ts is not None
            assert members[index] == math.floor(ts / 10) * 10
    assert len(members) == sum(1 for f in fates.values() if f[0] in ("kept", "adjusted"))


@settings(max_examples=150, deadline=None)
@given(samples(), st.integers(0, 12))
def test_a_snapshot_restored_mid_stream_keeps_what_was_seen(sample, restore_at):
    rows, policy, within, cuts = sample
    restored = run_core(rows, policy, within, cuts, restore_at=restore_at)
    assert restored[:2] == run_core(rows, policy, within, cuts)[:2]


def ev(t: float, ident: Any, index: int, arrival: float | None = None) -> _Rec:
    return _Rec(Row(index, t if arrival is None else arrival, t, "k", ident))


def test_a_retry_within_the_horizon_is_dropped_and_one_after_it_is_kept():
    p = Processor(OrderingPolicy(), dedup=Dedup(key="id", within=10))
    out = p.on_events([ev(1, "x", 0), ev(5, "x", 1), ev(10.5, "x", 2), ev(11, "x", 3)])
    # W before the third is 5 < 1 + 10: a duplicate, and it moves no watermark; at 11 W is 5.
    assert [o.record.value["index"] for o in out.events] == [0]
    assert [(d.reason, d.value["index"]) for d in out.dead_letters] == [
        ("duplicate", 1),
        ("duplicate", 2),
        ("duplicate", 3),
    ]
    assert out.dead_letters[0].detail.startswith(
        "dedup key 'x' first seen at 1, within 10 s (until the watermark reaches 11)"
    )
    out = p.on_events([ev(12, "y", 4), ev(13, "x", 5)])  # W = 12 >= 11: "x" expired
    assert [o.record.value["index"] for o in out.events] == [4, 5]
    assert p.counters.duplicate == 3 and p.counters.events == 6


def test_state_stays_bounded_by_the_horizon():
    p = Processor(OrderingPolicy(), dedup=Dedup(key="id", within=5))
    sizes = []
    for i in range(1000):
        p.on_events([ev(float(i), i, i)])  # a new key a second
        assert p._flow.dedup is not None
        sizes.append(p._flow.dedup.entries())
    # The 5 keys within the horizon, and the one the watermark has just passed (removed at
    # the next event's check): never more, however long the stream.
    assert max(sizes) == 6 and sizes[-1] == 6
    p2 = Processor(OrderingPolicy(), dedup=Dedup(key="id", within=5))
    restore(p2, snapshot(p))
    assert p2._flow.dedup is not None and p2._flow.dedup.entries() == 6
    assert not is_empty(p2)  # its keys are state to save, with no window open
    out = p2.on_events([ev(999.5, 997, 2000), ev(1000, 994, 2001)])
    assert [(d.reason, d.value["index"]) for d in out.dead_letters] == [("duplicate", 2000)]
    assert [o.record.value["index"] for o in out.events] == [2001]  # 994 + 5 <= W = 999


def test_with_substreams_each_substream_keeps_its_own_keys_by_its_own_watermark():
    p = Processor(OrderingPolicy(over="key"), dedup=Dedup(key="id", within=5))
    a = [_Rec(Row(0, 1, 1, "a", "x")), _Rec(Row(1, 2, 20, "a", "z"))]  # substream a: W = 20
    b = [_Rec(Row(2, 3, 2, "b", "x")), _Rec(Row(3, 4, 3, "b", "x"))]  # substream b: W = 2
    out = p.on_events(a + b + [_Rec(Row(4, 5, 21, "a", "x"))])
    assert [(d.reason, d.value["index"]) for d in out.dead_letters] == [("duplicate", 3)]
    assert [o.record.value["index"] for o in out.events] == [0, 1, 2, 4]


def test_a_key_function_that_raises_or_returns_nonsense_letters_that_event_alone():
    def ident(rec: Any) -> Any:
        v = rec.value["id"]
        if v == "boom":
            raise ValueError("no id here")
        return [v] if v == "list" else v

    p = Processor(OrderingPolicy(out_of_order=100), Tumbling(10), dedup=Dedup(key=ident, within=10))
    out = p.on_events([ev(1, "a", 0), ev(2, "boom", 1), ev(3, "list", 2), ev(4, "a", 3), ev(5, "b", 4)])
    letters = [(d.reason, d.value["index"], d.detail.splitlines()[0]) for d in out.dead_letters]
    assert letters == [
        ("invalid_value", 1, "the dedup key raised ValueError: no id here"),
        ("invalid_value", 2, "the dedup key raised TypeError: unhashable type: 'list'"),
        ("duplicate", 3, "dedup key 'a' first seen at 1, within 10 s (until the watermark reaches 11); token 3"),
    ]
    assert "in ident" in out.dead_letters[0].detail  # where the user's code raised
    (window,) = p.flush().windows
    assert window.value == 2  # "a" and "b" only
    assert (p.counters.invalid_value, p.counters.duplicate, p.counters.events) == (2, 1, 5)


def test_a_duplicate_adjusted_by_the_policy_counts_once_as_a_duplicate():
    p = Processor(OrderingPolicy(), dedup=Dedup(key="id", within=10))
    p.on_events([ev(5, "x", 0), ev(3, "x", 1)])  # out of order: would be adjusted to 5
    c = p.counters
    assert (c.duplicate, c.adjusted, c.out_of_order_adjusted) == (1, 0, 0)


def test_dedup_is_declared_on_one_input():
    with pytest.raises(ConfigurationError, match="dedup applies to the events of one input"):
        EventTime(OrderingPolicy(timestamp_by="t"), inputs=("a", "b"), dedup=Dedup(key="id", within=5))
    with pytest.raises(ConfigurationError, match="Dedup key is a field name or a function"):
        Dedup(key="", within=5)
    with pytest.raises(ConfigurationError, match="within must be a number of seconds > 0"):
        Dedup(key="id", within=math.inf)
