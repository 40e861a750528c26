"""Interval joins against a brute-force reference of the contract (docs/event-time.md,
"Interval joins"), on random two-input samples with disorder, ticks, every action and
refusals: the same pairs, each once, emitted when the contract says; every event joined,
emitted unmatched, or refused with a reason."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigurationError
from streams.eventtime import EventOutcome, EventTime, OrderingPolicy, Processor, Tumbling
from streams.eventtime.joins import IntervalJoin
from tests.streams.eventtime.reference import steps_1_to_3

INF = math.inf
L, R = "clicks", "orders"


@dataclass(frozen=True)
class Obs:
    index: int
    side: str | None  # None: a tick of every input
    arrival: float
    event_time: float | None = None
    key: str | None = None


class _Rec:
    __slots__ = ("value", "event_time", "arrival_time", "token")

    def __init__(self, o: Obs) -> None:
        self.value = {"key": o.key, "index": o.index}
        self.event_time, self.arrival_time, self.token = o.event_time, o.arrival, o.index


@st.composite
def samples(draw: Any) -> tuple[list[Obs], OrderingPolicy, IntervalJoin]:
    n = draw(st.integers(1, 40))
    obs, arrival = [], 0.0
    for i in range(n):
        arrival += draw(st.sampled_from([0.0, 1.0, 2.0]))
        if draw(st.integers(0, 7)) == 0:
            obs.append(Obs(i, None, arrival))
        else:
            skew = draw(st.integers(-20, 20)) if draw(st.integers(0, 3)) == 0 else draw(st.integers(-3, 1))
            obs.append(Obs(i, draw(st.sampled_from([L, R])), arrival, arrival + skew, draw(st.sampled_from("ab"))))
    policy = OrderingPolicy(
        out_of_order=draw(st.sampled_from([0.0, 2.0, 5.0])),
        late_arrival=draw(st.sampled_from([None, 8.0])),
        early_arrival=draw(st.sampled_from([None, 10.0])),
        action=draw(st.sampled_from(["adjust", "drop", "accept", "accept"])),
    )
    lower = draw(st.sampled_from([-5.0, 0.0, 2.0]))
    join = IntervalJoin(
        lower=lower,
        upper=lower + draw(st.sampled_from([0.0, 3.0, 10.0])),
        how=draw(st.sampled_from(["inner", "left"])),
        allowed_lateness=draw(st.sampled_from([0.0, 0.0, 4.0])),
    )
    return obs, policy, join


def run_core(obs: list[Obs], policy: OrderingPolicy, join: IntervalJoin) -> tuple[dict, list, list]:
    """Fates (index -> status, reason, timestamp), emitted groups (left index, [right
    indexes], closed_at, final) and the dead letters' (index, reason)."""
    p = Processor(policy, None, group_by="key", inputs=(L, R), join=join, trace=True)
    fates: dict[int, tuple] = {}
    groups: list[tuple] = []
    letters: list[tuple] = []
    outs = []
    for o in obs:
        outs.append(p.on_tick(o.arrival) if o.side is None else p.on_events([_Rec(o)], o.side))
    outs.append(p.flush())
    for out in outs:
        for item in out.trace:
            if isinstance(item, EventOutcome):
                index = item.record.value["index"]
                assert index not in fates
                fates[index] = (item.status, item.reason, item.timestamp)
        letters += [(d.value["index"], d.reason) for d in out.dead_letters]
        for j in out.joins:
            left = j.left.record.value["index"]
            right = None if j.right is None else j.right.record.value["index"]
            if groups and groups[-1][0] == left and right is not None:
                groups[-1][1].append(right)
            else:
                groups.append((left, [] if right is None else [right], j.closed_at, j.final))
    return fates, groups, letters


def run_reference(obs: list[Obs], policy: OrderingPolicy, join: IntervalJoin) -> tuple[dict, list]:
    """The contract, plainly: per-input watermarks, their minimum, every pair found by
    looking at every pair of taken events."""
    lo, hi, lateness = join.lower, join.upper, join.allowed_lateness
    w = {L: -INF, R: -INF}
    fates: dict[int, tuple] = {}
    taken: dict[int, tuple[Obs, float]] = {}
    waiting: list[tuple[float, int]] = []  # taken left events: (l.ts + upper + A, index)
    emitted: dict[int, tuple[int, float | None, bool]] = {}  # left index -> (step, closed_at, final)
    steps = iter(range(10**6))

    def emit(clock: float | None) -> None:
        merged, step = min(w.values()), next(steps)
        for close, index in sorted(waiting):
            if merged > close:
                waiting.remove((close, index))
                emitted[index] = (step, clock, merged == INF)

    for o in obs:
        if o.side is None:
            if policy.late_arrival is not None:
                for side in w:
                    w[side] = max(w[side], o.arrival - policy.late_arrival)
            emit(o.arrival)
            continue
        et, arr = o.event_time, o.arrival
        assert et is not None
        mine = w[o.side]
        status, reason, kept = steps_1_to_3(policy, arr, et, mine)
        if kept is None:
            fates[o.index] = (status, reason, None)
            continue
        ts = kept
        if ts < min(w.values()) - lateness:
            fates[o.index] = ("dead_letter", "window_closed", ts)
        else:
            fates[o.index] = (status, reason, ts)
            taken[o.index] = (o, ts)
            if o.side == L:
                waiting.append((ts + hi + lateness, o.index))
        w[o.side] = max(mine, ts - policy.out_of_order)
        if policy.late_arrival is not None:
            w[o.side] = max(w[o.side], arr - policy.late_arrival)
        emit(arr)
    for side in (L, R):  # flush completes the inputs in turn
        w[side] = INF
        emit(None)
    # every pair, by brute force
    order = sorted(emitted, key=lambda i: (emitted[i][0], taken[i][1] + hi + lateness, i))
    groups = []
    for left in order:
        lo_ts = taken[left][1]
        partners = sorted(
            (ts, i)
            for i, (o, ts) in taken.items()
            if o.side == R and o.key == taken[left][0].key and lo_ts + lo <= ts <= lo_ts + hi
        )
        if partners or join.how == "left":
            _, closed_at, final = emitted[left]
            groups.append((left, [i for _, i in partners], closed_at, final))
    return fates, groups


@settings(max_examples=400, deadline=None)
@given(samples())
def test_interval_joins_match_the_brute_force_reference(sample):
    obs, policy, join = sample
    fates, groups, letters = run_core(obs, policy, join)
    ref_fates, ref_groups = run_reference(obs, policy, join)
    assert fates == ref_fates
    assert groups == ref_groups
    # each pair once; every event joined, emitted unmatched, or refused with a reason
    pairs = [(left, right) for left, rights, _, _ in groups for right in rights]
    assert len(pairs) == len(set(pairs))
    assert sorted(letters) == sorted((i, f[1]) for i, f in fates.items() if f[0] in ("dropped", "dead_letter"))
    lefts = [left for left, _, _, _ in groups]
    assert len(lefts) == len(set(lefts))
    for o in obs:
        if o.side is None:
            continue
        status, reason, _ = fates[o.index]
        joined = o.index in lefts or any(o.index == r for _, r in pairs)
        if status in ("dropped", "dead_letter"):
            assert reason is not None and not joined
        elif o.side == L and join.how == "left":
            assert o.index in lefts
    if policy.action != "accept":
        assert all(f[0] != "dead_letter" for f in fates.values())


def ev(side: str, t: float, arrival: float, index: int, key: str = "u") -> tuple[list[_Rec], str]:
    return [_Rec(Obs(index, side, arrival, t, key))], side


def test_a_pair_waits_for_the_merged_watermark_and_right_events_leave_the_state():
    p = Processor(OrderingPolicy(), None, group_by="key", inputs=(L, R), join=IntervalJoin(0, 10))
    assert p.on_events(*ev(L, 0, 0, 0)).joins == []
    assert p.on_events(*ev(R, 5, 1, 1)).joins == []
    assert p.on_events(*ev(L, 20, 2, 2)).joins == []  # W = min(20, 5): nothing is final
    [pair] = p.on_events(*ev(R, 30, 3, 3)).joins  # W = 20 > 0 + 10
    assert (pair.left.record.value["index"], pair.right.record.value["index"], pair.closed_at) == (0, 1, 3)
    store = p._flow.store
    # right 5 can match no left at or above W 20 any more: gone; right 30 may still (20 + 10)
    assert [r.record.value["index"] for r in (e for rs in store._rights.values() for _, _, e in rs)] == [3]
    assert p.held_since() == 2 and p.held_since(R) == 3
    [pair] = p.flush().joins
    assert (pair.left.record.value["index"], pair.right.record.value["index"], pair.final) == (2, 3, True)
    assert p.held_since() is None
    assert p.metrics().counters["joins_emitted"] == 2  # each result handed out, counted once


def test_left_outer_emits_a_lonely_left_event_and_accept_refuses_what_may_be_final():
    join = IntervalJoin(-5, 10, how="left", allowed_lateness=2)
    p = Processor(OrderingPolicy(action="accept"), None, group_by="key", inputs=(L, R), join=join)
    p.on_events(*ev(L, 0, 0, 0))
    p.on_events(*ev(R, 40, 1, 1))
    [alone] = p.on_events(*ev(L, 40, 2, 2)).joins  # W 40 > 0 + 10 + 2
    assert alone.right is None and alone.columns() == {"right_time": None, "left_key": "u", "left_index": 0}
    assert p.on_events(*ev(R, 38, 3, 3)).dead_letters == []  # 38 >= W - A: joins left 40 completely
    [letter] = p.on_events(*ev(R, 37, 4, 4)).dead_letters  # below W - A
    assert letter.reason == "window_closed" and "allowed lateness" in letter.detail
    assert [(j.left.record.value["index"], j.right.record.value["index"]) for j in p.flush().joins] == [(2, 3), (2, 1)]


def test_a_join_declaration_is_checked():
    with pytest.raises(ConfigurationError, match="lower"):
        IntervalJoin(5, 1)
    with pytest.raises(ConfigurationError, match="how"):
        IntervalJoin(0, 1, how="outer")
    with pytest.raises(ConfigurationError, match="inputs"):
        EventTime(join=IntervalJoin(0, 1))
    with pytest.raises(ConfigurationError, match="no window"):
        EventTime(inputs=(L, R), window=Tumbling(5), join=IntervalJoin(0, 1))
