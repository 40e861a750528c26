"""The core's in-order runs (``Ingest._in_order``) against its per-event path.

A batch the runtime keeps as columns (``EventBatch.columns()``) is counted a run at a time
when the shape allows; the same events given as event objects go the per-event way. Over
random batches (disorder, events before the watermark, new panes, bad and missing times,
values that are not mappings) both must give the same windows, letters, counters,
watermarks and checkpoint holds after every call: the contract's result, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.batch import BatchContainer, BatchKind
from streams.core.ids import StreamId
from streams.core.record_batch import RecordBatch
from streams.eventtime import Count, Hopping, OrderingPolicy, Processor, Tumbling
from streams.eventtime.declaration import Declaration
from streams.eventtime.parts import ProcessorParts

SID = StreamId("sensors", "s-1")


def in_runs(*args: Any, **kwargs: Any) -> bool:
    """Whether processors of this declaration take a batch of columns as runs (the per-event
    way of its parts, which its first processor makes)."""
    parts = ProcessorParts(Declaration(*args, **kwargs))
    Processor.of(parts)
    return bool(parts.ingest.in_runs)


@st.composite
def samples(draw: Any) -> dict[str, Any]:
    """Batches of (value, event time) with an arrival each, and the consumer's settings."""
    by_field = draw(st.booleans())
    batches, arrival, seq = [], 1_000.0, 0
    for _ in range(draw(st.integers(1, 8))):
        arrival += draw(st.sampled_from([0.0, 0.5, 3.0]))
        events = []
        for _ in range(draw(st.integers(1, 25))):
            t = arrival + draw(st.sampled_from([-40, -12, -3, -1, 0, 0, 0, 1, 2, 5]))
            odd = draw(st.integers(0, 30))
            value: Any = {"ts": int(t * 1000), "n": len(events)}
            if odd == 0:
                value = {"n": 1}  # no time field
            elif odd == 1:
                value = {"ts": "soon"}  # not a time
            elif odd == 2:
                value = [t]  # not a mapping
            elif odd == 3:
                t = -1e300  # outside years 1-9999
            events.append((value, t))
        batches.append((arrival, seq, events))
        seq += 1
    window = draw(st.sampled_from([Tumbling(10), Tumbling(1), Hopping(10, 5)]))
    window = replace(window, allowed_lateness=draw(st.sampled_from([0.0, 4.0])))
    policy = OrderingPolicy(
        out_of_order=draw(st.sampled_from([0.0, 2.0, 10.0])),
        action=draw(st.sampled_from(["adjust", "drop", "accept"])),
        timestamp_by="ts" if by_field else None,
        unit="ms",
    )
    # A record's timestamp is its producer's: a partition's may go back (arrivals not in order).
    growing = draw(st.booleans())
    return {"batches": batches, "window": window, "policy": policy, "records": draw(st.booleans()), "growing": growing}


def columns_of(sample: dict[str, Any]) -> list[Any]:
    """The batches as the runtime keeps them: batch containers, or records' batches whose
    events each carry their record's timestamp as arrival and event time."""
    made = []
    for arrival, seq, events in sample["batches"]:
        values = [v for v, _ in events]
        times = [t for _, t in events]
        if sample["records"]:
            stamps = [max(arrival, t) if t > 0 else arrival for t in times]
            if sample["growing"]:
                stamps = [max(stamps[: i + 1]) for i in range(len(stamps))]
            made.append(RecordBatch(SID, values, stamps, [()] * len(values), list(range(len(values)))).events(seq))
        else:
            made.append(BatchContainer(SID, BatchKind.DATA, arrival, values, times).events(seq))
    return made


def observed(p: Processor, out: Any) -> tuple[Any, ...]:
    return (
        out.windows,
        out.dead_letters,
        out.watermark,
        p.counters.as_dict(),
        p.held_since(),
        p.open_windows(),
        p.clock,
    )


@settings(max_examples=300, deadline=None)
@given(samples())
def test_runs_of_columns_give_what_events_one_by_one_give(sample):
    runs = Processor(sample["policy"], sample["window"], Count())
    each = Processor(sample["policy"], sample["window"], Count())
    assert in_runs(sample["policy"], sample["window"], Count())  # the shape is one the runs take
    for batch in columns_of(sample):
        events = list(batch)  # event objects: the per-event way
        assert observed(runs, runs.on_events(batch)) == observed(each, each.on_events(events))
    assert observed(runs, runs.flush()) == observed(each, each.flush())


def test_a_run_counts_its_events_once_and_closes_on_time():
    """In order, the runs take every event; a late one goes the per-event way in between."""
    p = Processor(OrderingPolicy(out_of_order=2, timestamp_by="ts", unit="ms"), Tumbling(10), Count())
    values = [{"ts": t * 1000} for t in [1, 2, 3, 11, 12, 4, 13, 25]]  # 4 is late (adjusted), 25 closes [10, 20)
    out = p.on_events(BatchContainer(SID, BatchKind.DATA, 30.0, values).events(0))
    assert [(w.start, w.value) for w in out.windows] == [(0.0, 3), (10.0, 4)]  # 4 moved to 11 (adjust)
    assert p.counters.events == 8 and out.dead_letters == []
    assert p.counters.as_dict()["adjusted"] == 1


def test_shapes_the_runs_do_not_take_go_the_per_event_way():
    assert in_runs(OrderingPolicy(), Tumbling(10), Count())
    assert not in_runs(OrderingPolicy(), Tumbling(10), Count(), group_by="k")
    assert not in_runs(OrderingPolicy(late_arrival=5), Tumbling(10), Count())
    assert not in_runs(OrderingPolicy(), Hopping(5, 10), Count())  # gaps between windows
    assert not in_runs(OrderingPolicy(timestamp_by=lambda e: e.value["t"]), Tumbling(10), Count())


@settings(max_examples=100, deadline=None)
@given(samples(), st.sampled_from([1, 3, 7]))
def test_runs_sample_lateness_and_disorder_as_events_one_by_one_do(sample, every):
    # The lateness sketch sees the same events whichever way the core takes a batch
    # (those with a time; a refused time is sampled by neither).
    from streams.eventtime.lateness import LatenessSketch

    runs = Processor(sample["policy"], sample["window"], Count())
    each = Processor(sample["policy"], sample["window"], Count())
    by_runs, by_events = LatenessSketch(every=every), LatenessSketch(every=every)
    runs.sample_times(by_runs)
    each.sample_times(by_events)
    for batch in columns_of(sample):
        runs.on_events(batch)
        each.on_events(list(batch))
    a, b = by_runs.observed(1_100.0), by_events.observed(1_100.0)  # the hour up to the last arrival
    assert a.samples == b.samples
    for kind in ("lateness", "disorder"):
        assert a.quantiles(kind) == b.quantiles(kind)


def test_a_run_is_sampled_one_event_in_every():
    from streams.eventtime.lateness import LatenessSketch

    p = Processor(OrderingPolicy(out_of_order=2, timestamp_by="ts", unit="ms"), Tumbling(10), Count())
    sketch = LatenessSketch(every=4)
    p.sample_times(sketch)
    batch = BatchContainer(SID, BatchKind.DATA, 30.0, [{"ts": t * 1000} for t in range(1, 21)]).events(0)
    policy = OrderingPolicy(out_of_order=2, timestamp_by="ts", unit="ms")
    assert in_runs(policy, Tumbling(10), Count()) and hasattr(batch, "columns")  # taken as a run
    p.on_events(batch)
    seen = sketch.observed(30.0)
    assert seen.samples == 5  # events 4, 8, 12, 16 and 20 of 20
    assert round(seen.quantile("lateness", 1.0)) in (25, 26)  # event 4 arrived at 30 (2 % buckets)
