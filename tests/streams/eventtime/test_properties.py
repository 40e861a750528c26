"""Properties over random observation sequences and settings (hypothesis)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.eventtime import (
    Collect,
    EventOutcome,
    Hopping,
    OrderingPolicy,
    Processor,
    Tumbling,
    WatermarkAdvance,
    WindowResult,
)
from streams.eventtime.replay import Row

SPECS = [None, Tumbling(10), Hopping(10, 5), Hopping(5, 8)]


@st.composite
def samples(draw: Any) -> tuple[list[Row], dict[str, Any]]:
    n = draw(st.integers(1, 40))
    rows, arrival = [], 0.0
    for i in range(n):
        arrival += draw(st.sampled_from([0.0, 1.0, 2.0, 5.0]))
        if draw(st.integers(0, 6)) == 0:
            rows.append(Row(i, arrival, None))  # a tick
        else:
            skew = draw(st.integers(-30, 30))
            rows.append(Row(i, arrival, arrival + skew, draw(st.sampled_from("abc"))))
    spec = draw(st.sampled_from(SPECS))
    if spec is not None:
        spec = replace(
            spec,
            allowed_lateness=draw(st.sampled_from([0.0, 5.0])),
            idle_timeout=draw(st.sampled_from([None, 7.0])),
        )
    config = {
        "policy": OrderingPolicy(
            out_of_order=draw(st.sampled_from([0.0, 5.0, 20.0])),
            late_arrival=draw(st.sampled_from([None, 10.0])),
            early_arrival=draw(st.sampled_from([None, 10.0])),
            action=draw(st.sampled_from(["adjust", "drop", "accept"])),
            over=draw(st.sampled_from([None, "key"])),
        ),
        "window": spec,
        "group_by": draw(st.sampled_from([None, "key"])),
    }
    cuts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=10))
    return rows, config | {"cuts": cuts}


def processor(config: dict[str, Any]) -> Processor:
    policy = config["policy"]
    group_by = policy.over or config["group_by"]
    return Processor(policy, config["window"], Collect(), select="index", group_by=group_by, trace=True)


class _Rec:
    """A record whose value carries the key and index, like a runtime event's payload."""

    __slots__ = ("value", "event_time", "arrival_time", "token")

    def __init__(self, row: Row) -> None:
        self.value = {"key": row.key, "index": row.index}
        self.event_time, self.arrival_time, self.token = row.event_time, row.arrival_time, row.index


def drive(config: dict[str, Any], rows: list[Row], cuts: list[int] | None = None) -> tuple[list[tuple], list[float]]:
    """Feed ``rows`` (events in batches of the ``cuts`` sizes, cycling) then flush; the
    canonical trace and the processor's watermark after each call."""
    p = processor(config)
    trace: list[Any] = []
    marks: list[float] = []
    sizes = iter(cuts * len(rows)) if cuts else iter([1] * len(rows))
    i = 0
    while i < len(rows):
        if rows[i].event_time is None:
            out = p.on_tick(rows[i].arrival_time)
            i += 1
        else:
            j, size = i, next(sizes)
            while j < len(rows) and j - i < size and rows[j].event_time is not None:
                j += 1
            out = p.on_events([_Rec(r) for r in rows[i:j]])
            i = j
        trace += out.trace
        marks.append(out.watermark)
    trace += p.flush().trace
    return [_canonical(item) for item in trace], marks


def _canonical(item: Any) -> tuple:
    if isinstance(item, EventOutcome):
        return ("event", item.record.value["index"], item.key, item.timestamp, item.status, item.reason)
    if isinstance(item, WindowResult):
        return ("window", item.key, item.start, item.end, tuple(item.value), item.closed_at, item.final)
    assert isinstance(item, WatermarkAdvance)
    return ("watermark", item.arrival_time, item.partition, item.substream, item.watermark)


@settings(max_examples=150, deadline=None)
@given(samples())
def test_watermarks_never_go_backwards(sample):
    rows, config = sample
    trace, marks = drive(config, rows, config["cuts"])
    assert marks == sorted(marks)
    last: dict[tuple, float] = {}
    for kind, *rest in trace:
        if kind == "watermark":
            _, partition, substream, value = rest
            lane = (partition, substream)
            assert value > last.get(lane, float("-inf"))
            last[lane] = value


@settings(max_examples=150, deadline=None)
@given(samples())
def test_every_event_ends_in_exactly_one_fate(sample):
    rows, config = sample
    trace, _ = drive(config, rows, config["cuts"])
    fates = {}
    for kind, *rest in trace:
        if kind == "event":
            index, _, timestamp, status, reason = rest
            assert index not in fates  # exactly one outcome
            fates[index] = (status, reason, timestamp)
    assert set(fates) == {r.index for r in rows if r.event_time is not None}
    in_windows = Counter(i for kind, *rest in trace if kind == "window" for i in rest[3])
    spec = config["window"]
    emitted = [(rest[0], rest[1]) for kind, *rest in trace if kind == "window"]
    assert len(emitted) == len(set(emitted))  # no window is emitted twice
    for index, (status, reason, timestamp) in fates.items():
        if status in ("dropped", "dead_letter"):
            assert reason is not None and in_windows[index] == 0
        elif spec is not None and not (spec.hop > spec.size and (timestamp % spec.hop) >= spec.size):
            # kept or adjusted, in no gap: in a window; exactly one when windows tile time
            assert in_windows[index] >= 1
            if spec.hop == spec.size:
                assert in_windows[index] == 1
        else:
            assert in_windows[index] == 0


@settings(max_examples=100, deadline=None)
@given(samples())
def test_same_input_same_output(sample):
    rows, config = sample
    assert drive(config, rows, config["cuts"]) == drive(config, rows, config["cuts"])


@settings(max_examples=150, deadline=None)
@given(samples())
def test_results_do_not_depend_on_batching(sample):
    rows, config = sample
    one_by_one, _ = drive(config, rows)
    batched, _ = drive(config, rows, config["cuts"])
    assert batched == one_by_one


@settings(max_examples=100, deadline=None)
@given(samples())
def test_dead_letters_match_what_was_refused(sample):
    rows, config = sample
    p = processor(config)
    letters, refused = [], 0
    for row in rows:
        out = p.on_tick(row.arrival_time) if row.event_time is None else p.on_events([_Rec(row)])
        letters += out.dead_letters
        refused += sum(1 for o in out.trace if isinstance(o, EventOutcome) and o.status in ("dropped", "dead_letter"))
    assert len(letters) == refused
    assert all(d.reason in ("early_arrival", "late_arrival", "out_of_order", "window_closed") for d in letters)
    assert all(d.value["index"] is not None for d in letters)  # the original record travels with it
