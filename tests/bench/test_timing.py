"""bench/timing.py: a run timed from the consumer's own hooks, which a starved poller cannot
shorten, and the refusal of a span that covers too few of the events (no timed assertions:
only which events the stamps fall at)."""

from __future__ import annotations

import doctest
import math
from collections import Counter
from typing import Any

import anyio

from bench.timing import Clock, StampFile, best, figure, merged, row, timed
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.sensor_workload import closed_window_counts, readings

EVENTS = 10_000


async def test_a_backlog_that_starves_a_poller_is_timed_whole_by_the_hooks() -> None:
    clock = Clock(EVENTS, freeze=False)
    polled = Clock(EVENTS, freeze=False)  # the old way: a task of the same loop looks at a counter
    backlog = [list(range(100)) for _ in range(EVENTS // 100)]
    done = 0

    def on_next(batch: list[int]) -> None:
        nonlocal done
        clock.taken(len(batch))
        done += len(batch)
        clock.result()

    async def drain() -> None:
        # An agent draining a prefetched backlog: no await between its batches.
        for batch in backlog:
            on_next(batch)

    async def poll() -> None:
        seen = 0
        while seen < EVENTS:
            if done > seen:
                polled.result(done - seen)
                seen = done
            await anyio.sleep(0.002)

    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)  # it looks first (nothing done yet), then the drain holds the loop
        tg.start_soon(drain)

    report = clock.report()
    assert (report.first_at, report.covered, report.coverage) == (1, EVENTS, 1.0)
    assert report.steady_events == 8_000  # from the batch at 10 % to the one at 90 %
    assert report.rate is not None and report.rate == EVENTS / report.wall
    assert math.isfinite(report.steady_cpu) and report.steady_rate is not None
    starved = polled.report()
    assert (starved.first_at, starved.covered) == (EVENTS + 1, 0)  # it first saw the run over
    assert starved.refused and starved.rate is None and starved.steady_rate is None
    assert "no rate: the timed span covers 0% of the 10,000 events (from event 10,001)" in row("poller", starved)
    assert best([starved, report]) is report


def test_a_span_under_90_percent_of_the_events_is_refused() -> None:
    def run(before_span: int) -> Clock:
        clock = Clock(100, freeze=False)
        clock.result(before_span)  # counted at the first stamp: they happened before it
        clock.taken(100 - before_span)
        clock.result()
        return clock

    at_90, under = run(10).report(), run(11).report()
    assert (at_90.coverage, at_90.first_at, at_90.refused) == (0.9, 11, False)
    assert at_90.rate is not None and "no rate" not in row("x", at_90)
    assert (under.coverage, under.first_at, under.refused, under.rate, under.cpu_rate) == (0.89, 12, True, None, None)
    assert row("x", under).endswith("no rate: the timed span covers 89% of the 100 events (from event 12), under 90%")


def test_a_run_stopped_short_is_refused() -> None:
    clock = Clock(100, freeze=False)
    clock.taken(80)
    clock.result()
    assert not clock.complete and clock.report().refused


async def test_a_windowed_consumer_stamps_from_its_first_activation_to_its_last_window() -> None:
    items = list(readings(2_000, sensors=10, spacing=0.1))
    expected = closed_window_counts([v for _, v in items], 60, 5)
    clock = Clock(sum(expected.values()), freeze=False)
    counts: Counter[tuple[str, float]] = Counter()
    provider = StreamProvider.memory(queues=2)

    @provider.implicit("sensors")
    class PerSensor:
        event_time = EventTime(OrderingPolicy(timestamp_by="ts", unit="ms", out_of_order=5), Tumbling(60), Count())

        def __init__(self, stream_id: StreamId) -> None:
            clock.begin()  # activated as its stream's first event is taken
            self.key = stream_id.key

        def on_window(self, result: Any) -> None:
            counts[(self.key, result.start)] += result.value
            clock.result(result.value)

    async with provider:
        for key, value in items:
            await provider.get_stream(StreamId("sensors", key.decode())).send(value)
        await provider.flush()
        with anyio.fail_after(30):
            while not clock.complete:
                await anyio.sleep(0.005)
        report = clock.report()
    assert counts == expected
    assert (report.first_at, report.coverage, report.refused) == (1, 1.0, False)
    assert 0 < report.steady_events < report.covered


def test_a_timed_section_with_steps_gets_its_steady_part() -> None:
    with timed(1_000, freeze=False) as clock:
        for _ in range(10):
            clock.taken(100)
    report = clock.report()
    assert (report.coverage, report.first_at, report.steady_events) == (1.0, 1, 800)
    assert figure(report) == f"{report.rate:,.0f}"


def test_the_helpers_examples_hold() -> None:
    import bench.timing

    result = doctest.testmod(bench.timing)
    assert result.attempted > 0 and result.failed == 0


def test_stamps_of_several_processes_merge_onto_one_time_line(tmp_path) -> None:
    """bench/scale.py's workers: each process stamps a file; the merge times them together
    (here two stamp files written in turn by one process, as two workers would)."""
    first, second = StampFile(str(tmp_path / "1"), every=10), StampFile(str(tmp_path / "2"), every=10)
    for _ in range(10):  # 100 events each, 10 at a time, alternating
        for stamps in (first, second):
            stamps.taken(10)
            stamps.result()
    report = merged([str(tmp_path / "1"), str(tmp_path / "2")], 200)
    assert (report.first_at, report.coverage, report.refused) == (1, 1.0, False)
    assert report.steady_events >= 150 and report.cpu >= 0 and report.wall > 0
    assert merged([str(tmp_path / "1")], 200).refused  # one process's half of the events
