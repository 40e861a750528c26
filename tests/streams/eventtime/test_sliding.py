"""Sliding windows (``Sliding(span)``, Kafka Streams' ``SlidingWindows``) against a
brute-force reference (docs/event-time.md, "Sliding windows"): random samples with
disorder, ticks, every action, allowed lateness, per key or global, substreams, a snapshot
restored anywhere; Kafka's own example; and a restart through the harness."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import StreamId
from streams.core.errors import ConfigurationError
from streams.core.micros import to_micros, to_seconds
from streams.eventtime import Collect, Count, EventTime, OrderingPolicy, Processor, Sliding
from streams.eventtime.replay import Row
from streams.testing import Harness
from tests.streams.eventtime.reference import Rec, Reference, draw_cuts, draw_policy, draw_rows, run_core

LEFT, RIGHT = "left", "right"


class SlidingReference(Reference):
    """Every window ever created kept with its bounds; its events are recomputed from every
    accepted event when it closes; nothing incremental."""

    def __init__(self, policy: OrderingPolicy, spec: Sliding, per_key: bool) -> None:
        super().__init__(policy)
        self.d, self.a = spec.span, spec.allowed_lateness
        self.per_key = per_key or self.substreams
        self.created: dict[tuple, bool] = {}  # (lane, key, kind, t) -> emitted
        self.windows: list[tuple] = []

    def bounds(self, kind: str, t: float) -> tuple[float, float]:
        """In integer microseconds, as the contract's times: a right window starts 1 µs after ``t``."""
        if kind == LEFT:
            return to_seconds(to_micros(t) - to_micros(self.d)), t
        start = to_micros(t) + 1
        return to_seconds(start), to_seconds(start + to_micros(self.d))

    def members(self, lane: Any, key: Any, start: float, end: float, extra: tuple = ()) -> list[tuple[Row, float]]:
        mine = [(r, ts) for r, ts in [*self.accepted, *extra] if self.where(r) == (lane, key)]
        return [(r, ts) for r, ts in mine if start <= ts <= end]

    def where(self, row: Row) -> tuple[Any, Any]:
        return (row.key if self.substreams else None, row.key if self.per_key else None)

    def window(self, row: Row, lane: Any, ts: float, w: float) -> bool:
        lane, key = self.where(row)
        times = {t for r, t in self.accepted if self.where(r) == (lane, key)}
        candidates = [(LEFT, ts), (RIGHT, ts), *((RIGHT, t) for t in times if t < ts)]
        new = []
        for kind, t in candidates:
            start, end = self.bounds(kind, t)
            if (lane, key, kind, t) in self.created or w > end + self.a:
                continue
            if self.members(lane, key, start, end, ((row, ts),)):
                new.append((lane, key, kind, t))
        open_with = [
            c
            for c, emitted in self.created.items()
            if c[:2] == (lane, key) and not emitted and self.bounds(*c[2:])[0] <= ts <= self.bounds(*c[2:])[1]
        ]
        holding = [c for c in new if self.bounds(*c[2:])[0] <= ts <= self.bounds(*c[2:])[1]]
        if not holding and not open_with:
            return False  # in no open window: nothing created
        self.created.update(dict.fromkeys(new, False))
        return True

    def close(self, clock: float | None) -> None:
        for c, emitted in self.created.items():
            lane, key, kind, t = c
            start, end = self.bounds(kind, t)
            if not emitted and self.lane_w(lane) > end + self.a:
                self.created[c] = True
                events = tuple(sorted(r.index for r, _ in self.members(lane, key, start, end)))
                self.windows.append((key, start, end, events, clock, True))  # a final result (no updates)


@st.composite
def samples(draw: Any) -> tuple[list[Row], OrderingPolicy, Sliding, bool, list[int]]:
    rows = draw_rows(draw, "ab", most=30, ids=lambda _, i: i)
    policy = draw_policy(draw, out_of_order=(0.0, 2.0, 20.0))
    spec = Sliding(draw(st.sampled_from([1.0, 3.0, 10.0])), allowed_lateness=draw(st.sampled_from([0.0, 0.0, 5.0])))
    return rows, policy, spec, draw(st.booleans()), draw_cuts(draw)


def _canonical(windows: list[tuple]) -> list[tuple]:
    """Windows closed in one step in a canonical order (substreams close lane by lane)."""
    return sorted(windows, key=lambda w: (w[4] is None, w[4] or 0, w[2], w[1], repr(w[0])))


def run(
    rows: list[Row], policy: OrderingPolicy, spec: Sliding, per_key: bool, cuts: list[int], restore_at: int = -1
) -> tuple[dict, list[tuple]]:
    def make() -> Processor:
        group_by = policy.over or ("key" if per_key else None)
        return Processor(policy, spec, Collect(), select="index", group_by=group_by, trace=True)

    fates, results, p = run_core(make, rows, cuts, restore_at)
    assert p.open_windows() == [] and p.held_since() is None  # the flush emitted every one
    return fates, [(w.key, w.start, w.end, tuple(sorted(w.value)), w.closed_at, w.final) for w in results]


@settings(max_examples=400, deadline=None)
@given(samples())
def test_sliding_windows_match_the_brute_force_reference(sample):
    rows, policy, spec, per_key, cuts = sample
    fates, windows = run(rows, policy, spec, per_key, cuts)
    ref = SlidingReference(policy, spec, per_key).run(rows, flush=True)
    assert fates == ref.fates
    assert _canonical(windows) == _canonical(ref.windows)
    # Every kept event is in a window; a refused one is in none; windows are distinct sets.
    members = {i for w in windows for i in w[3]}
    assert members == {i for i, f in fates.items() if f[0] in ("kept", "adjusted")}
    by_key: dict[Any, list[tuple]] = {}
    for w in windows:
        by_key.setdefault(w[0], []).append(w[3])
    if policy.action != "accept":  # a late event may leave two windows the same set
        assert all(len(sets) == len(set(sets)) for sets in by_key.values())
        assert all(f[0] != "dead_letter" for f in fates.values())


@settings(max_examples=150, deadline=None)
@given(samples(), st.integers(0, 12))
def test_a_snapshot_restored_mid_window_changes_nothing(sample, restore_at):
    rows, policy, spec, per_key, cuts = sample
    assert run(rows, policy, spec, per_key, cuts, restore_at) == run(rows, policy, spec, per_key, cuts)


def test_kafka_s_example_and_the_close_after_the_end():
    """Kafka's SlidingWindows example (time difference 5 s): five windows; each closes once
    the watermark passes its end (W > end + A), not at W == end."""
    p = Processor(OrderingPolicy(), Sliding(5), Collect(), select="index")
    out = p.on_events([Rec(Row(i, t, t, None, i)) for i, t in enumerate([8.0, 9.2, 12.4])])
    assert [(w.end, w.value) for w in out.windows] == [(8.0, [0]), (9.2, [0, 1])]  # W = 12.4 > 9.2
    out = p.on_events([Rec(Row(3, 13.0, 13.0, None, 3))])  # W = 13: [8.000001, 13.000001] stays open
    assert [(w.start, w.end, w.value) for w in out.windows] == [(7.4, 12.4, [0, 1, 2])]
    assert [(w.start, w.end, w.value, w.final) for w in p.flush().windows] == [
        (8.0, 13.0, [0, 1, 2, 3], True),  # 13's left window: both bounds included
        (8.000001, 13.000001, [1, 2, 3], True),  # Kafka's [8001;13001], a microsecond after
        (9.200001, 14.200001, [2, 3], True),
        (12.400001, 17.400001, [3], True),
    ]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Sliding(0), "span must be a number of seconds > 0"),
        (lambda: Sliding(5, allowed_lateness=-1), "allowed_lateness must be a number of seconds >= 0"),
        (
            lambda: EventTime(OrderingPolicy(timestamp_by="t"), Sliding(5), inputs=("a", "b")),
            "sliding windows take the events of one input",
        ),
    ],
)
def test_declarations_that_mean_nothing_are_refused(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


class Bursts:
    """How many readings fell within ten seconds of each other, for every distinct set."""

    event_time = EventTime(OrderingPolicy(timestamp_by="t"), Sliding(10), Count())

    def __init__(self, stream_id: StreamId) -> None: ...

    def on_window(self, result: Any) -> None: ...


async def test_sliding_windows_survive_a_restart() -> None:
    async with Harness() as harness:
        harness.implicit("readings")(Bursts)
        await harness.publish("readings/s1", {"t": 1}, {"t": 5}, at=6)
        await harness.restart()
        await harness.publish("readings/s1", {"t": 30}, at=31)
        assert [(w.start, w.end, w.value) for w in harness.windows(Bursts)] == [
            (-9.0, 1.0, 1),
            (-5.0, 5.0, 2),
            (1.000001, 11.000001, 1),
        ]
        await harness.complete("readings/s1")
        assert [w.value for w in harness.windows(Bursts)][3:] == [1]  # [20, 30]
