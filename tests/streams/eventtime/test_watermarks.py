"""Watermarks: per partition and substream, punctuation, ticks, merged inputs, metrics."""

from __future__ import annotations

import logging

from streams.eventtime import MergedWatermark, OrderingPolicy, Processor, Tumbling, Watermark, WatermarkGeneration
from tests.streams.eventtime.helpers import advances, events, feed


def test_watermark_generation_counts_events_and_never_goes_back():
    w = Watermark("p", WatermarkGeneration.every(events=3), delay=2.0)
    candidates = [w.observe(t) for t in (10.0, 30.0, 20.0, 25.0, 26.0, 27.0)]
    assert candidates == [float("-inf")] * 2 + [28.0] + [float("-inf")] * 2 + [28.0]
    assert w.raise_to(28.0) and not w.raise_to(5.0) and w.value == 28.0


def test_merged_watermark_is_the_minimum_and_names_its_holder(caplog):
    p = Processor(OrderingPolicy(), Tumbling(10), inputs=["p0", "p1"])
    with caplog.at_level(logging.DEBUG, logger="streams.eventtime.watermark"):
        p.on_events(events([(5, 5)]), "p1")
        p.on_events(events([(25, 25)]), "p0")
        assert p.watermark == 5.0
        assert p.on_events(events([(7, 7)]), "p1").windows == []
    m = p.metrics()
    assert (m.holder, m.watermarks) == ("p1", {"p0": 25.0, "p1": 7.0})
    assert m.delay == 25.0 - 7.0
    # one line per episode: p0 had said nothing when p1 moved on
    assert [r.getMessage() for r in caplog.records] == [
        "merged watermark held at -inf by input 'p0' (input 'p1' is at 5.0)",
    ]
    out = p.on_events(events([(30, 30)]), "p1")
    assert [(w.start, w.value) for w in out.windows] == [(0.0, 2)]
    assert p.metrics().holder == "p0" and p.watermark == 25.0


def test_a_silent_partition_holds_the_merge_back_without_late_arrival_or_idle():
    p = Processor(OrderingPolicy(), Tumbling(10), inputs=["busy", "silent"])
    out = p.on_events(events([(t, t) for t in range(0, 100, 5)]), "busy")
    assert out.windows == [] and p.metrics().holder == "silent"
    assert p.on_tick(500.0).windows == []  # no late-arrival tolerance: ticks change nothing


def test_late_arrival_ticks_release_a_silent_partition():
    p = Processor(OrderingPolicy(late_arrival=5), Tumbling(10), inputs=["busy", "silent"])
    p.on_events(events([(t, t) for t in range(0, 30, 5)]), "busy")
    out = p.on_tick(30.0)  # every input's watermark to at least 30 - 5
    assert [(w.start, w.end, w.value) for w in out.windows] == [(0.0, 10.0, 2), (10.0, 20.0, 2)]
    assert p.metrics().watermarks == {"busy": 25.0, "silent": 25.0}


def test_the_idle_timeout_releases_a_silent_partition():
    p = Processor(OrderingPolicy(), Tumbling(10, idle_timeout=3), inputs=["busy", "silent"])
    p.on_events(events([(1, 1), (12, 12)]), "busy")
    assert p.on_tick(12.9, "silent").windows == []
    out = p.on_tick(13.0, "silent")  # the silent input: due at end 10 + 3
    assert [(w.start, w.value) for w in out.windows] == [(0.0, 1)]
    assert p.metrics().watermarks["silent"] == 10.0


def test_completion_of_one_input_leaves_the_minimum_to_the_others():
    p = Processor(OrderingPolicy(), Tumbling(10), inputs=["a", "b"])
    p.on_events(events([(1, 1), (15, 15)]), "a")
    out = p.on_completed("b", arrival_time=16.0)
    assert [(w.start, w.closed_at, w.final) for w in out.windows] == [(0.0, 16.0, True)]
    assert p.watermark == 15.0


def test_punctuation_raises_every_substream_and_new_ones_start_there():
    p = Processor(OrderingPolicy(over="key"), Tumbling(10), trace=True)
    p.on_events(events([(1, 1, "a"), (2, 2, "b")]))
    out = p.advance_time(10.0, arrival_time=3.0)
    assert sorted((w.key, w.value) for w in out.windows) == [("a", 1), ("b", 1)]
    assert p.metrics().substream_watermarks == {"a": 10.0, "b": 10.0}
    trace = feed(p, events([(4, 4, "c")], start=2))
    assert [(o.status, o.timestamp) for o in trace if hasattr(o, "status")] == [("adjusted", 10.0)]


def test_substream_windows_close_by_their_own_watermark():
    p = Processor(OrderingPolicy(over="key"), Tumbling(10))
    out = p.on_events(events([(1, 1, "a"), (2, 2, "b"), (11, 3, "a")]))
    assert [(w.key, w.start) for w in out.windows] == [("a", 0.0)]  # b's window stays open
    assert p.watermark == float("-inf")  # the partition's floor: nothing moved every substream


def test_late_arrival_moves_the_floor_of_every_substream_at_each_arrival():
    p = Processor(OrderingPolicy(over="key", late_arrival=60), trace=True)
    trace = feed(p, events([(100, 100, "a"), (100, 200, "b")]))
    assert [(a.substream, a.watermark) for a in advances(trace)] == [
        (None, 40.0),
        ("a", 100.0),
        (None, 140.0),
        ("b", 140.0),
    ]
    assert p.metrics().substream_watermarks == {"a": 140.0, "b": 140.0}
    tick = p.on_tick(300.0).trace
    # the partition's floor, then every substream
    assert {a.substream: a.watermark for a in advances(tick)} == {None: 240.0, "a": 240.0, "b": 240.0}


def test_merged_watermark_holder_is_the_first_declared_among_equals():
    m = MergedWatermark(["x", "y", "z"])
    assert m.holder == "x"
    assert not m.update("y", 3.0) and m.update("x", 3.0) is False and m.holder == "z"
    assert m.update("z", 4.0) and (m.value, m.holder) == (3.0, "x")
