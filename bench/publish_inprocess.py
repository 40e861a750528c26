"""One event at a time, in process: headrace's publishing paths into a windowed consumer,
against Bytewax 0.21's ``fold_window`` on the same events, in one run.

The events are the sensor readings of ``tests/sensor_workload.py`` (``--events`` of them, 100 sensors, 10 ms apart,
5 % of them 3 s out of order, ``ts`` in epoch milliseconds). Each headrace row publishes them
to memory queues (8) of a provider that is also the worker, whose consumer counts each
sensor's events in tumbling 60 s windows (out-of-order tolerance 5 s, event time from
``ts``), and is timed from the first publish to the last window its consumer's ``on_window``
gets (bench/timing.py); the closed windows' counts are checked against a count made here.
Rows:

- ``send``: one call per event, then ``flush``, with the library's defaults (the worker's
  collector policy on, agents/gc_policy.py); again with ``tune_gc=False`` (CPython's
  collector, as an application that opts out keeps it);
- ``on_next_batch`` of one event, awaited, one call per event;
- ``on_next_batch`` of 100 events of one sensor per call;
- Bytewax: ``TestingSource`` (1,000 and 10,000 items a poll: one item a poll runs at about
  1,400 events/s, 100 at 53,000, on this machine) -> ``key_on`` sensor ->
  ``fold_window`` (``EventClock`` from ``ts``, 5 s wait, ``TumblingWindower`` 60 s, a count)
  -> a sink, run with ``run_main`` (one worker) until its input ends, timed from its source
  taking the first item to the last window its sink gets.

Each row runs ``--rounds`` times, alternating; the best round is shown, in wall-clock time
and in CPU time of the process (steadier on a machine other work shares), for the whole run
and its steady part (10 % to 90 % of the events), with the share of events the span covers.

    python bench/publish.py inprocess [--events 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/streams.py would shadow the package

from bench import timing  # noqa: E402
from bench.kafka_sensors import ratio, windowed_provider  # noqa: E402
from bench.timing import HEADER, Clock, Report, best, row  # noqa: E402
from streams import StreamId, StreamProvider  # noqa: E402
from tests.sensor_workload import closed_window_counts, readings  # noqa: E402

Reading = dict[str, Any]
SEND = "headrace send, 1 event a call, then flush"


async def headrace(
    publish: Callable[[StreamProvider], Awaitable[None]], events: int, tune_gc: bool | None = None
) -> tuple[Report, str]:
    """The run from the first publish to the last window the consumer gets, and whether the
    closed windows are right."""
    counts: Counter[tuple[str, float]] = Counter()
    clock = Clock(sum(EXPECTED[0].values()))
    provider = windowed_provider(StreamProvider.memory(queues=8, tune_gc=tune_gc), counts, clock)
    async with provider:
        clock.begin()  # in process the publisher is part of the run: it begins at its first call
        await publish(provider)
        while not clock.complete:  # only when to stop: the hooks stamped the end
            await anyio.sleep(0.001)
        report = clock.report()
    return report, ("" if counts == EXPECTED[0] else f"{sum(counts.values())} counted")


EXPECTED: list[Counter[tuple[str, float]]] = []
UNTUNED = "headrace send, the same with tune_gc=False"


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


def bytewax_run(values: list[Reading], batch_size: int) -> Report:
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    clock = Clock(len(values))  # its windows all close at the end of its input

    def source() -> Iterator[Reading]:
        clock.begin()  # runs when Bytewax takes the first item
        yield from values

    class Windows(list[Any]):
        """TestingSink's list: ``+=`` is how its sink takes a batch of windows."""

        def __iadd__(self, items: Iterable[Any]) -> Windows:  # type: ignore[misc]
            items = list(items)
            super().__iadd__(items)
            clock.result(sum(n for _, (_, n) in items))
            return self

    out = Windows()
    flow = Dataflow("sensors")
    stream = op.input("in", flow, TestingSource(source(), batch_size=batch_size))
    keyed = op.key_on("key", stream, lambda v: v["sensor"])
    clock_of = win.EventClock(
        lambda v: datetime.fromtimestamp(v["ts"] / 1000, UTC), wait_for_system_duration=timedelta(seconds=5)
    )
    windower = win.TumblingWindower(length=timedelta(seconds=60), align_to=datetime(2023, 1, 1, tzinfo=UTC))
    counted = win.fold_window("count", keyed, clock_of, windower, lambda: 0, lambda n, v: n + 1, lambda a, b: a + b)
    op.output("out", counted.down, TestingSink(out))
    run_main(flow)
    if sum(n for _, (_, n) in out) != len(values):
        raise RuntimeError("Bytewax counted another number of events")
    return clock.report()


async def run(events: int, rounds: int) -> None:
    items = list(readings(events))
    EXPECTED.append(closed_window_counts([v for _, v in items], 60, 5))
    rows = senders(items)
    has_bytewax = importlib.util.find_spec("bytewax") is not None
    print(f"{events} sensor readings, 100 sensors, memory queues (8), in process; best of {rounds} rounds\n")
    runs: dict[str, list[Report]] = {}
    wrong: set[str] = set()
    for _ in range(rounds):
        if has_bytewax:
            for size in (1000, 10_000):
                name = f"Bytewax 0.21 fold_window, {size} item(s) a poll"
                runs.setdefault(name, []).append(bytewax_run([v for _, v in items], size))
        for name, publish in rows.items():
            report, problem = await headrace(publish, events)
            runs.setdefault(name, []).append(report)
            if problem:
                wrong.add(f"{name}: {problem}")
            if name == SEND:
                report, problem = await headrace(publish, events, tune_gc=False)
                runs.setdefault(UNTUNED, []).append(report)
                if problem:
                    wrong.add(f"{UNTUNED}: {problem}")
    table = {name: best(reports) for name, reports in runs.items()}
    bytewax = [table[name] for name in table if name.startswith("Bytewax")] or [table[SEND]]
    base = max(bytewax, key=lambda r: r.rate or 0.0)  # Bytewax's faster row
    print(HEADER.replace("vs base", "vs Bwax"))
    for name, report in table.items():
        print(row(name, report, base))
    timing.note_ratio("send / Bytewax's faster row" if has_bytewax else "send / send", table[SEND], base)
    timing.note_ratio(
        "send, tune_gc=False / Bytewax's faster row" if has_bytewax else "send, tune_gc=False / send",
        table[UNTUNED],
        base,
    )
    if not has_bytewax:
        print("\nBytewax is not installed (pip install 'headrace[bench]'): ratios are against send")
    else:
        print(
            f"\n'vs Bwax' is against Bytewax's faster row; send: {ratio(table[SEND], base)}; "
            f"with tune_gc=False: {ratio(table[UNTUNED], base)}"
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
    timing.save_run(__file__, {}, params=vars(options))


if __name__ == "__main__":
    main(sys.argv[1:])
