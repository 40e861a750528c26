"""Windows of a count of events (``Tumbling(events=N)``, ``Hopping(events=N, every=M)``)
against a brute-force reference (docs/event-time.md, "Windows of events"): random samples
with disorder, ticks, every action, per key or global, substreams, dedup, a snapshot
restored anywhere; and the declarations refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigurationError
from streams.eventtime import Collect, EventTime, Hopping, OrderingPolicy, Processor, Tumbling
from streams.eventtime.dedup import Dedup
from streams.eventtime.replay import Row
from tests.streams.eventtime.reference import Rec, Reference, draw_cuts, draw_policy, draw_rows, run_core


@st.composite
def samples(draw: Any) -> tuple[list[Row], OrderingPolicy, Tumbling | Hopping, bool, float | None, list[int]]:
    rows = draw_rows(draw, "ab", ids=lambda draw, _: draw(st.integers(0, 8)))
    policy = draw_policy(draw, out_of_order=(0.0, 2.0, 20.0), actions=("adjust", "drop", "accept"))
    size = draw(st.integers(1, 5))
    spec: Tumbling | Hopping = (
        Tumbling(events=size) if draw(st.booleans()) else Hopping(events=size, every=draw(st.integers(1, 6)))
    )
    within = draw(st.sampled_from([None, None, 5.0]))
    return rows, policy, spec, draw(st.booleans()), within, draw_cuts(draw)


def reference_windows(
    rows: list[Row], policy: OrderingPolicy, spec: Tumbling | Hopping, per_key: bool, within: float | None
) -> tuple[dict, list[tuple], list[tuple]]:
    """The reference's fates; complete windows in the order they complete; partial ones
    (emitted by the flush) in any order. A window: (key, start, end, indexes, closed_at)."""
    ref = Reference(policy, within).run(rows)
    n, m = spec.events, spec.every
    assert n is not None and m is not None
    by_key: dict[Any, list[tuple[Row, float]]] = {}
    for row, ts in ref.accepted:
        by_key.setdefault(row.key if per_key or policy.over else None, []).append((row, ts))
    complete, partial = [], []
    for key, seq in by_key.items():
        for first in range(0, len(seq), m):
            members = seq[first : first + n]
            times = [ts for _, ts in members]
            window = (key, min(times), max(times), tuple(r.index for r, _ in members))
            if len(members) == n:
                complete.append((*window, members[-1][0].arrival_time, members[-1][0].index))
            else:
                partial.append((*window, None))
    complete.sort(key=lambda w: w[5])  # in arrival order of the event completing each
    return ref.fates, [w[:5] for w in complete], partial


def run(
    rows: list[Row],
    policy: OrderingPolicy,
    spec: Tumbling | Hopping,
    per_key: bool,
    within: float | None,
    cuts: list[int],
    restore_at: int = -1,
) -> tuple[dict, list[tuple], list[tuple]]:
    def make() -> Processor:
        return Processor(
            policy,
            spec,
            Collect(),
            select="index",
            group_by=policy.over or ("key" if per_key else None),
            trace=True,
            dedup=None if within is None else Dedup(key="id", within=within),
        )

    fates, results, p = run_core(make, rows, cuts, restore_at)
    windows = [(w.key, w.start, w.end, tuple(w.value), w.closed_at) for w in results]
    assert all(not w.final for w in results if w.closed_at is not None)
    assert p.open_windows() == [] and p.held_since() is None  # the flush emitted every one
    complete = [w for w in windows if w[4] is not None]
    return fates, complete, windows[len(complete) :]


@settings(max_examples=400, deadline=None)
@given(samples())
def test_counted_windows_match_the_brute_force_reference(sample):
    rows, policy, spec, per_key, within, cuts = sample
    fates, complete, partial = run(rows, policy, spec, per_key, within, cuts)
    ref_fates, ref_complete, ref_partial = reference_windows(rows, policy, spec, per_key, within)
    assert fates == ref_fates  # no window_closed: a window of events refuses nothing
    assert complete == ref_complete
    assert sorted(partial, key=repr) == sorted(ref_partial, key=repr)
    # Each accepted event is in the windows its position gives, no other event is.
    members = [i for w in complete + partial for i in w[3]]
    accepted = {i for i, f in fates.items() if f[0] in ("kept", "adjusted")}
    assert set(members) <= accepted
    if spec.every == spec.events:  # tumbling: each accepted event in exactly one window
        assert sorted(members) == sorted(accepted)


@settings(max_examples=150, deadline=None)
@given(samples(), st.integers(0, 12))
def test_a_snapshot_restored_mid_count_changes_nothing(sample, restore_at):
    rows, policy, spec, per_key, within, cuts = sample
    assert run(rows, policy, spec, per_key, within, cuts, restore_at) == run(rows, policy, spec, per_key, within, cuts)


def ev(t: float, index: int, key: str = "k") -> Rec:
    return Rec(Row(index, t, t, key, index))


def test_a_window_of_events_closes_at_its_last_event_whatever_the_watermark():
    p = Processor(OrderingPolicy(out_of_order=1000), Tumbling(events=2), Collect(), select="index")
    out = p.on_events([ev(5, 0), ev(1, 1), ev(9, 2)])  # W stays -inf
    assert [(w.start, w.end, w.value, w.closed_at, w.final) for w in out.windows] == [(1.0, 5.0, [0, 1], 1.0, False)]
    assert p.held_since() == 2  # the open window's first event holds the checkpoint
    (partial,) = p.on_completed(0).windows
    assert (partial.start, partial.end, partial.value, partial.final) == (9.0, 9.0, [2], True)


def test_hopping_by_events_with_gaps_leaves_events_in_no_window():
    p = Processor(OrderingPolicy(), Hopping(events=2, every=3), Collect(), select="index")
    out = p.on_events([ev(float(i), i) for i in range(7)])  # 2 and 5: in no window
    assert [w.value for w in out.windows] == [[0, 1], [3, 4]]
    assert [(w.value, w.final) for w in p.flush().windows] == [([6], True)]  # partial: by the flush
    assert p.counters.windows_emitted == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tumbling(events=0), "events must be a whole number of events > 0"),
        (lambda: Hopping(events=3, every=1.5), "every must be a whole number of events > 0"),
        (lambda: Hopping(events=3), "every must be a whole number of events > 0"),
        (lambda: Tumbling(60, events=3), "of seconds .size, hop. or of events"),
        (lambda: Tumbling(events=3, allowed_lateness=5), "allowed_lateness and idle_timeout apply to windows of time"),
        (lambda: Tumbling(events=3, idle_timeout=5), "allowed_lateness and idle_timeout apply to windows of time"),
        (lambda: Tumbling(), "size must be a number of seconds > 0"),
        (
            lambda: EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(events=3), inputs=("a", "b")),
            "a window of events counts one input's events",
        ),
    ],
)
def test_declarations_that_mean_nothing_are_refused(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()
