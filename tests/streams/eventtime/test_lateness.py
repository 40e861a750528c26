"""The lateness and disorder sketch (streams.eventtime.lateness) and the tolerances advised
from it (streams.eventtime.lateness), against exact computations on random data."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from streams.eventtime import Count, OrderingPolicy, Processor, Tumbling
from streams.eventtime.lateness import (
    BUCKETS,
    LARGEST,
    MAX_SUBSTREAMS,
    RELATIVE_ERROR,
    SLOT,
    SLOTS,
    SMALLEST,
    Histogram,
    LatenessSketch,
    ObservedTimes,
    advise,
    current,
    finalization_delay,
)

GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)  # a bucket's upper bound over its lower one
QUANTILES = (0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


def exact(values: list[float], q: float) -> float:
    """The smallest value at least q of the values are at or below."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def close_enough(estimate: float, truth: float) -> bool:
    """The stated error: within RELATIVE_ERROR of the value, or SMALLEST s of it near 0."""
    truth = min(max(truth, 0.0), LARGEST)
    return abs(estimate - truth) <= RELATIVE_ERROR * truth + SMALLEST + 1e-12


@pytest.mark.parametrize(
    "draw",
    [
        lambda r: r.lognormvariate(0.0, 2.0),  # seconds, with a long tail
        lambda r: r.uniform(-5.0, 500.0),  # some from the future (negative lateness)
        lambda r: r.expovariate(1 / 0.01),  # milliseconds
        lambda r: 0.0 if r.random() < 0.3 else r.paretovariate(1.2),  # many in order, a heavy tail
    ],
)
def test_quantiles_are_within_the_stated_error_of_the_exact_ones(draw: object) -> None:
    rnd = random.Random(29)
    values = [draw(rnd) for _ in range(20_000)]  # type: ignore[operator]
    h = Histogram()
    for v in values:
        h.add(v)
    assert h.count == len(values)
    for q in QUANTILES:
        truth = exact(values, q)
        assert close_enough(h.quantile(q), truth), (q, h.quantile(q), truth)
        # The upper bound (what advice uses) covers the exact quantile, at most a bucket's width above.
        upper = h.quantile(q, upper=True)
        assert upper >= min(truth, LARGEST) - 1e-9
        assert upper <= max(truth, 0.0) * GAMMA + SMALLEST + 1e-9
        # At least q of the values are at or below it: a tolerance this large keeps them.
        assert sum(v <= upper for v in values) >= q * len(values)


def test_an_empty_sketch_has_no_quantile() -> None:
    assert math.isnan(Histogram().quantile(0.5))
    seen = LatenessSketch().observed(0.0)
    assert seen.samples == 0 and math.isnan(seen.quantile("lateness", 0.99))
    with pytest.raises(ValueError, match="no events observed"):
        advise(seen, 0.99)


def test_merged_sketches_give_the_quantiles_of_all_their_values() -> None:
    rnd = random.Random(7)
    sketches, values = [LatenessSketch(every=1) for _ in range(3)], []
    for i, sketch in enumerate(sketches):
        for _ in range(3000):
            late = rnd.expovariate(1 / (i + 1))
            values.append(late)
            sketch.record(1000.0, 1000.0 - late, 1000.0 - late)  # each the newest of its lane
    merged = ObservedTimes.combine(s.observed(1000.0) for s in sketches)
    assert merged.samples == 9000
    for q in QUANTILES:
        assert close_enough(merged.quantile("lateness", q), exact(values, q))
    assert merged.quantile("disorder", 1.0) == 0.0  # every event was the newest


def test_the_hour_slides_with_the_arrival_clock() -> None:
    sketch = LatenessSketch(every=1)
    for minute in range(120):  # two hours, one event a minute, lateness = the minute number
        arrival = minute * 60.0
        sketch.record(arrival, arrival - minute, arrival)
    now = 119 * 60.0
    seen = sketch.observed(now)
    # The slots of the last hour: from slot (now // SLOT) - SLOTS + 1 to now's.
    first = (now // SLOT - SLOTS + 1) * SLOT
    kept = [m for m in range(120) if m * 60.0 >= first]
    assert seen.samples == len(kept)
    assert close_enough(seen.quantile("lateness", 1e-9), float(kept[0]))
    assert close_enough(seen.quantile("lateness", 1.0), 119.0)
    # Later, with nothing new, the hour empties slot by slot.
    assert sketch.observed(now + 30 * 60).samples == sum(1 for m in kept if m * 60.0 >= first + 30 * 60)
    assert sketch.observed(now + 3600.0).samples == 0
    # A sample older than what the ring holds is not kept.
    sketch.record(0.0, -5.0, 0.0)
    assert sketch.observed(now).samples == len(kept)


def test_memory_does_not_grow_with_events() -> None:
    sketch = LatenessSketch(every=1)
    rnd = random.Random(3)
    arrival = 0.0
    for _ in range(20_000):  # over more than an hour: every slot in use
        arrival += 0.25
        sketch.record(arrival, arrival - rnd.expovariate(0.1), arrival)
    size = sketch.size_bytes()
    assert size == SLOTS * 2 * 4 * BUCKETS
    for _ in range(100_000):
        arrival += 0.01
        sketch.record(arrival, arrival - rnd.expovariate(0.1) * 1000, arrival)
    assert sketch.size_bytes() == size


def test_substreams_kept_apart_are_bounded_and_counted() -> None:
    sketch = LatenessSketch(every=1, substreams=MAX_SUBSTREAMS)
    for k in range(MAX_SUBSTREAMS + 3):
        sketch.record(100.0, 100.0 - k, 100.0, substream=f"k{k}")
    seen = sketch.observed(100.0)
    assert seen.samples == MAX_SUBSTREAMS + 3  # the queue's sketch has them all
    assert seen.untracked == 3
    assert sketch.size_bytes() == (1 + MAX_SUBSTREAMS) * 2 * 4 * BUCKETS
    # The worst kept ones, by p99 lateness, in the status (three).
    assert [name for name, _, _ in seen.substreams] == [f"k{k}" for k in (3, 2, 1)]
    # An hour later the kept ones are empty: a new substream takes a place.
    later = 100.0 + 3600.0
    sketch.record(later, later - 50.0, later, substream="new")
    names = [name for name, _, _ in sketch.observed(later).substreams]
    assert names == ["new"]


def _events(rows: list[tuple[float, float, str]]) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(value={"k": key}, event_time=t, arrival_time=arr, token=i)
        for i, (arr, t, key) in enumerate(rows)
    ]


def _workload(n: int, seed: int, keys: int = 1) -> list[tuple[float, float, str]]:
    """Events in arrival order: most 0-2 s late, a tenth 5-60 s late, some from 1 s ahead."""
    rnd = random.Random(seed)
    rows, arrival = [], 1_000.0
    for _ in range(n):
        arrival += rnd.expovariate(20.0)
        roll = rnd.random()
        late = rnd.uniform(5.0, 60.0) if roll < 0.1 else rnd.uniform(-1.0, 0.0) if roll < 0.15 else rnd.uniform(0, 2)
        rows.append((arrival, arrival - late, f"k{rnd.randrange(keys)}"))
    return rows


def _brute_force(rows: list[tuple[float, float, str]], per_key: bool) -> tuple[list[float], list[float]]:
    """Lateness and disorder of every event, each lane's newest kept in a dict."""
    newest: dict[str, float] = {}
    lateness, disorder = [], []
    for arr, t, key in rows:
        lane = key if per_key else ""
        lateness.append(arr - t)
        disorder.append(max(0.0, newest.get(lane, -math.inf) - t))
        newest[lane] = max(newest.get(lane, -math.inf), t)
    return lateness, disorder


@pytest.mark.parametrize("over", [None, "k"])
def test_the_processor_samples_every_nth_event_across_batches(over: str | None) -> None:
    rows = _workload(700, seed=1, keys=5)
    sketch = LatenessSketch(every=10, substreams=MAX_SUBSTREAMS if over else 0)
    p = Processor(OrderingPolicy(timestamp_by=lambda e: e.event_time, over=over, out_of_order=1.0), group_by="k")
    p.sample_times(sketch)
    events = _events(rows)
    for start in range(0, len(events), 7):  # batches of 7: the countdown carries over
        p.on_events(events[start : start + 7])
    seen = sketch.observed(rows[-1][0])
    assert seen.samples == 70
    lateness, disorder = _brute_force(rows, per_key=over is not None)
    sampled = [i for i in range(len(rows)) if (i + 1) % 10 == 0]
    h_late, h_dis = Histogram(), Histogram()
    for i in sampled:
        h_late.add(lateness[i])
        h_dis.add(disorder[i])
    assert seen.lateness == {str(b): n for b, n in h_late.buckets().items()}
    assert seen.disorder == {str(b): n for b, n in h_dis.buckets().items()}
    p.sample_times(None)
    p.on_events(_events(_workload(50, seed=2)))
    assert sketch.observed(rows[-1][0]).samples == 70


@pytest.mark.parametrize("over", [None, "k"])
@pytest.mark.parametrize("share", [0.99, 0.999])
def test_advice_matches_brute_force_and_keeps_the_share_unadjusted(over: str | None, share: float) -> None:
    rows = _workload(5000, seed=11, keys=4)
    sketch = LatenessSketch(every=1, out_of_order=0.5, late_arrival=None)
    watched = Processor(OrderingPolicy(over=over, out_of_order=0.5), Tumbling(10), Count(), group_by="k")
    watched.sample_times(sketch)
    watched.on_events(_events(rows))
    seen = sketch.observed(rows[-1][0])
    assert seen.samples == len(rows)
    lateness, disorder = _brute_force(rows, per_key=over is not None)
    advice = advise(seen, share)
    # Brute force: the exact quantile, covered by the advice, at most a bucket's width (4.1 %, or 1 ms) above it.
    for advised, values in ((advice.out_of_order, disorder), (advice.late_arrival, lateness)):
        assert advised is not None
        truth = exact(values, share)
        assert max(truth, 0.0) - 1e-9 <= advised <= max(truth, 0.0) * GAMMA + SMALLEST
    median = exact(lateness, 0.5)
    assert advice.delay == pytest.approx(min(advice.out_of_order + median, advice.late_arrival), rel=0.03, abs=2e-3)
    assert current(seen).delay == pytest.approx(0.5 + median, rel=0.03, abs=2e-3)
    # Replayed with each advised tolerance alone, at most 1 - share of the events are adjusted
    # by its step; with both, at most twice that.
    n = len(rows)
    alone = Processor(OrderingPolicy(over=over, out_of_order=advice.out_of_order), Tumbling(10), Count(), group_by="k")
    alone.on_events(_events(rows))
    assert alone.counters.adjusted <= (1 - share) * n
    late = Processor(OrderingPolicy(over=over, out_of_order=1e9, late_arrival=advice.late_arrival), group_by="k")
    late.on_events(_events(rows))
    assert late.counters.adjusted <= (1 - share) * n
    both = Processor(
        OrderingPolicy(over=over, out_of_order=advice.out_of_order, late_arrival=advice.late_arrival),
        Tumbling(10),
        Count(),
        group_by="k",
    )
    both.on_events(_events(rows))
    assert both.counters.adjusted <= 2 * (1 - share) * n
    # The current policy (0.5 s) adjusts more than the advice lets through.
    assert watched.counters.adjusted > (1 - share) * n


def test_finalization_delay_follows_the_watermark() -> None:
    # W = max(newest - O, arrival - L): a window ending at e closes when an event of e + O
    # arrives (O + median lateness later) or at e + L, whichever comes first.
    assert finalization_delay(0.0, None, 2.0) == 2.0
    assert finalization_delay(10.0, None, 2.0) == 12.0
    assert finalization_delay(10.0, 5.0, 2.0) == 5.0
    assert finalization_delay(1.0, 5.0, -1.0) == 1.0  # early events: no less than O


def test_a_sampled_event_whose_time_does_not_read_passes_its_turn_on() -> None:
    sketch = LatenessSketch(every=3)
    p = Processor(OrderingPolicy(timestamp_by="ts"))
    p.sample_times(sketch)
    batch = [SimpleNamespace(value={"ts": 5.0}, event_time=0.0, arrival_time=10.0, token=i) for i in range(4)]
    batch[2] = SimpleNamespace(value={}, event_time=0.0, arrival_time=10.0, token=2)  # the third: no time
    out = p.on_events(batch)
    assert [d.reason for d in out.dead_letters] == ["invalid_timestamp"]
    assert sketch.observed(10.0).samples == 0 and sketch.due == 1  # the next batch's first instead
    p.on_events([SimpleNamespace(value={"ts": 9.0}, event_time=0.0, arrival_time=11.0, token=4)])
    seen = sketch.observed(11.0)
    assert seen.samples == 1 and close_enough(seen.quantile("lateness", 1.0), 2.0)
    assert sketch.due == 3


def test_an_arrival_that_is_no_time_is_not_kept() -> None:
    sketch = LatenessSketch(every=1)
    for arrival in (math.inf, -math.inf, math.nan):
        sketch.record(arrival, 5.0, 5.0)
    sketch.record(10.0, 5.0, -math.inf)  # the first of its lane: no disorder
    seen = sketch.observed(10.0)
    assert seen.samples == 1 and seen.quantile("disorder", 1.0) == 0.0


def test_observed_times_read_back_from_their_plain_form() -> None:
    from dataclasses import asdict

    from streams.adapters.status import observed_of

    sketch = LatenessSketch(every=1, late_arrival=5.0, substreams=MAX_SUBSTREAMS)
    sketch.record(10.0, 7.0, 9.0, "a")
    seen = sketch.observed(10.0)
    assert ObservedTimes.from_dict(asdict(seen)) == seen
    # What does not read (another version's row) is left out, the rest kept.
    assert observed_of({"ok": asdict(seen), "bad": {"samples": "x", "every": 1}, "worse": [1]}) == {"ok": seen}
    assert observed_of("nothing") == {}
