"""Window aggregates, built in and user-written, through tumbling and overlapping windows."""

from __future__ import annotations

import math

import pytest

from streams.eventtime import (
    Collect,
    Combined,
    Count,
    First,
    Hopping,
    Last,
    Max,
    Mean,
    Min,
    OrderingPolicy,
    Processor,
    Sum,
    Tumbling,
)
from tests.streams.eventtime.helpers import events

VALUES = [(2.0, 4.0), (8.0, 1.0), (5.0, 6.0), (12.0, 3.0)]  # (event time, reading)


def run(reducer, spec):
    evs = events([(t, t) for t, _ in VALUES])
    for e, (_, reading) in zip(evs, VALUES):
        e.value = {"reading": reading}
    p = Processor(OrderingPolicy(action="accept"), spec, reducer, select="reading")
    return {(w.start, w.end): w.value for w in p.on_events(evs).windows + p.flush().windows}


@pytest.mark.parametrize(
    ("reducer", "first_window"),
    [
        (Count(), 3),
        (Sum(), 11.0),
        (Min(), 1.0),
        (Max(), 6.0),
        (Mean(), 11.0 / 3),
        (First(), 4.0),  # first to arrive, not smallest time
        (Last(), 6.0),
        (Collect(), [4.0, 1.0, 6.0]),
    ],
)
def test_builtin_reducers_over_a_tumbling_window(reducer, first_window):
    got = run(reducer, Tumbling(10))
    assert got[(0.0, 10.0)] == first_window
    assert len(got) == 2


@pytest.mark.parametrize("make", [Count, Sum, Min, Max, Mean, First, Last, Collect])
def test_overlapping_windows_merge_panes_like_a_direct_fold(make):
    """Hopping windows are merged from panes; the result equals folding the window's values."""
    got = run(make(), Hopping(10, 5))
    for (start, end), value in got.items():
        inside = [r for t, r in VALUES if start <= t < end]
        direct = make()
        acc = direct.init()
        for r in inside:
            acc = direct.add(acc, r)
        expected = direct.result(acc)
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(value)
        else:
            assert value == pytest.approx(expected), (start, end)


def test_combined_reducers_give_a_dict():
    got = run(Combined({"n": Count(), "mean": Mean(), "top": Max()}), Tumbling(10))
    assert got[(0.0, 10.0)] == {"n": 3, "mean": pytest.approx(11.0 / 3), "top": 6.0}


class Spread:
    """A user reducer: max - min, with the four methods of the protocol."""

    def init(self):
        return (math.inf, -math.inf)

    def add(self, acc, value):
        return (min(acc[0], value), max(acc[1], value))

    def merge(self, a, b):
        return (min(a[0], b[0]), max(a[1], b[1]))

    def result(self, acc):
        return acc[1] - acc[0]


def test_a_user_reducer_through_tumbling_and_hopping_windows():
    assert run(Spread(), Tumbling(10))[(0.0, 10.0)] == 5.0
    hopping = run(Spread(), Hopping(10, 5))
    assert hopping[(5.0, 15.0)] == 5.0  # readings 1.0, 6.0, 3.0 (times 8, 5, 12)
    assert hopping[(-5.0, 5.0)] == 0.0  # the 2 s reading alone
