"""What sampling observed lateness and disorder costs the per-event path, and the sketch's memory.

The same events (``bench/windows.py``'s: 100 keys, 5 % out of order, batches of 1000) go
through ``streams.eventtime.Processor`` in two shapes: a tumbling count per key (the usual
consumer) and a windowless ordering policy (the cheapest per-event path, where a fixed cost
weighs the most). Each shape runs, alternating round by round, best of ``--rounds``:

- ``base``: the tree of ``--against`` (default: this branch's base, before the sketch);
- ``off``: this tree, no sketch (the per-event identity test runs, never true);
- ``every 256``: this tree sampling one event in 256 (the runtime's default);
- ``every 64``: one event in 64;
- ``every 1``: every event sampled (the worst case).

Each round is a ``bench/timing.py`` section; the figures compare this process's CPU time (what
the other processes on the machine take is not ours), and the wall-clock time of the same
rounds is printed beside it. Each side's best round (by CPU time), and the median over rounds
of its CPU time over the reference's (``base``) in the same round: on a shared machine single
rounds move by several percent.

Memory: a sketch filled over two hours of arrivals (every ring slot in use), as
``size_bytes`` counts it and as ``tracemalloc`` sees it, without and with kept substreams.

Run: PYTHONPATH=$PWD .venv/bin/python bench/lateness.py [--events 200000] [--rounds 7] [--against REV]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import timing  # noqa: E402
from bench.activation import ROOT, export_tree, load_tree  # noqa: E402
from bench.timing import Report, per_call, timed  # noqa: E402
from bench.windows import make_batches  # noqa: E402
from streams import eventtime  # noqa: E402
from streams.eventtime.lateness import MAX_SUBSTREAMS, LatenessSketch  # noqa: E402

Run = Callable[[list[list[Any]]], Report]


def runner(m: ModuleType, shape: str, every: int | None) -> Run:
    """The timed run of every batch through a new processor of ``shape`` (of module tree ``m``)."""

    def run(batches: list[list[Any]]) -> Report:
        policy = m.OrderingPolicy(out_of_order=1.0)
        if shape == "tumbling":
            p = m.Processor(policy, m.Tumbling(10.0), group_by="key")
        else:
            p = m.Processor(policy)
        if every is not None:
            p.sample_times(LatenessSketch(every))
        with timed(sum(len(batch) for batch in batches), freeze=False) as clock:
            for batch in batches:
                p.on_events(batch)
        return clock.report()

    return run


def base_revision() -> str:
    """Where this branch left main: the tree before the sketch."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "log", "--format=%H", "-1", "--", "streams/eventtime/ingest.py", ":!*"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def memory() -> None:
    rnd = random.Random(5)
    for label, subs in (("no substreams", 0), (f"{MAX_SUBSTREAMS} substreams kept", MAX_SUBSTREAMS)):
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        sketch = LatenessSketch(every=1, substreams=subs)
        arrival = 0.0
        for i in range(200_000):  # two hours of arrivals, 0.036 s apart
            arrival += 0.036
            t = arrival - rnd.expovariate(0.5)
            sketch.record(arrival, t, arrival, f"k{i % 50}" if subs else None)
        traced = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        print(f"  sketch, {label}: size_bytes {sketch.size_bytes():,} B; tracemalloc {traced:,} B (200,000 samples)")
        for _ in range(200_000):
            arrival += 0.036
            sketch.record(arrival, arrival - 1.0, arrival, "k1" if subs else None)
        print(f"    after 200,000 more samples: size_bytes {sketch.size_bytes():,} B")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", metavar="REV", help="the tree to compare with (default: the branch's base)")
    args = parser.parse_args()
    rev = (
        args.against
        or subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True
        ).stdout.strip()
    )
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if not args.against and rev == head:
        rev = ""  # on main itself there is no base to compare with: pass --against REV
    batches = make_batches(args.events)
    with tempfile.TemporaryDirectory() as tmp:
        base = load_tree(export_tree(rev, Path(tmp)))["streams.eventtime"] if rev else None
        print(f"{args.events:,} events, batches of 1000, best of {args.rounds}; base: {rev[:10] or 'none'}")
        for shape in ("tumbling", "ordering only"):
            sides: dict[str, Run] = {}
            if base is not None:
                sides["base"] = runner(base, shape, None)
            sides |= {
                "off": runner(eventtime, shape, None),
                "every 256": runner(eventtime, shape, 256),
                "every 64": runner(eventtime, shape, 64),
                "every 1": runner(eventtime, shape, 1),
            }
            reports: dict[str, list[Report]] = {name: [] for name in sides}
            for _ in range(args.rounds):
                for name, run in sides.items():
                    reports[name].append(run(batches))
            first = next(iter(sides))
            reference = min(r.cpu for r in reports[first])
            cells = []
            for name, rs in reports.items():
                fastest = min(rs, key=lambda r: r.cpu)  # the best round by CPU time
                ns = per_call(fastest, scale=1e9)
                timing.note(f"{shape}, {name}, ns an event", ns.cpu)
                # the round's ratio to the reference's same round (neighbours in time), median
                ratios = sorted(r.cpu / ref.cpu for r, ref in zip(rs, reports[first]))
                cells.append(
                    f"{name} {ns.cpu:,.0f} ns CPU, {ns.wall:,.0f} wall (best {(fastest.cpu / reference - 1) * 100:+.1f} %, "
                    f"median of rounds {(ratios[len(ratios) // 2] - 1) * 100:+.1f} %)"
                )
            print(f"  {shape}: per event " + "; ".join(cells))
    memory()
    timing.save_run(__file__, {}, params={**vars(args), "against": rev})


if __name__ == "__main__":
    main()
