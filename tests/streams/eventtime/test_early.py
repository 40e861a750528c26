"""Early and updated results (docs/event-time.md, "Early and updated results") against a
brute-force reference of the contract, on random samples with disorder, ticks, every action,
allowed lateness, late events, ``Every(seconds)`` and ``Every(events=N)``; and the cases
one by one."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigurationError
from streams.eventtime import Collect, Every, Hopping, Max, OrderingPolicy, Processor, Tumbling, WindowResult
from streams.eventtime.replay import Row
from tests.streams.eventtime.helpers import draw_rows, ev, feed_rows, model_rows

INF = math.inf
FixedSpec = Tumbling | Hopping


@dataclass
class _Book:
    since: float
    revision: int = 0
    emitted: bool = False
    last: tuple[int, ...] = ()
    count: int = 0


@dataclass
class Reference:
    """The contract written out plainly: every window's events in a dict, the watermark
    recomputed per step, each window's bookkeeping a record; no panes, heaps or bounds."""

    policy: OrderingPolicy
    spec: FixedSpec
    per_key: bool
    w: float = -INF
    newest: float = -INF
    events: dict[tuple[int, Any], list[int]] = field(default_factory=dict)  # (window, key) -> indexes
    books: dict[tuple[int, Any], _Book] = field(default_factory=dict)
    ontime: set[int] = field(default_factory=set)  # windows whose on-time step is to come
    closed: set[int] = field(default_factory=set)
    pending: list[tuple[int, Any]] = field(default_factory=list)
    history: dict[tuple[Any, float], list[tuple]] = field(default_factory=dict)

    def bounds(self, j: int) -> tuple[float, float]:
        return j * self.spec.hop, j * self.spec.hop + self.spec.size

    def windows_of(self, ts: float) -> list[int]:
        hop, size = self.spec.hop, self.spec.size
        return [
            j for j in range(math.floor((ts - size) / hop), math.floor(ts / hop) + 1) if j * hop <= ts < j * hop + size
        ]

    def emit(self, j: int, key: Any, clock: float | None, final: bool) -> bool:
        book = self.books[(j, key)]
        value = tuple(sorted(self.events[(j, key)]))
        if not final and book.emitted and value == book.last:
            return False
        self.history.setdefault((key, self.bounds(j)[0]), []).append((book.revision, final, value, clock))
        book.revision += 1
        if clock is not None:
            book.since = clock
        book.emitted, book.last, book.count = True, value, 0
        return True

    def step6(self, clock: float | None) -> None:
        """On-time results (W >= end) and closes (W >= end + A), in order of due time."""
        lateness = self.spec.allowed_lateness
        due = [(self.bounds(j)[1], 1, j) for j in self.ontime if self.bounds(j)[1] <= self.w]
        windows = {j for j, _ in self.events}
        due += [
            (self.bounds(j)[1] + lateness, 0, j)
            for j in windows - self.closed
            if self.bounds(j)[1] + lateness <= self.w
        ]
        for _, is_ontime, j in sorted(due):
            keys = [key for (jj, key) in self.events if jj == j]
            if is_ontime:
                self.ontime.discard(j)
                for key in keys:
                    self.emit(j, key, clock, final=False)
            else:
                self.closed.add(j)
                for key in keys:
                    self.emit(j, key, clock, final=True)

    def lift(self, value: float, clock: float | None) -> None:
        self.w = max(self.w, value)
        self.step6(clock)

    def event(self, row: Row) -> None:
        p, arr, ts = self.policy, row.arrival_time, row.event_time
        assert ts is not None
        if p.early_arrival is not None and ts - arr > p.early_arrival:
            return
        if p.late_arrival is not None and arr - ts > p.late_arrival:
            if p.action == "drop":
                return
            if p.action == "adjust":
                ts = arr - p.late_arrival
        if ts < self.w:
            if p.action == "drop":
                return
            if p.action == "adjust":
                ts = self.w
        key = row.key if self.per_key else None
        every = self.spec.emit
        assert isinstance(every, Every)
        for j in self.windows_of(ts):
            if self.bounds(j)[1] + self.spec.allowed_lateness <= self.w:
                continue  # closed (a late event in no open window is dead-lettered)
            if not any(jj == j for jj, _ in self.events) and self.bounds(j)[1] > self.w:
                self.ontime.add(j)  # the window opens before its end: its on-time step is ahead
            self.events.setdefault((j, key), []).append(row.index)
            book = self.books.setdefault((j, key), _Book(since=arr))
            book.count += 1
            if every.events is not None and book.count >= every.events:
                self.pending.append((j, key))
        self.newest = max(self.newest, ts)
        target = self.newest - p.out_of_order
        if p.late_arrival is not None:
            target = max(target, arr - p.late_arrival)
        self.lift(target, arr)
        for j, key in dict.fromkeys(self.pending):
            if j not in self.closed and self.books[(j, key)].count >= (every.events or 0):
                self.emit(j, key, arr, final=False)
        self.pending.clear()

    def flush(self) -> None:
        self.lift(INF, None)

    def tick(self, t: float) -> None:
        if self.policy.late_arrival is not None:
            self.lift(t - self.policy.late_arrival, t)
        every = self.spec.emit
        assert isinstance(every, Every)
        if every.seconds is None:
            return
        for (j, key), book in sorted(self.books.items(), key=lambda item: item[0][0]):
            if j not in self.closed and book.count and book.since + every.seconds <= t:
                if not self.emit(j, key, t, final=False):
                    book.count = 0


@st.composite
def samples(draw: Any) -> tuple[list[Row], OrderingPolicy, FixedSpec, bool, list[int]]:
    rows = draw_rows(draw, ticks=5, near=(-4, 1))
    policy = OrderingPolicy(
        out_of_order=draw(st.sampled_from([0.0, 2.0, 5.0])),
        late_arrival=draw(st.sampled_from([None, 10.0])),
        early_arrival=draw(st.sampled_from([None, 10.0])),
        action=draw(st.sampled_from(["adjust", "drop", "accept", "accept"])),
    )
    every = draw(st.sampled_from([Every(3), Every(1), Every(events=1), Every(events=2), Every(events=3)]))
    lateness = draw(st.sampled_from([0.0, 5.0, 5.0, 12.0]))
    spec: FixedSpec = draw(
        st.sampled_from(
            [
                Tumbling(10, allowed_lateness=lateness, emit=every),
                Hopping(10, 5, allowed_lateness=lateness, emit=every),
                Hopping(5, 8, allowed_lateness=lateness, emit=every),
            ]
        )
    )
    cuts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=10))
    return rows, policy, spec, draw(st.booleans()), cuts


def run_core(
    rows: list[Row], policy: OrderingPolicy, spec: FixedSpec, per_key: bool, cuts: list[int], restore_at: int = -1
) -> dict[tuple[Any, float], list[tuple]]:
    """Each window's results in order, as ``(revision, final, value, closed_at)``;
    ``restore_at``: after that many calls, carry on in a processor restored from a snapshot.
    The processor's counts of what it emitted (carried over by the snapshot) must match."""

    def make() -> Processor:
        return Processor(policy, spec, Collect(), select="index", group_by="key" if per_key else None)

    outs, p = feed_rows(make, rows, cuts, restore_at)
    results = [w for out in outs for w in out.windows]
    counted = p.metrics().counters
    assert (counted["windows_emitted"], counted["early_results"]) == (
        sum(w.final for w in results),
        sum(not w.final for w in results),
    )
    return _histories(results)


def _histories(results: list[WindowResult]) -> dict[tuple[Any, float], list[tuple]]:
    history: dict[tuple[Any, float], list[tuple]] = {}
    for w in results:
        history.setdefault((w.key, w.start), []).append((w.revision, w.final, tuple(w.value), w.closed_at))
    return history


def run_reference(rows: list[Row], policy: OrderingPolicy, spec: FixedSpec, per_key: bool) -> dict:
    ref = Reference(policy, spec, per_key)
    model_rows(ref, rows)
    return ref.history


@settings(max_examples=400, deadline=None)
@given(samples())
def test_updates_match_the_brute_force_reference(sample):
    rows, policy, spec, per_key, cuts = sample
    history = run_core(rows, policy, spec, per_key, cuts)
    assert history == run_reference(rows, policy, spec, per_key)
    for results in history.values():
        # revisions 0, 1, 2, ... and one final, the last and highest
        assert [r[0] for r in results] == list(range(len(results)))
        assert [r[1] for r in results] == [False] * (len(results) - 1) + [True]


@settings(max_examples=150, deadline=None)
@given(samples(), st.integers(0, 12))
def test_a_snapshot_restored_mid_window_keeps_the_revisions(sample, restore_at):
    rows, policy, spec, per_key, cuts = sample
    restored = run_core(rows, policy, spec, per_key, cuts, restore_at)
    assert restored == run_reference(rows, policy, spec, per_key)


def seen(windows: list[WindowResult]) -> list[tuple]:
    return [(w.start, w.value, w.final, w.revision, w.closed_at) for w in windows]


def test_updates_at_ticks_every_period_while_the_value_changes():
    p = Processor(OrderingPolicy(), Tumbling(60, emit=Every(10)), Collect(), select="index")
    assert seen(p.on_events([ev(1.0, index=0), ev(2.0, index=1)]).windows) == []
    assert p.next_tick() == 11.0  # a period after the window opened
    assert seen(p.on_tick(10.0).windows) == []
    assert seen(p.on_tick(11.0).windows) == [(0.0, [0, 1], False, 0, 11.0)]
    assert seen(p.on_tick(30.0).windows) == []  # nothing changed since
    p.on_events([ev(31.0, index=2)])
    assert seen(p.on_tick(35.0).windows) == [(0.0, [0, 1, 2], False, 1, 35.0)]
    p.on_events([ev(40.0, index=3)])
    assert seen(p.on_tick(44.0).windows) == []  # within a period of the last update
    assert seen(p.on_events([ev(61.0, index=4)]).windows) == [(0.0, [0, 1, 2, 3], True, 2, 61.0)]


def test_an_unchanged_value_brings_no_update():
    p = Processor(OrderingPolicy(), Tumbling(60, emit=Every(events=1)), Max(), select="index")
    out = p.on_events([ev(1.0, index=5), ev(2.0, index=3), ev(3.0, index=7), ev(61.0, index=0)])
    assert seen(out.windows) == [
        (0.0, 5, False, 0, 1.0),
        (0.0, 7, False, 1, 3.0),
        (0.0, 7, True, 2, 61.0),
        (60.0, 0, False, 0, 61.0),  # after the step that closed the first window
    ]


def test_on_time_result_then_late_events_in_updates_then_the_final():
    p = Processor(
        OrderingPolicy(action="accept"), Tumbling(10, allowed_lateness=20, emit=Every(5)), Collect(), select="index"
    )
    p.on_events([ev(1.0, index=0), ev(2.0, index=1)])
    assert seen(p.on_events([ev(12.0, index=2)]).windows) == [(0.0, [0, 1], False, 0, 12.0)]  # W >= end: on time
    assert seen(p.on_events([ev(3.0, 14.0, index=3)]).windows) == []  # late, accepted within A
    assert seen(p.on_tick(17.0).windows) == [  # the late event is carried by the next update
        (0.0, [0, 1, 3], False, 1, 17.0),
        (10.0, [2], False, 0, 17.0),  # a period after it opened
    ]
    out = p.on_events([ev(30.0, index=4)])
    assert seen(out.windows)[0] == (0.0, [0, 1, 3], True, 2, 30.0)


def test_a_window_declared_final_emits_its_result_once_with_revision_zero():
    p = Processor(OrderingPolicy(), Tumbling(10, allowed_lateness=5), Collect(), select="index")
    p.on_events([ev(1.0, index=0)])
    assert seen(p.on_tick(100.0).windows) == []
    assert p.next_tick() == math.inf
    assert seen(p.flush().windows) == [(0.0, [0], True, 0, None)]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Every(), "seconds or events=N, not both"),
        (lambda: Every(5, events=2), "seconds or events=N, not both"),
        (lambda: Every(0), "seconds must be a number of seconds > 0"),
        (lambda: Every(events=0), "whole number >= 1"),
        (lambda: Every(events=True), "whole number >= 1"),
        (lambda: Tumbling(10, emit="early"), "emit is 'final' or Every"),
        (lambda: Hopping(10, 5, emit=3), "emit is 'final' or Every"),
    ],
)
def test_an_emission_is_checked(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_substreams_keep_their_own_revisions_and_close_by_their_own_watermark():
    p = Processor(OrderingPolicy(over="key"), Tumbling(10, emit=Every(events=1)), Collect(), select="index")
    out = p.on_events([ev(1.0, key="a", index=0), ev(2.0, key="b", index=1), ev(3.0, key="a", index=2)])
    assert [(w.key, w.value, w.final, w.revision) for w in out.windows] == [
        ("a", [0], False, 0),
        ("b", [1], False, 0),
        ("a", [0, 2], False, 1),
    ]
    out = p.on_events([ev(12.0, key="a", index=3)])  # a's watermark passes 10; b's stays at 2
    assert [(w.key, w.start, w.value, w.final, w.revision) for w in out.windows] == [
        ("a", 0.0, [0, 2], True, 2),
        ("a", 10.0, [3], False, 0),
    ]
    assert [(w.key, w.value, w.final, w.revision) for w in p.flush().windows] == [
        ("b", [1], True, 1),
        ("a", [3], True, 1),
    ]


def test_merged_inputs_update_at_once_and_close_by_the_slower_input():
    p = Processor(OrderingPolicy(), Tumbling(10, emit=Every(events=2)), Collect(), select="index", inputs=["x", "y"])
    assert seen(p.on_events([ev(1.0, index=0)], "x").windows) == []
    assert seen(p.on_events([ev(2.0, index=1), ev(15.0, index=2)], "y").windows) == [(0.0, [0, 1], False, 0, 2.0)]
    out = p.on_events([ev(16.0, index=3)], "x")  # now both inputs have passed 10
    assert seen(out.windows) == [(0.0, [0, 1], True, 1, 16.0), (10.0, [2, 3], False, 0, 16.0)]
