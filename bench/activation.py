"""What creating one activation costs, per consumer shape: microseconds and bytes.

A worker with a stream per device makes an activation per stream id, so what
the runtime builds per activation (the adapter around the user's instance, an event-time
processor) is paid 100,000 times. Shapes: a plain ``on_next`` consumer (``as_observer``);
event time with a tumbling count; the same grouped by a field; a windowless consumer that
hands its events off (events wait for the watermark); and the bare ``Processor`` build.

The user's instances are made beforehand: the figures are the runtime's part alone. Time
is the best of ``--rounds`` rounds of ``--n`` activations (each round a ``bench/timing.py``
section; the round fastest by wall clock counts), wall-clock and CPU µs an activation; bytes
are what ``tracemalloc`` counts as still allocated per activation while ``--n`` of them are
alive.

``--against REV`` loads the tree of git revision REV beside the working tree, in this same
process (its modules under their own names, swapped in ``sys.modules`` while it is
imported), and runs both, alternating round by round, so the two are measured side by side.

Run: PYTHONPATH=$PWD .venv/bin/python bench/activation.py [--n 20000] [--rounds 5] [--against main]
     [--profile SHAPE]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import pstats
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # bench.timing, when run as a script

from bench import timing  # noqa: E402
from bench.timing import Report, best, per_call, timed  # noqa: E402

PACKAGES = ("streams", "agents", "cache", "balancer", "spark_sink")
MODULES = ("streams.core.ids", "streams.core.observer", "streams.eventtime")
# Where ``EventTimeObserver`` has lived, newest first: the tree's first that has it is its "observers".
OBSERVER_HOMES = ("agents.event_time_observer", "agents.timed")
# Where ``HandoffTarget`` has lived, newest first: the tree's first that has it is its "handoff".
HANDOFF_HOMES = ("agents.handoff_writes", "agents.output", "agents.handoff", "spark_sink.handoff")

Make = Callable[[Any, Any], object]  # (instance, stream id) -> the activation
Shape = tuple[Callable[[Any], Any], Make]  # (make an instance from a stream id, make its activation)


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in PACKAGES


def load_tree(root: Path) -> dict[str, ModuleType]:
    """The modules the shapes need, imported from the tree at ``root`` (this process's own
    ``streams``/``agents`` modules are put back afterwards)."""
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    try:
        tree = {name: importlib.import_module(name) for name in MODULES}
        tree["handoff"] = _first_home(HANDOFF_HOMES, "HandoffTarget")
        tree["observers"] = _first_home(OBSERVER_HOMES, "EventTimeObserver")
        return tree
    finally:
        sys.path.remove(str(root))
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def _first_home(homes: tuple[str, ...], name: str) -> ModuleType:
    """The first of ``homes`` (module names, newest first) the tree has that defines ``name``."""
    for home in homes:
        try:
            module = importlib.import_module(home)
        except ImportError:
            continue
        if hasattr(module, name):
            return module
    raise ImportError(f"no module of {homes} defines {name}")


def export_tree(rev: str, into: Path) -> Path:
    """The files of git revision ``rev`` (its Python packages) in a new directory."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, *PACKAGES], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


class _Sink:
    """A handoff sink nothing is written to (only activations are made here)."""

    async def write(self, *args: object) -> int:
        return 0

    async def write_events(self, *args: object) -> int:
        return 0


class _Letters:
    async def add(self, letters: object) -> None:
        return None


def shapes(m: dict[str, ModuleType]) -> dict[str, Shape]:
    """Each shape's consumer type, written against the tree of modules ``m``."""
    et, observers, handoff = m["streams.eventtime"], m["observers"], m["handoff"]
    as_observer = m["streams.core.observer"].as_observer
    letters, sink = _Letters(), _Sink()

    class Plain:
        def __init__(self, stream_id: object) -> None:
            self.count = 0

        def on_next(self, batch: list[object]) -> None:
            self.count += len(batch)

        def on_completed(self) -> None:
            pass

    class Windowed:
        event_time = et.EventTime(et.OrderingPolicy(out_of_order=5), et.Tumbling(60), et.Count())

        def __init__(self, stream_id: object) -> None:
            pass

        def on_window(self, result: object) -> None:
            pass

        def on_completed(self) -> None:
            pass

    class Grouped(Windowed):
        event_time = et.EventTime(et.OrderingPolicy(out_of_order=5), et.Tumbling(60), et.Count(), group_by="booth")

    class Handoff:
        event_time = et.EventTime(et.OrderingPolicy(out_of_order=5))
        handoff = "events"

        def __init__(self, stream_id: object) -> None:
            pass

    def timed_of(instance: Any, sid: object) -> object:
        return observers.EventTimeObserver(instance, type(instance).event_time, sid, letters)

    def handed_of(instance: Any, sid: object) -> object:
        target = handoff.HandoffTarget(sink, str(sid), "Handoff", 0, "events")
        return observers.EventTimeObserver(instance, Handoff.event_time, sid, letters, target)

    return {
        "plain on_next": (Plain, lambda instance, sid: as_observer(instance)),
        "windowed count": (Windowed, timed_of),
        "windowed, group_by": (Grouped, timed_of),
        "windowless handoff": (Handoff, handed_of),
        "Processor build": (Windowed, lambda instance, sid: Windowed.event_time.processor(str(sid))),
    }


def measure(m: dict[str, ModuleType], shape: Shape, n: int) -> tuple[Report, float]:
    """``(the timed section's report, bytes per activation)`` for ``n`` activations of ``shape``."""
    cls, make = shape
    sids = [m["streams.core.ids"].StreamId("devices", f"d-{i}") for i in range(n)]
    instances = [cls(sid) for sid in sids]
    pairs = list(zip(instances, sids, strict=True))
    gc.disable()  # a collection in the loop would charge the set-up's garbage to it
    try:
        with timed(n, freeze=False) as clock:  # collects the set-up's garbage first
            made = [make(instance, sid) for instance, sid in pairs]
    finally:
        gc.enable()
    del made
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    made = [make(instance, sid) for instance, sid in pairs]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    size = (after - before - sys.getsizeof(made)) / n  # the list holding them is not theirs
    return clock.report(), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="activations per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per shape; the best time counts")
    parser.add_argument("--against", metavar="REV", help="a git revision to run side by side with the work tree")
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--profile", metavar="SHAPE", help="cProfile the making of SHAPE's activations (work tree)")
    args = parser.parse_args()
    trees: dict[str, dict[str, ModuleType]] = {"this tree": load_tree(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            trees[args.against] = load_tree(export_tree(args.against, Path(tmp)))
        if args.profile:
            _profile(shapes(trees["this tree"])[args.profile], trees["this tree"], args.n)
            return
        wanted = args.shapes.split(",") if args.shapes else None
        made = {label: {k: v for k, v in shapes(m).items() if not wanted or k in wanted} for label, m in trees.items()}
        fastest: dict[tuple[str, str], tuple[Report, float]] = {}
        for r in range(max(1, args.rounds)):
            for name in made["this tree"]:
                order = list(trees.items())
                for label, m in order if r % 2 == 0 else order[::-1]:  # alternating: the same load for both
                    report, size = measure(m, made[label][name], args.n)
                    old = fastest.get((name, label))
                    fastest[(name, label)] = (best([old[0], report]) if old else report, size)
    print(
        f"activation creation, {args.n:,} activations per round, best of {args.rounds} "
        "(µs an activation, wall-clock and CPU, of the round fastest by wall clock; bytes alive)"
    )
    labels = list(trees)
    header = "".join(f" | {label[:12]:>12} wall µs | {'CPU µs':>6} | {'bytes':>6}" for label in labels)
    ratio = f" | {'wall ratio':>10} | {'CPU ratio':>9} | {'bytes ratio':>11}" if len(labels) == 2 else ""
    print(f"  {'shape':22}{header}{ratio}")
    for name in made["this tree"]:
        cells = {label: (per_call(fastest[(name, label)][0]), fastest[(name, label)][1]) for label in labels}
        timing.note(f"{name}, µs wall", cells[labels[0]][0].wall)
        timing.note(f"{name}, µs CPU", cells[labels[0]][0].cpu)
        timing.note(f"{name}, bytes alive", cells[labels[0]][1])
        row = "".join(f" | {us.wall:>20.2f} | {us.cpu:>6.2f} | {size:>6.0f}" for us, size in cells.values())
        if len(labels) == 2:
            (us, size), (us0, size0) = cells[labels[0]], cells[labels[1]]
            row += f" | {us.wall / us0.wall:>9.2f}x | {us.cpu / us0.cpu:>8.2f}x | {size / size0:>10.2f}x"
        print(f"  {name:22}{row}")
    timing.save_run(__file__, {}, params=vars(args))


def _profile(shape: Shape, m: dict[str, ModuleType], n: int) -> None:
    cls, make = shape
    pairs = [(cls(sid), sid) for sid in (m["streams.core.ids"].StreamId("devices", f"d-{i}") for i in range(n))]
    profile = cProfile.Profile()
    profile.enable()
    made = [make(instance, sid) for instance, sid in pairs]
    profile.disable()
    del made
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
