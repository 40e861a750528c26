"""With substreams and a late-arrival tolerance L, every arrival at t moves every substream
of the partition to at least t - L (time-semantics step 5, seed 001: L is the most that
substreams may be apart)."""

from __future__ import annotations

from streams.eventtime import Count, OrderingPolicy, Processor, Tumbling
from streams.eventtime.replay import ReplayOptions, Row, replay, summarize
from tests.streams.eventtime.helpers import advances, events, feed


def test_a_quiet_keys_window_closes_when_another_keys_arrivals_pass_it():
    p = Processor(OrderingPolicy(over="key", late_arrival=5), Tumbling(10), Count())
    assert p.on_events(events([(1, 1, "a"), (2, 2, "b")])).windows == []
    out = p.on_events(events([(14, 14, "a")], start=2))  # a: 14; every substream >= 9
    assert [(w.key, w.start, w.value, w.closed_at) for w in out.windows] == [("a", 0.0, 1, 14.0)]
    out = p.on_events(events([(16, 16, "a")], start=3))  # every substream >= 11: b's [0, 10)
    assert [(w.key, w.start, w.value, w.closed_at) for w in out.windows] == [("b", 0.0, 1, 16.0)]
    assert p.metrics().substream_watermarks == {"a": 16.0, "b": 11.0}
    assert p.watermark == 11.0  # the partition's floor


def test_the_floor_is_the_watermark_before_an_event_of_a_quiet_key():
    p = Processor(OrderingPolicy(over="key", late_arrival=5, out_of_order=0), trace=True)
    trace = feed(p, events([(1, 1, "a"), (20, 20, "b"), (16, 20.5, "a")]))
    # a's watermark was 1 by its own events, 15 by b's arrival: 16 - 15 is in order, and so
    # is it not late (20.5 - 16 < 5)
    *_, last = [o for o in trace if hasattr(o, "status")]
    assert (last.status, last.timestamp) == ("kept", 16.0)
    trace = feed(p, events([(14, 21, "a")], start=3))  # 7 s late: to 16, and the floor is 16
    *_, last = [o for o in trace if hasattr(o, "status")]
    assert (last.status, last.reason, last.timestamp) == ("adjusted", "late_arrival", 16.0)
    assert [(a.substream, a.watermark) for a in advances(trace)] == [(None, 16.0)]


def test_windows_closed_by_the_floor_come_out_in_order_of_end():
    p = Processor(OrderingPolicy(over="key", late_arrival=0), Tumbling(10), Count())
    assert p.on_events(events([(5, 5, "b"), (15, 9, "c")])).windows == []  # every substream >= 9
    out = p.on_events(events([(31, 31, "a")], start=2))
    assert [(w.key, w.end) for w in out.windows] == [("b", 10.0), ("c", 20.0)]


def test_simulate_closes_quiet_keys_by_the_floor_and_counts_their_delay():
    rows = [Row(0, 1.0, 1.0, "a"), Row(1, 2.0, 2.0, "b"), Row(2, 16.0, 16.0, "a")]
    options = ReplayOptions(OrderingPolicy(over="key", late_arrival=5), Tumbling(10))
    trace = replay(rows, options)
    closed = [(w.key, w.closed_at) for w in trace if hasattr(w, "closed_at")]
    assert closed == [("a", 16.0), ("b", 16.0)]
    windowless = summarize(
        rows,
        replay(rows, ReplayOptions(OrderingPolicy(over="key", late_arrival=5))),
        ReplayOptions(OrderingPolicy(over="key", late_arrival=5)),
    )
    # b's event (t=2) is final at 16 (the floor 11 passed it): 14 s; a's at 16: 15 s
    assert windowless.mean_delay == (15.0 + 14.0) / 2
