"""Windows: assignment, closing, allowed lateness, idle timeout, flush, held tokens."""

from __future__ import annotations

import pytest

from streams.core.ids import SequenceToken
from streams.eventtime import Collect, Hopping, OrderingPolicy, Processor, Tumbling
from tests.streams.eventtime.helpers import events, feed, outcomes, windows

N = lambda e: e.value["n"]  # noqa: E731  the event's number, to see which events a window got


def test_tumbling_per_key_closes_in_order_of_end_then_first_seen_key():
    p = Processor(OrderingPolicy(), Tumbling(10), group_by="key")
    out = p.on_events(events([(1, 1, "b"), (2, 2, "a"), (11, 11, "a"), (25, 25, "b")]))
    assert [(w.key, w.start, w.end, w.value, w.closed_at) for w in out.windows] == [
        ("b", 0.0, 10.0, 1, 11.0),
        ("a", 0.0, 10.0, 1, 11.0),
        ("a", 10.0, 20.0, 1, 25.0),
    ]


def test_hopping_overlapping_every_event_in_size_over_hop_windows():
    p = Processor(OrderingPolicy(), Hopping(20, 5), Collect(), select=N)
    out = p.on_events(events([(t, t) for t in (1, 7, 13, 19, 22)]))
    closed = {(w.start, w.end): w.value for w in out.windows + p.flush().windows}
    assert closed == {
        (-15.0, 5.0): [0],
        (-10.0, 10.0): [0, 1],
        (-5.0, 15.0): [0, 1, 2],
        (0.0, 20.0): [0, 1, 2, 3],
        (5.0, 25.0): [1, 2, 3, 4],
        (10.0, 30.0): [2, 3, 4],
        (15.0, 35.0): [3, 4],
        (20.0, 40.0): [4],
    }


def test_hopping_with_a_hop_that_does_not_divide_the_size():
    # size 3, hop 2: panes of 1 s; windows [0,3) [2,5) [4,7) …
    p = Processor(OrderingPolicy(), Hopping(3, 2), Collect(), select=N)
    out = p.on_events(events([(t, t) for t in (0.5, 2.5, 3.5, 4.5)]))
    closed = {(w.start, w.end): w.value for w in out.windows + p.flush().windows}
    assert closed == {(-2.0, 1.0): [0], (0.0, 3.0): [0, 1], (2.0, 5.0): [1, 2, 3], (4.0, 7.0): [3]}


def test_hopping_with_gaps_leaves_events_in_no_window():
    # size 3, hop 5: windows [0,3) [5,8); 4 s falls in the gap
    p = Processor(OrderingPolicy(), Hopping(3, 5), Collect(), select=N, trace=True)
    trace = feed(p, events([(1, 1), (4, 4), (6, 6)])) + p.flush().trace
    assert [(w.start, w.end, w.value) for w in windows(trace)] == [(0.0, 3.0, [0]), (5.0, 8.0, [2])]
    assert [o.status for o in outcomes(trace)] == ["kept", "kept", "kept"]


def test_a_late_record_never_reopens_a_closed_window():
    """A peer library re-creates a window an older record falls into after it was emitted,
    and never emits it again. Here the record is dead-lettered and the window stays closed."""
    p = Processor(OrderingPolicy(action="accept"), Tumbling(10), Collect(), select=N, trace=True)
    trace = feed(p, events([(1, 1), (12, 12), (3, 13)]))
    trace += p.flush().trace
    assert [(w.start, w.value) for w in windows(trace)] == [(0.0, [0]), (10.0, [1])]
    [late] = [o for o in outcomes(trace) if o.status == "dead_letter"]
    assert (late.reason, late.timestamp, N(late.record)) == ("window_closed", 3.0, 2)
    assert p.counters.window_closed == 1


def test_allowed_lateness_keeps_the_window_open_then_dead_letters():
    p = Processor(OrderingPolicy(action="accept"), Tumbling(10, allowed_lateness=5), Collect(), select=N)
    out = p.on_events(events([(1, 1), (12, 12), (3, 13), (16, 16), (4, 17)]))
    assert [(w.start, w.value, w.closed_at) for w in out.windows] == [(0.0, [0, 2], 16.0)]
    assert [(d.reason, d.event_time) for d in out.dead_letters] == [("window_closed", 4.0)]


def test_with_hopping_a_late_record_joins_only_the_windows_still_open():
    p = Processor(OrderingPolicy(action="accept"), Hopping(10, 5), Collect(), select=N)
    p.on_events(events([(1, 1), (11, 11)]))  # W = 11 closes [-5,5) and [0,10)
    out = p.on_events(events([(6, 12)], start=2))  # in [0,10) (closed) and [5,15) (open)
    assert out.dead_letters == []
    closed = {(w.start, w.end): w.value for w in p.flush().windows}
    assert closed == {(5.0, 15.0): [1, 2], (10.0, 20.0): [1]}


def test_idle_timeout_closes_after_the_window_end_and_the_last_event():
    p = Processor(OrderingPolicy(), Tumbling(10, idle_timeout=5), Collect(), select=N)
    p.on_events(events([(1, 1), (2, 12)]))
    assert p.on_tick(16.9).windows == []  # due at max(10, 12) + 5 = 17
    out = p.on_tick(17.0)
    assert [(w.start, w.value, w.closed_at) for w in out.windows] == [(0.0, [0, 1], 17.0)]
    assert (out.watermark, p.counters.idle_timeouts) == (10.0, 1)


def test_an_event_fires_the_timeouts_that_fell_due_before_it():
    p = Processor(OrderingPolicy(action="accept"), Tumbling(10, idle_timeout=5), Collect(), select=N)
    p.on_events(events([(1, 1)]))
    out = p.on_events(events([(2, 15.5)], start=1))  # due at 15: fired before this event
    assert [(w.value, w.closed_at) for w in out.windows] == [([0], 15.5)]
    assert [(d.reason, d.event_time) for d in out.dead_letters] == [("window_closed", 2.0)]


def test_flush_closes_everything_as_final():
    p = Processor(OrderingPolicy(), Tumbling(10), group_by="key")
    p.on_events(events([(1, 1, "a"), (8, 8, "b"), (12, 12, "a")]))
    out = p.flush()
    assert [(w.key, w.start, w.closed_at, w.final) for w in out.windows] == [
        ("a", 10.0, None, True),
    ]
    assert p.open_windows() == [] and p.held_since() is None


def test_completion_closes_with_the_arrival_time():
    p = Processor(OrderingPolicy(), Tumbling(10))
    p.on_events(events([(1, 1)]))
    [w] = p.on_completed(0, arrival_time=3.0).windows
    assert (w.closed_at, w.final) == (3.0, True)


def test_held_since_is_the_oldest_token_in_an_open_window():
    p = Processor(OrderingPolicy(), Tumbling(10), group_by="key")
    p.on_events(events([(1, 1, "a"), (5, 5, "b"), (12, 12, "a"), (13, 13, "b")]))
    assert p.held_since() == SequenceToken(0, 2)  # [0,10) closed; [10,20) holds 0:2 and 0:3
    p.on_events(events([(25, 25, "a")], start=4))
    assert p.held_since() == SequenceToken(0, 4)


def test_held_since_per_merged_input():
    p = Processor(OrderingPolicy(), Tumbling(10), inputs=["p0", "p1"])
    p.on_events(events([(1, 1)], start=7), "p0")
    p.on_events(events([(2, 2)], start=3), "p1")
    assert (p.held_since("p0"), p.held_since("p1")) == (SequenceToken(0, 7), SequenceToken(0, 3))


@pytest.mark.parametrize("spec", [Tumbling(60), Hopping(60, 20), Hopping(20, 60)])
def test_trace_does_not_change_results(spec):
    rows = [(t % 97 + t // 3, t, f"k{t % 3}") for t in range(0, 400, 7)]
    policy = OrderingPolicy(out_of_order=10, action="accept")
    plain = Processor(policy, spec, Collect(), group_by="key", select=N)
    traced = Processor(policy, spec, Collect(), group_by="key", select=N, trace=True)
    a = plain.on_events(events(rows)).windows + plain.flush().windows
    b = traced.on_events(events(rows)).windows + traced.flush().windows
    assert a == b and len(a) > 3
