"""A processor's state saved and restored mid-stream gives the windows of an uninterrupted run."""

from __future__ import annotations

import random
from types import SimpleNamespace as Ev

import pytest

from streams.core.ids import SequenceToken
from streams.eventtime import Collect, Count, Hopping, OrderingPolicy, Processor, Sum, Tumbling
from streams.eventtime.snapshot import SnapshotError, can_snapshot, is_empty


def events(n: int, seed: int = 7) -> list[Ev]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = i * 0.7 + rng.uniform(-3, 3)  # out of order within 3 s
        out.append(
            Ev(value={"k": rng.choice("abc"), "v": i}, event_time=t, arrival_time=i * 0.7, token=SequenceToken(i, 0))
        )
    return out


def run(make, evs, cuts=()):
    """Windows of ``evs``, the processor saved and restored into a new one at each cut."""
    p = make()
    windows, start = [], 0
    for cut in [*cuts, len(evs)]:
        windows += p.on_events(evs[start:cut]).windows
        start = cut
        if cut < len(evs):
            q = make()
            q.restore(p.snapshot())
            p = q
    windows += p.flush().windows
    return [(w.key, w.start, w.end, w.value, w.final) for w in windows]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Processor(OrderingPolicy(out_of_order=2), Tumbling(5), Count(), group_by="k"),
        lambda: Processor(OrderingPolicy(out_of_order=2), Tumbling(5), Collect(), group_by="k", select="v"),
        lambda: Processor(OrderingPolicy(out_of_order=2), Hopping(10, 5), Sum(), group_by="k", select="v"),
        lambda: Processor(OrderingPolicy(out_of_order=2, over="k"), Tumbling(5, idle_timeout=4), Count()),
    ],
    ids=["count", "collect", "hopping-sum", "substreams"],
)
def test_a_restored_processor_gives_the_windows_of_an_uninterrupted_run(make):
    evs = events(300)
    whole = run(make, evs)
    assert len(whole) > 100
    assert run(make, evs, cuts=[1, 50, 51, 137, 299]) == whole


def test_a_restored_processor_keeps_its_watermark_and_counters():
    make = lambda: Processor(OrderingPolicy(out_of_order=1), Tumbling(5), Count(), group_by="k")  # noqa: E731
    p = make()
    p.on_events(events(40))
    q = make()
    q.restore(p.snapshot())
    assert q.watermark == p.watermark
    assert q.counters == p.counters
    assert q.held_since() == p.held_since()
    late = Ev(value={"k": "a"}, event_time=p.watermark - 10, arrival_time=40.0, token=SequenceToken(99, 0))
    assert [d.reason for d in q.on_events([late]).dead_letters] == [d.reason for d in p.on_events([late]).dead_letters]


def test_a_count_pane_is_a_number_and_a_collect_pane_its_values():
    count = Processor(OrderingPolicy(), Tumbling(3600), Count())
    collect = Processor(OrderingPolicy(), Tumbling(3600), Collect(), select="v")
    evs = [
        Ev(value={"v": "x" * 100}, event_time=float(i), arrival_time=float(i), token=SequenceToken(i, 0))
        for i in range(1000)
    ]
    count.on_events(evs)
    collect.on_events(evs)
    assert len(count.snapshot()) < 300  # one number, whatever the events
    assert len(collect.snapshot()) > 100_000


def test_an_empty_processor_is_empty_and_an_unencodable_accumulator_says_so():
    p = Processor(OrderingPolicy(), Tumbling(5), Collect(), select="v")
    assert is_empty(p)
    p.on_events([Ev(value={"v": object()}, event_time=1.0, arrival_time=1.0, token=SequenceToken(0, 0))])
    assert not is_empty(p)
    with pytest.raises(SnapshotError, match="cannot be serialized"):
        p.snapshot()


def test_several_merged_inputs_without_a_window_are_snapshotted_with_their_watermarks():
    # With a window (or a join): tests/streams/eventtime/test_snapshot_inputs.py.
    p = Processor(OrderingPolicy(timestamp_by="t"), inputs=["a", "b"])
    p.on_events([Ev(value={"t": 5.0}, event_time=5.0, arrival_time=5.0, token=None)], "a")
    p.on_events([Ev(value={"t": 3.0}, event_time=3.0, arrival_time=3.0, token=None)], "b")
    assert can_snapshot(p) and p.watermark == 3.0
    q = Processor(OrderingPolicy(timestamp_by="t"), inputs=["a", "b"])
    q.restore(p.snapshot())
    assert q.watermark == 3.0 and q.merged is not None and q.merged.values() == {"a": 5_000_000, "b": 3_000_000}  # µs
