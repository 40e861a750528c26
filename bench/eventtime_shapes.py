"""Event-time core throughput in the shapes the runtime uses, to compare two trees.

Shapes (the same events: 100 keys, one millisecond apart, 5 % out of order up to 2 s):
a tumbling count per key in batches of 1000; the same one event per call; substreams
(``over``) with a late-arrival tolerance and a ``Sum``; no window with a late-arrival
tolerance (every event passes through); overlapping hopping windows with ``Mean`` and
``action="drop"``. Each figure is events per second of CPU time (``process_time``, steadier
than wall time on a shared machine), the best of ``--rounds``; ``--json`` prints them with
the output counts, which two trees must agree on.

Run (side by side: alternate the trees, several times, keep each side's best):
PYTHONPATH=$PWD .venv/bin/python bench/eventtime_shapes.py [--events N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import timing  # noqa: E402
from bench.timing import Report, coverage_line, timed  # noqa: E402
from streams.core.batch import Event  # noqa: E402
from streams.core.ids import (
    SequenceToken,  # noqa: E402
    StreamId,  # noqa: E402
)
from streams.eventtime import Hopping, Mean, OrderingPolicy, Processor, Sum, Tumbling  # noqa: E402


def make_events(n: int, seed: int = 7) -> list[Event]:
    rng = random.Random(seed)
    sid = StreamId("bench", "shapes")
    values = [{"key": f"k{i}", "v": i} for i in range(100)]
    events = []
    for i in range(n):
        arrival = i * 0.001
        event_time = arrival - rng.uniform(0.0, 2.0) if rng.random() < 0.05 else arrival
        events.append(Event(values[rng.randrange(100)], event_time, arrival, SequenceToken(i // 1000, i % 1000), sid))
    return events


def _value(e: Event) -> object:
    return e.value["v"]


SHAPES: dict[str, tuple[Callable[[], Processor], bool]] = {  # name -> (processor, one event per call)
    "tumbling count, batches of 1000": (
        lambda: Processor(OrderingPolicy(out_of_order=1.0), Tumbling(10.0), group_by="key"),
        False,
    ),
    "tumbling count, one event per call": (
        lambda: Processor(OrderingPolicy(out_of_order=1.0), Tumbling(10.0), group_by="key"),
        True,
    ),
    "substreams, late arrival, sum": (
        lambda: Processor(
            OrderingPolicy(over="key", out_of_order=1.0, late_arrival=5.0), Tumbling(10.0), Sum(), select=_value
        ),
        False,
    ),
    "no window, late arrival": (lambda: Processor(OrderingPolicy(out_of_order=1.0, late_arrival=5.0)), False),
    "hopping mean, drop": (
        lambda: Processor(
            OrderingPolicy(out_of_order=1.0, action="drop"), Hopping(10.0, 2.0), Mean(), group_by="key", select=_value
        ),
        False,
    ),
}


def run(make: Callable[[], Processor], calls: Sequence[list[Event]]) -> tuple[Report, int]:
    """Every call plus a flush, timed (bench/timing.py), and how many results came out."""
    processor = make()
    produced = 0
    with timed(sum(len(c) for c in calls), freeze=False) as clock:
        for events in calls:
            clock.taken(len(events))
            out = processor.on_events(events)
            produced += len(out.windows) + len(out.events) + len(out.dead_letters)
        produced += len(processor.flush().windows)
    return clock.report(), produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every shape; the best counts")
    parser.add_argument("--json", action="store_true", help="print {shape: [events/s, results]}")
    args = parser.parse_args()
    events = make_events(args.events)
    batches = [events[i : i + 1000] for i in range(0, len(events), 1000)]
    singles = [[e] for e in events[: len(events) // 4]]  # one per call: a quarter is enough
    best: dict[str, list[float]] = {}
    timed_runs: list[Report] = []
    for _ in range(max(1, args.rounds)):
        for name, (make, one_by_one) in SHAPES.items():
            calls = singles if one_by_one else batches
            report, produced = run(make, calls)
            timed_runs.append(report)
            rate = report.cpu_rate or 0.0  # 0: refused (a span under 90 % of the events)
            if name not in best or rate > best[name][0]:
                best[name] = [rate, produced]
    if args.json:
        print(json.dumps(best))
        return
    print(f"event-time core, {args.events:,} events, best of {args.rounds} (events per CPU second)")
    for name, (rate, produced) in best.items():
        shown = f"{rate:12,.0f}/s" if rate else "no rate: a timed span under 90 % of the events"
        print(f"  {name:36} {shown}   ({produced:,} results)")
        if rate:
            timing.note(f"{name}, events per CPU second", rate)
    print(f"  {coverage_line(timed_runs)}")
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
