"""Snapshots of processors of several inputs: an interval join and a windowed merge
restored mid-stream give exactly what the uninterrupted processor gives."""

from __future__ import annotations

import random
from typing import Any

from streams.core.batch import Event
from streams.core.ids import SequenceToken, StreamId
from streams.core.record_batch import RecordEvent
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.eventtime.joins import IntervalJoin
from streams.eventtime.processor import Processor
from streams.eventtime.snapshot import can_snapshot

JOIN = EventTime(
    OrderingPolicy(timestamp_by="t", out_of_order=3, action="drop"),
    inputs=("clicks", "orders"),
    join=IntervalJoin(lower=-5, upper=30, how="left"),
)
MERGED_WINDOWS = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count(), inputs=("a", "b"))


def events(names: tuple[str, str], n: int, seed: int) -> list[tuple[str, Event]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        name = names[0] if rng.random() < 0.5 else names[1]
        t = i * 2 + rng.uniform(-4, 4)
        value: dict[str, Any] = {"t": t, "n": i, "nested": {"k": [i, "x"]}}
        sid = StreamId(name, "u1")
        if i % 3:
            event: Event = Event(value, t, t + 1, SequenceToken(i), sid)
        else:  # a foreign record's event: its headers and offsets come back too
            event = RecordEvent._at(value, t, t + 1, i, 0, sid)
            assert isinstance(event, RecordEvent)
            event.headers, event.offset, event._read_at = (("trace", b"\x00\x01"),), 1000 + i, i
        out.append((name, event))
    return out


def run(spec: EventTime, items: list[tuple[str, Event]], cut: int | None) -> list[Any]:
    """What the processor emits over ``items``; with ``cut``, snapshot after that many and go
    on in a new processor restored from it."""
    processor: Processor = spec.processor("u1")
    emitted: list[Any] = []
    for i, (name, event) in enumerate(items):
        if i == cut:
            assert can_snapshot(processor)
            again: Processor = spec.processor("u1")
            again.restore(processor.snapshot())
            processor = again
        out = processor.on_events([event], name)
        emitted += [_pair(j) for j in out.joins] + [(w.start, w.value) for w in out.windows]
        emitted += [(d.reason, d.value["n"]) for d in out.dead_letters]
    for name in spec.inputs:
        out = processor.on_completed(name)
        emitted += [_pair(j) for j in out.joins] + [(w.start, w.value) for w in out.windows]
    return emitted


def _pair(j: Any) -> tuple[Any, ...]:
    left, right = j.left.record, None if j.right is None else j.right.record
    shown = (left.value["n"], j.left.timestamp, None if right is None else right.value["n"])
    if isinstance(left, RecordEvent):
        shown += (left.headers, left.offset, left.position)
    return shown


def test_an_interval_join_restored_mid_stream_emits_what_an_uninterrupted_one_does() -> None:
    items = events(("clicks", "orders"), 300, seed=1)
    whole = run(JOIN, items, cut=None)
    assert len([p for p in whole if isinstance(p[0], int)]) > 100
    for cut in (1, 37, 150, 299):
        assert run(JOIN, items, cut=cut) == whole


def test_a_window_over_merged_inputs_restored_mid_stream_closes_the_same_windows() -> None:
    items = events(("a", "b"), 200, seed=2)
    whole = run(MERGED_WINDOWS, items, cut=None)
    assert whole and all(isinstance(w[1], int) for w in whole)
    for cut in (5, 99, 199):
        assert run(MERGED_WINDOWS, items, cut=cut) == whole
