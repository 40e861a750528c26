"""Core runtime benchmark: throughput against a plain-asyncio baseline, latency, and memory
while one consumer stalls. Run: .venv/bin/python bench/core.py [--quick] [--repeat 3]"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import timing  # noqa: E402
from bench._common import percentile, rss_mb  # noqa: E402
from bench.timing import HEADER, Clock, Report, best, row  # noqa: E402
from streams import BatchContainer, BatchKind, GeneratorConfig, StreamId, StreamProvider, inline  # noqa: E402
from streams.backends.memory.adapter import MemoryQueueAdapter  # noqa: E402

HEADRACE = "headrace, 25 events a record"
BASELINE = "baseline: plain asyncio queues, same batches, callbacks"
HEADRACE_1 = "headrace, one event a record"
BASELINE_1 = "baseline, one event a record"


class Counter:
    """The consumer both sides hand batches to; it stamps the run's ``clock`` (bench/timing.py)."""

    total = 0
    clock = Clock(0, freeze=False)

    def __init__(self, stream_id: StreamId | None = None) -> None:
        pass

    @inline  # never awaits: the agent calls it where the data arrives, as in the baseline
    async def on_next(self, batch: list[int]) -> None:
        Counter.clock.taken(len(batch))
        Counter.total += len(batch)
        Counter.clock.result()


def start(expected: int) -> Clock:
    """A run's clock; it begins now, at the first publish (in process the publisher is part
    of the run), and ends at the last batch a consumer takes."""
    Counter.total = 0
    Counter.clock = Clock(expected)
    Counter.clock.begin()
    return Counter.clock


async def runtime_throughput(streams: int, batches: int, size: int, queues: int) -> Report:
    provider = StreamProvider.memory(queues=queues)
    sids = [StreamId("bench", str(i)) for i in range(streams)]
    expected = streams * batches * size * 2
    async with provider:
        for sid in sids:
            for _ in range(2):
                await provider.get_stream(sid).subscribe(Counter())
        handles = [provider.get_stream(sid) for sid in sids]
        values = list(range(size))
        clock = start(expected)
        for _ in range(batches):
            for stream in handles:
                await stream.on_next_batch(values)
        while not clock.complete:  # only when to stop: the consumers stamped the end
            await anyio.sleep(0.001)
    return clock.report()


async def baseline_throughput(streams: int, batches: int, size: int, queues: int) -> Report:
    """The same batches (already decoded Event lists) through plain asyncio queues, one
    reader task per queue handing each batch to the stream's two consumers."""
    adapter = MemoryQueueAdapter(queues)  # only for its queue mapping
    sids = [StreamId("bench", str(i)) for i in range(streams)]
    consumers = {sid: (Counter(), Counter()) for sid in sids}
    qs = {q: asyncio.Queue() for q in adapter.mapper.get_all_queues()}
    queue_of = {sid: qs[adapter.mapper.get_queue_for_stream(sid)] for sid in sids}
    container = {sid: BatchContainer(sid, BatchKind.DATA, time.time(), list(range(size))).events(0) for sid in sids}
    expected = streams * batches * size * 2

    async def reader(q: asyncio.Queue) -> None:
        while True:
            sid, batch = await q.get()
            for consumer in consumers[sid]:
                await consumer.on_next(batch)

    tasks = [asyncio.create_task(reader(q)) for q in qs.values()]
    clock = start(expected)
    for _ in range(batches):
        for sid in sids:
            queue_of[sid].put_nowait((sid, container[sid]))
            await asyncio.sleep(0)  # as a producer awaiting its enqueue would yield
    while not clock.complete:
        await asyncio.sleep(0.001)
    for t in tasks:
        t.cancel()
    return clock.report()


async def latency(rate: int, seconds: float) -> list[float]:
    provider = StreamProvider.memory(queues=8)
    delays: list[float] = []

    class Timed:
        def on_next(self, batch: list) -> None:
            now = time.perf_counter()
            delays.extend(now - e.value for e in batch)

    sids = [StreamId("lat", str(i)) for i in range(100)]
    async with provider:
        for sid in sids:
            await provider.get_stream(sid).subscribe(Timed())
        n = int(rate * seconds)
        start = time.perf_counter()
        for i in range(n):
            await provider.get_stream(sids[i % len(sids)]).on_next(time.perf_counter())
            lag = start + (i + 1) / rate - time.perf_counter()
            if lag > 0:
                await anyio.sleep(lag)
        with anyio.fail_after(10):
            await provider.drain()
    return sorted(delays)


async def stalled_memory(events: int) -> tuple[float, float, float, int, int]:
    """One consumer stalls forever while the others take ``events`` events through the
    generator adapter; returns RSS before, at 10 % and at the end, the stalled agent's cache
    size, and the events delivered."""
    streams = 1000
    config = GeneratorConfig(
        "gen",
        streams=streams,
        events_per_stream=events // streams * 9 // 8 + 1,
        batch_size=50,
        make_value=lambda sid, n: n,
        complete=False,
    )
    provider = StreamProvider.generator(config, queues=8, max_event_delivery_time=3600)
    stall = anyio.Event()
    delivered = 0
    stalled_key = "0"

    @provider.implicit("gen")
    class Consumer:
        def __init__(self, stream_id: StreamId) -> None:
            self.stalls = stream_id.key == stalled_key

        async def on_next(self, batch: list) -> None:
            nonlocal delivered
            if self.stalls:
                await stall.wait()
            delivered += len(batch)

    before = rss_mb()
    early = peak = before
    async with provider:
        while delivered < events:
            await anyio.sleep(0.05)
            peak = max(peak, rss_mb())
            if delivered < events // 10:
                early = peak
        sizes = [a.cache.size for a in provider.agents]
        stall.set()
        provider._manager.agents  # noqa: B018 - keep the provider alive until here
    return before, early, peak, max(sizes), delivered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (a smoke run)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per side; the best counts")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    streams, batches, size = 1000, 40 // scale or 1, 25

    async def run() -> None:
        print(
            f"headrace core benchmark: {streams} streams over 8 queues, 2 consumers each, "
            f"{batches} batches of {size} events per stream"
        )
        # Turns, best of each: load from elsewhere on the machine falls on both sides alike.
        runs: dict[str, list[Report]] = {}
        for _ in range(args.repeat):
            runs.setdefault(HEADRACE, []).append(await runtime_throughput(streams, batches, size, 8))
            runs.setdefault(BASELINE, []).append(await baseline_throughput(streams, batches, size, 8))
            # One event per record: the per-call costs (a delivery, its log context) dominate.
            runs.setdefault(HEADRACE_1, []).append(await runtime_throughput(streams, batches * 5, 1, 8))
            runs.setdefault(BASELINE_1, []).append(await baseline_throughput(streams, batches * 5, 1, 8))
        table = {name: best(reports) for name, reports in runs.items()}
        print(f"  delivered events, best of {args.repeat}\n")
        print(HEADER)
        for name, report in table.items():
            print(row(name, report, table[BASELINE_1 if name in (HEADRACE_1, BASELINE_1) else BASELINE]))
        timing.note_ratio("headrace / asyncio queues, 25 events a record", table[HEADRACE], table[BASELINE])
        timing.note_ratio(
            "headrace / asyncio queues, 25 events a record, per CPU second", table[HEADRACE], table[BASELINE], cpu=True
        )
        timing.note_ratio("headrace / asyncio queues, one event a record", table[HEADRACE_1], table[BASELINE_1])
        delays = await latency(rate=2000, seconds=3 / scale)
        print(
            f"  latency on_next -> delivery at 2000 events/s: p50 {percentile(delays, 0.5) * 1e3:.2f} ms, "
            f"p99 {percentile(delays, 0.99) * 1e3:.2f} ms ({len(delays)} events)"
        )
        timing.note("latency p50, ms", percentile(delays, 0.5) * 1e3)
        timing.note("latency p99, ms", percentile(delays, 0.99) * 1e3)
        total = 5_000_000 // scale
        before, early, peak, cache, delivered = await stalled_memory(total)
        print(
            f"  one consumer stalled while {delivered:,} events flowed: RSS {before:.0f} MB before, "
            f"{early:.0f} MB at 10 %, peak {peak:.0f} MB; stalled agent's cache {cache} batches (bound 4096)"
        )
        timing.note("peak RSS while a consumer stalls, MB", peak)

    anyio.run(run)
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
