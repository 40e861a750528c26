"""One event at a time, in process: headrace's publishing paths into a windowed consumer,
against Bytewax 0.21's ``fold_window`` on the same events, in one run.

The events are issue 12's sensor readings (``--events`` of them, 100 sensors, 10 ms apart,
5 % of them 3 s out of order, ``ts`` in epoch milliseconds). Each headrace row publishes them
to memory queues (8) of a provider that is also the worker, whose consumer counts each
sensor's events in tumbling 60 s windows (out-of-order tolerance 5 s, event time from
``ts``), and is timed from the first publish to the processors having taken every event; the
closed windows' counts are checked against a count made here. Rows:

- ``send``: one call per event, then ``flush``; again with ``tune_gc=True`` (the collector
  policy ``headrace worker`` applies; a library leaves it off);
- ``on_next_batch`` of one event, awaited, one call per event;
- ``on_next_batch`` of 100 events of one sensor per call;
- Bytewax: ``TestingSource`` (1,000 and 10,000 items a poll: one item a poll runs at about
  1,400 events/s, 100 at 53,000, on this machine) -> ``key_on`` sensor ->
  ``fold_window`` (``EventClock`` from ``ts``, 5 s wait, ``TumblingWindower`` 60 s, a count)
  -> a sink, run with ``run_main`` (one worker) until its input ends.

Each row runs ``--rounds`` times, alternating; the best round is shown, in wall-clock time
and in CPU time of the process (steadier on a machine other work shares).

    python bench/publish.py inprocess [--events 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/streams.py would shadow the package

from bench.kafka_sensors import windowed_provider  # noqa: E402
from streams import StreamId, StreamProvider  # noqa: E402
from tests.sensor_workload import closed_window_counts, readings  # noqa: E402

Reading = dict[str, Any]
SEND = "headrace send, 1 event a call, then flush"


Timing = tuple[float, float]  # wall-clock seconds, CPU seconds of this process


async def headrace(
    publish: Callable[[StreamProvider], Awaitable[None]], events: int, tune_gc: bool = False
) -> tuple[Timing, str]:
    """The time from the first publish until the processors took ``events``, and whether
    the closed windows are right."""
    counts: Counter[tuple[str, float]] = Counter()
    provider = windowed_provider(StreamProvider.memory(queues=8, tune_gc=tune_gc), counts)
    settle()
    async with provider:
        began, cpu = time.perf_counter(), time.process_time()
        await publish(provider)
        while sum(o.processor.counters.events for a in provider.agents for o in a.event_time_activations()) < events:
            await anyio.sleep(0.001)
        timing = time.perf_counter() - began, time.process_time() - cpu
    return timing, ("" if counts == EXPECTED[0] else f"{sum(counts.values())} counted")


EXPECTED: list[Counter[tuple[str, float]]] = []
TUNED = "headrace send, the same with tune_gc=True"


def settle() -> None:
    """Freeze what the set-up left alive (the readings, the counts to check against): no
    side's garbage collections walk them."""
    gc.collect()
    gc.freeze()


def senders(items: list[tuple[bytes, Reading]]) -> dict[str, Callable[[StreamProvider], Awaitable[None]]]:
    keys = [key.decode() for key, _ in items]
    values = [value for _, value in items]
    batches: list[tuple[str, list[Reading]]] = []  # 100 consecutive readings of one sensor a call
    open_batches: dict[str, list[Reading]] = {}
    for key, value in zip(keys, values, strict=True):
        batch = open_batches.setdefault(key, [])
        batch.append(value)
        if len(batch) == 100:
            batches.append((key, open_batches.pop(key)))
    batches.extend(open_batches.items())

    def streams(provider: StreamProvider) -> dict[str, Any]:
        return {key: provider.get_stream(StreamId("sensors", key)) for key in set(keys)}

    async def send(provider: StreamProvider) -> None:
        by_key = streams(provider)
        for key, value in zip(keys, values, strict=True):
            await by_key[key].send(value)
        await provider.flush()

    async def batch_of_one(provider: StreamProvider) -> None:
        by_key = streams(provider)
        for key, value in zip(keys, values, strict=True):
            await by_key[key].on_next_batch([value])

    async def batch_of_100(provider: StreamProvider) -> None:
        by_key = streams(provider)
        for key, batch in batches:
            await by_key[key].on_next_batch(batch)

    return {
        SEND: send,
        "headrace on_next_batch of 1 event, awaited, a call each": batch_of_one,
        "headrace on_next_batch of 100 events of a sensor a call": batch_of_100,
    }


def bytewax_seconds(values: list[Reading], batch_size: int) -> Timing:
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    out: list[Any] = []
    flow = Dataflow("sensors")
    stream = op.input("in", flow, TestingSource(values, batch_size=batch_size))
    keyed = op.key_on("key", stream, lambda v: v["sensor"])
    clock = win.EventClock(
        lambda v: datetime.fromtimestamp(v["ts"] / 1000, UTC), wait_for_system_duration=timedelta(seconds=5)
    )
    windower = win.TumblingWindower(length=timedelta(seconds=60), align_to=datetime(2023, 1, 1, tzinfo=UTC))
    counted = win.fold_window("count", keyed, clock, windower, lambda: 0, lambda n, v: n + 1, lambda a, b: a + b)
    op.output("out", counted.down, TestingSink(out))
    settle()
    began, cpu = time.perf_counter(), time.process_time()
    run_main(flow)
    timing = time.perf_counter() - began, time.process_time() - cpu
    if sum(n for _, (_, n) in out) != len(values):
        raise RuntimeError("Bytewax counted another number of events")
    return timing


async def run(events: int, rounds: int) -> None:
    items = list(readings(events))
    EXPECTED.append(closed_window_counts([v for _, v in items], 60, 5))
    rows = senders(items)
    has_bytewax = importlib.util.find_spec("bytewax") is not None
    print(f"{events} sensor readings, 100 sensors, memory queues (8), in process; best of {rounds} rounds\n")
    best: dict[str, Timing] = {}
    wrong: set[str] = set()
    for _ in range(rounds):
        times: dict[str, Timing] = {}
        if has_bytewax:
            for size in (1000, 10_000):
                times[f"Bytewax 0.21 fold_window, {size} item(s) a poll"] = bytewax_seconds([v for _, v in items], size)
        for name, publish in rows.items():
            times[name], problem = await headrace(publish, events)
            if problem:
                wrong.add(f"{name}: {problem}")
            if name == SEND:
                times[TUNED], problem = await headrace(publish, events, tune_gc=True)
                if problem:
                    wrong.add(f"{TUNED}: {problem}")
        for name, (wall, cpu) in times.items():
            was = best.get(name, (wall, cpu))
            best[name] = (min(was[0], wall), min(was[1], cpu))
    bytewax = [name for name in best if name.startswith("Bytewax")] or [SEND]
    base = min(best[name][0] for name in bytewax)
    base_cpu = min(best[name][1] for name in bytewax)
    print(f"{'':58} {'events/s':>10} {'vs Bytewax':>10} {'per CPU s':>10} {'vs Bytewax':>10}")
    for name, (wall, cpu) in best.items():
        print(f"{name:58} {events / wall:10,.0f} {base / wall:9.2f}x {events / cpu:10,.0f} {base_cpu / cpu:9.2f}x")
    if not has_bytewax:
        print("\nBytewax is not installed (pip install 'headrace[bench]'): ratios are against send")
    else:
        print(
            f"\n'vs Bytewax' is against Bytewax's faster row; send: {base / best[SEND][0]:.2f}x "
            f"({base_cpu / best[SEND][1]:.2f}x per CPU second; aim 1.0x); with tune_gc=True: "
            f"{base / best[TUNED][0]:.2f}x ({base_cpu / best[TUNED][1]:.2f}x)"
        )
    print(f"closed windows' counts against a count made here: {'; '.join(sorted(wrong)) or 'equal'}")


def main(argv: list[str], prog: str = "publish_inprocess.py") -> None:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    anyio.run(run, options.events, options.rounds)


if __name__ == "__main__":
    main(sys.argv[1:])
