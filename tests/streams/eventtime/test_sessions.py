"""Session windows against a brute-force reference of the contract (docs/event-time.md,
"Session windows"), on random samples with disorder, ticks, every action, allowed lateness,
idle timeouts, per-key sessions and substreams."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigurationError
from streams.eventtime import Collect, Count, OrderingPolicy, Processor, Session
from streams.eventtime.replay import Row
from tests.streams.eventtime.reference import Rec, Reference, draw_cuts, draw_policy, draw_rows
from tests.streams.eventtime.reference import run_core as run_events

INF = math.inf


@dataclass
class _Session:
    lane: Any
    key: Any
    start: float
    end: float
    events: list[int] = field(default_factory=list)


class SessionReference(Reference):
    """The contract written out as plainly as possible: every session and every emitted
    session kept in lists, every watermark recomputed, nothing incremental or forgotten."""

    def __init__(self, policy: OrderingPolicy, spec: Session, per_key: bool) -> None:
        super().__init__(policy)
        self.g, self.a, self.i = spec.gap, spec.allowed_lateness, spec.idle_timeout
        self.per_key = per_key or self.substreams
        self.last_ingest: dict[Any, float] = {}
        self.open: list[_Session] = []
        self.emitted: list[_Session] = []
        self.windows: list[tuple] = []

    def close(self, clock: float | None) -> None:
        due = [s for s in self.open if self.lane_w(s.lane) >= s.end + self.a]
        for s in sorted(due, key=lambda s: s.end):
            self.open.remove(s)
            self.emitted.append(s)
            final = self.lane_w(s.lane) == INF
            self.windows.append((s.key, s.start, s.end, tuple(sorted(s.events)), clock, final))

    def idle(self, now: float, strict: bool) -> None:
        if self.i is None:
            return
        for lane in list(dict.fromkeys(s.lane for s in self.open)):
            while True:
                ends = [s.end for s in self.open if s.lane == lane and s.end + self.a > self.lane_w(lane)]
                if not ends:
                    break
                end = min(ends)
                due = max(end, self.last_ingest.get(lane, -INF)) + self.i
                if not (due < now or (due == now and not strict)):
                    break
                self.w[lane] = max(self.lane_w(lane), end + self.a)
                self.close(now)

    def tick(self, t: float) -> None:
        super().tick(t)
        self.idle(t, strict=False)

    def arrive(self, arrival: float) -> None:
        self.idle(arrival, strict=True)

    def window(self, row: Row, lane: Any, ts: float, w: float) -> bool:
        # 4. the candidate [ts, ts + G)
        assert row.event_time is not None
        self.last_ingest[lane] = row.arrival_time
        key = row.key if self.per_key else None
        lo, hi = ts, ts + self.g
        mine = [s for s in self.open if s.lane == lane and s.key == key and s.start < hi and lo < s.end]
        spent = [s for s in self.emitted if s.lane == lane and s.key == key and s.start < hi and lo < s.end]
        if spent or (not mine and w >= hi + self.a):
            return False
        merged = _Session(lane, key, min([lo] + [s.start for s in mine]), max([hi] + [s.end for s in mine]))
        for s in mine:
            self.open.remove(s)
            merged.events += s.events
        merged.events.append(row.index)
        self.open.append(merged)
        return True


@st.composite
def samples(draw: Any) -> tuple[list[Row], OrderingPolicy, Session, bool, list[int]]:
    rows, policy = draw_rows(draw, "abc"), draw_policy(draw)
    spec = Session(
        draw(st.sampled_from([2.0, 5.0, 10.0])),
        allowed_lateness=draw(st.sampled_from([0.0, 0.0, 5.0])),
        idle_timeout=draw(st.sampled_from([None, None, 7.0])),
    )
    return rows, policy, spec, draw(st.booleans()), draw_cuts(draw)


def run_core(
    rows: list[Row], policy: OrderingPolicy, spec: Session, per_key: bool, cuts: list[int], restore_at: int = -1
) -> tuple[dict[int, tuple], list[tuple]]:
    """Fates and windows of the processor; ``restore_at``: after that many calls, carry on
    in a fresh processor restored from a snapshot."""
    group_by = policy.over or ("key" if per_key else None)

    def make() -> Processor:
        return Processor(policy, spec, Collect(), select="index", group_by=group_by, trace=True)

    fates, results, p = run_events(make, rows, cuts, restore_at)
    assert p.open_windows() == []
    return fates, [(w.key, w.start, w.end, tuple(w.value), w.closed_at, w.final) for w in results]


def run_reference(
    rows: list[Row], policy: OrderingPolicy, spec: Session, per_key: bool
) -> tuple[dict[int, tuple], list[tuple]]:
    ref = SessionReference(policy, spec, per_key).run(rows, flush=True)
    return ref.fates, ref.windows


def _grouped(windows: list[tuple]) -> list[tuple]:
    """Windows closed at the same instant, in a canonical order (several lanes' idle
    timeouts at one instant close lane by lane)."""
    return sorted(windows, key=lambda w: (w[4] is None, w[4] if w[4] is not None else 0, w[2], repr(w[0]), w[1]))


@settings(max_examples=400, deadline=None)
@given(samples())
def test_sessions_match_the_brute_force_reference(sample):
    rows, policy, spec, per_key, cuts = sample
    fates, windows = run_core(rows, policy, spec, per_key, cuts)
    ref_fates, ref_windows = run_reference(rows, policy, spec, per_key)
    assert fates == ref_fates
    assert _grouped(windows) == _grouped(ref_windows)
    # Every event: in exactly one session, or refused with a reason.
    members = [i for w in windows for i in w[3]]
    assert len(members) == len(set(members))
    for index, (status, reason, _) in fates.items():
        assert (index in members) == (status in ("kept", "adjusted"))
        if status in ("dropped", "dead_letter"):
            assert reason is not None
    if policy.action != "accept":  # only accept lets a timestamp below the watermark through
        assert all(status != "dead_letter" for status, _, _ in fates.values())


@settings(max_examples=150, deadline=None)
@given(samples(), st.integers(0, 12))
def test_a_snapshot_restored_mid_session_changes_nothing(sample, restore_at):
    rows, policy, spec, per_key, cuts = sample
    assert run_core(rows, policy, spec, per_key, cuts, restore_at) == run_core(rows, policy, spec, per_key, cuts)


def ev(t: float, arrival: float | None = None, key: str = "k", index: int = 0) -> Rec:
    return Rec(Row(index, t if arrival is None else arrival, t, key))


def test_two_events_exactly_a_gap_apart_are_two_sessions_and_a_bridge_merges_them():
    p = Processor(OrderingPolicy(out_of_order=100), Session(10), Count())
    p.on_events([ev(0), ev(10, 10.5), ev(30, 31)])
    assert p.open_windows() == [(None, 0.0, 10.0), (None, 10.0, 20.0), (None, 30.0, 40.0)]
    p.on_events([ev(19, 32)])  # [19, 29) extends [10, 20)
    assert p.open_windows() == [(None, 0.0, 10.0), (None, 10.0, 29.0), (None, 30.0, 40.0)]
    p.on_events([ev(22, 33)])  # [22, 32) bridges [10, 29) and [30, 40)
    assert p.open_windows() == [(None, 0.0, 10.0), (None, 10.0, 40.0)]
    out = p.flush()
    assert [(w.start, w.end, w.value) for w in out.windows] == [(0.0, 10.0, 1), (10.0, 40.0, 4)]


def test_an_accepted_event_that_would_extend_an_emitted_session_is_dead_lettered():
    p = Processor(OrderingPolicy(action="accept"), Session(10), Count(), group_by="key")
    out = p.on_events([ev(0), ev(5, 5.5), ev(20, 21)])
    assert [(w.key, w.start, w.end, w.value, w.closed_at) for w in out.windows] == [("k", 0.0, 15.0, 2, 21.0)]
    out = p.on_events([ev(14, 22, index=7), ev(12, 23, key="other", index=8)])
    [letter] = out.dead_letters
    assert (letter.reason, letter.value["index"]) == ("window_closed", 7)
    assert p.counters.window_closed == 1
    # the other key has no emitted session: 12 + 10 > W = 20, so it opens one
    assert p.open_windows() == [("other", 12.0, 22.0), ("k", 20.0, 30.0)]


def test_idle_timeout_closes_a_quiet_session_by_processing_time():
    p = Processor(OrderingPolicy(), Session(10, idle_timeout=5), Count())
    p.on_events([ev(0, 0), ev(3, 3)])
    assert p.next_tick() == 15.0  # a lower bound: the session ended at 10 when it opened
    assert p.on_tick(15).windows == []
    assert p.next_tick() == 18.0  # max(end 13, last ingest 3) + 5
    assert p.on_tick(17.9).windows == []
    [w] = p.on_tick(18).windows
    assert (w.start, w.end, w.value, w.closed_at) == (0.0, 13.0, 2, 18)


def test_state_is_the_running_aggregate_and_forgotten_sessions_do_not_pile_up():
    p = Processor(OrderingPolicy(), Session(1), Count(), group_by="key")
    events = [ev(float(t), key=f"k{t % 50}", index=t) for t in range(0, 5000)]
    emitted = sum(len(p.on_events(events[i : i + 100]).windows) for i in range(0, 5000, 100))
    store = p._flow.store
    assert store is not None
    assert len(store.keys) <= 50 and len(store._forget) <= 60  # the keys of the last few seconds
    assert emitted + len(p.open_windows()) == 5000  # 50 s apart per key: one event a session


def test_a_session_spec_is_checked():
    for bad in (0, -1, math.nan, "5s"):
        with pytest.raises(ConfigurationError, match="gap"):
            Session(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="allowed_lateness"):
        Session(5, allowed_lateness=-1)


def test_the_last_emitted_session_is_remembered_while_a_bridge_could_reach_it():
    # G 10: [0, 10) is emitted at W 20; 11 (accepted below W) joins [20, 30) into [11, 30);
    # then 5's candidate [5, 15) reaches both [11, 30) and the emitted [0, 10): refused.
    p = Processor(OrderingPolicy(action="accept"), Session(10), Count())
    assert [(w.start, w.end) for w in p.on_events([ev(0, 0), ev(20, 1)]).windows] == [(0.0, 10.0)]
    assert p.on_events([ev(11, 2, index=2)]).dead_letters == []
    [letter] = p.on_events([ev(5, 3, index=3)]).dead_letters
    assert (letter.reason, letter.value["index"]) == ("window_closed", 3)
    assert p.open_windows() == [(None, 11.0, 30.0)]


def test_simulate_prints_session_window_lines(tmp_path):
    from tests.streams.eventtime.test_cli import lines, simulate, write  # noqa: PLC0415 - the CLI test's helpers

    sample = "arrival_time,event_time,key\n0,0,a\n1,1,b\n3,3,a\n6,12,a\n9,9,b\n30,,\n"
    out = lines(simulate("--window", "session:5s", "--group-by-key", "--late-arrival", "10s", write(tmp_path, sample)))
    # at 6, event time 12 moves W to 12: both first sessions close, in order of end; b's 9
    # is then below W and adjusted to 12; the tick at 30 (W 20) closes the rest
    assert [o for o in out if o["type"] == "window"] == [
        {"type": "window", "key": "b", "start": 1, "end": 6, "count": 1, "events": [1], "closed_at": 6, "final": False},
        {
            "type": "window",
            "key": "a",
            "start": 0,
            "end": 8,
            "count": 2,
            "events": [0, 2],
            "closed_at": 6,
            "final": False,
        },
        {
            "type": "window",
            "key": "a",
            "start": 12,
            "end": 17,
            "count": 1,
            "events": [3],
            "closed_at": 30,
            "final": False,
        },
        {
            "type": "window",
            "key": "b",
            "start": 12,
            "end": 17,
            "count": 1,
            "events": [4],
            "closed_at": 30,
            "final": False,
        },
    ]
    bad = simulate("--window", "session:0s", write(tmp_path, sample))
    assert (
        bad.returncode == 2
        and bad.stderr.strip()
        == "headrace simulate: error: --window: a session gap must be more than 0, not 'session:0s'"
    )


def test_sessions_over_merged_inputs_close_by_the_slower_input_and_hold_each_input():
    p = Processor(OrderingPolicy(), Session(10), Count(), group_by="key", inputs=("a", "b"))
    assert p.on_events([ev(0, 0, index=0), ev(25, 1, index=1)], "a").windows == []  # b holds W at -inf
    p.on_events([ev(5, 2, index=2)], "b")  # joins a's [0, 10) -> [0, 15)
    assert p.open_windows() == [("k", 0.0, 15.0), ("k", 25.0, 35.0)]
    assert (p.held_since("a"), p.held_since("b"), p.held_since()) == (0, 2, 0)
    [w] = p.on_events([ev(20, 3, index=3)], "b").windows  # W = min(25, 20) closes [0, 15)
    assert (w.start, w.end, w.value) == (0.0, 15.0, 2)
    assert (p.held_since("a"), p.held_since("b")) == (1, 3)  # [20, 35) holds both inputs
