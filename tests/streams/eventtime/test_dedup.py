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
from streams.eventtime import Collect, EventTime, OrderingPolicy, Processor, Tumbling
from streams.eventtime.dedup import Dedup
from streams.eventtime.replay import Row
from streams.eventtime.snapshot import is_empty, restore, snapshot
from tests.streams.eventtime.reference import Fates, Rec, Reference, draw_cuts, draw_policy, draw_rows, run_core


@st.composite
def samples(draw: Any) -> tuple[list[Row], OrderingPolicy, float, list[int]]:
    """Events with ids drawn from a few (so retries are common), ticks, and a policy."""
    rows = draw_rows(draw, "ab", ids=lambda draw, _: draw(st.integers(0, 5)))
    policy = draw_policy(draw, actions=("adjust", "drop", "accept"))
    return rows, policy, draw(st.sampled_from([1.0, 5.0, 15.0, 60.0])), draw_cuts(draw)


def run(
    rows: list[Row],
    policy: OrderingPolicy,
    within: float,
    cuts: list[int],
    *,
    window: Tumbling | None = None,
    restore_at: int = -1,
) -> tuple[Fates, list[tuple], Processor]:
    """The processor with ``Dedup(key="id", within=within)``: fates, windows as ``(start,
    indexes)``, and the processor."""

    def make() -> Processor:
        return Processor(policy, window, Collect(), select="index", trace=True, dedup=Dedup(key="id", within=within))

    fates, windows, p = run_core(make, rows, cuts, restore_at)
    return fates, [(w.start, tuple(w.value)) for w in windows], p


def run_reference(rows: list[Row], policy: OrderingPolicy, within: float) -> Fates:
    return Reference(policy, within).run(rows).fates


@settings(max_examples=400, deadline=None)
@given(samples())
def test_dedup_matches_the_brute_force_reference(sample):
    rows, policy, within, cuts = sample
    fates, _, p = run(rows, policy, within, cuts)
    assert fates == run_reference(rows, policy, within)
    duplicates = [i for i, f in fates.items() if f[1] == "duplicate"]
    assert p.counters.duplicate == len(duplicates)
    assert p.counters.events == len(fates)  # one fate each (run_core)


@settings(max_examples=150, deadline=None)
@given(samples())
def test_dedup_before_windows_each_kept_event_in_its_window(sample):
    """Windows see exactly the events dedup kept, each in the window of its timestamp."""
    rows, policy, within, cuts = sample
    fates, windows, _ = run(rows, policy, within, cuts, window=Tumbling(10))
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
    restored = run(rows, policy, within, cuts, restore_at=restore_at)
    assert restored[:2] == run(rows, policy, within, cuts)[:2]


def ev(t: float, ident: Any, index: int, arrival: float | None = None) -> Rec:
    return Rec(Row(index, t if arrival is None else arrival, t, "k", ident))


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
    a = [Rec(Row(0, 1, 1, "a", "x")), Rec(Row(1, 2, 20, "a", "z"))]  # substream a: W = 20
    b = [Rec(Row(2, 3, 2, "b", "x")), Rec(Row(3, 4, 3, "b", "x"))]  # substream b: W = 2
    out = p.on_events(a + b + [Rec(Row(4, 5, 21, "a", "x"))])
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
