"""Event-time core benchmark: a tumbling count per key through ``streams.eventtime.Processor``
against the dict-of-counts loop a user would write by hand, on the same events, in one run;
then, on the same events, session windows, an interval join, dedup, windows of events and
sliding windows.

Workload: 100 keys, 1 million events one millisecond apart, 5 % of them out of order (up to
2 s behind), out-of-order tolerance 1 s (later ones are adjusted), 10 s tumbling windows,
batches of 1000 events as the runtime delivers them. Both sides must produce the same windows.
Sessions: a count per key with a 0.3 s gap (a key's events come 0.1 s apart on average).
Join: the batches alternate between a left and a right input, each left event joined to the
right events of its key in ``[l.ts, l.ts + 1 s]`` (inner). State bytes per key: the open
state's size in memory (deep, at the end of the run, before the flush) over the keys; for the
windows, also their snapshot (what the embedded store and the Kafka changelog keep).

Run: .venv/bin/python bench/windows.py [--events N] [--rounds R]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import timing  # noqa: E402
from bench.timing import Report, best, coverage_line, cpu_figure, figure, timed  # noqa: E402
from streams.core.batch import Event  # noqa: E402
from streams.core.ids import (
    SequenceToken,  # noqa: E402
    StreamId,  # noqa: E402
)
from streams.eventtime import (  # noqa: E402
    Count,
    Dedup,
    IntervalJoin,
    OrderingPolicy,
    Processor,
    Session,
    Sliding,
    Tumbling,
)

KEYS = 100
SIZE = 10.0  # window size, seconds
DELAY = 1.0  # out-of-order tolerance, seconds
BATCH = 1000


def make_batches(n: int, seed: int = 7) -> list[list[Event]]:
    rng = random.Random(seed)
    sid = StreamId("bench", "windows")
    keys = [{"key": f"k{i}"} for i in range(KEYS)]
    events = []
    for i in range(n):
        arrival = i * 0.001
        late = rng.random() < 0.05
        event_time = arrival - rng.uniform(0.0, 2.0) if late else arrival
        token = SequenceToken(i // BATCH, i % BATCH)
        events.append(Event(keys[rng.randrange(KEYS)], event_time, arrival, token, sid))
    return [events[i : i + BATCH] for i in range(0, n, BATCH)]


def core(batches: list[list[Event]]) -> list[tuple[str, float, int]]:
    processor = Processor(OrderingPolicy(out_of_order=DELAY), Tumbling(SIZE), group_by="key")
    results = []
    for batch in batches:
        results.extend(processor.on_events(batch).windows)
    return [(w.key, w.start, w.value) for w in results]


def hand_loop(batches: list[list[Event]]) -> list[tuple[str, float, int]]:
    """What a user writes without the core: a dict of counts per (window, key), the newest
    event time minus the tolerance as the watermark, closed windows emitted as it passes."""
    counts: dict[tuple[float, str], int] = {}
    results = []
    newest = watermark = -math.inf
    next_close = math.inf
    for batch in batches:
        for event in batch:
            ts = event.event_time
            if ts < watermark:
                ts = watermark
            window = ts // SIZE
            slot = (window, event.value["key"])
            counts[slot] = counts.get(slot, 0) + 1
            end = (window + 1) * SIZE
            if end < next_close:
                next_close = end
            if ts > newest:
                newest = ts
                watermark = ts - DELAY
                if watermark >= next_close:
                    done = [s for s in counts if (s[0] + 1) * SIZE <= watermark]
                    for s in sorted(done, key=lambda s: s[0]):
                        results.append((s[1], s[0] * SIZE, counts.pop(s)))
                    next_close = min(((s[0] + 1) * SIZE for s in counts), default=math.inf)
    return results


GAP = 0.3  # session gap (and sliding span), seconds
DEDUP = 60.0  # dedup horizon, seconds
EVENTS = 100  # events per counted window
_token = attrgetter("token")  # a dedup key unique to each event
UPPER = 1.0  # join interval [l.ts, l.ts + UPPER]


def counting(
    window: Tumbling | Session | Sliding, dedup: Dedup | None = None
) -> Callable[[list[list[Event]]], tuple[Processor, int]]:
    """A count per key in ``window``s over the batches: the processor and the windows it emitted."""

    def run(batches: list[list[Event]]) -> tuple[Processor, int]:
        processor = Processor(OrderingPolicy(out_of_order=DELAY), window, Count(), group_by="key", dedup=dedup)
        emitted = 0
        for batch in batches:
            emitted += len(processor.on_events(batch).windows)
        return processor, emitted

    return run


def join(batches: list[list[Event]]) -> tuple[Processor, int]:
    processor = Processor(
        OrderingPolicy(out_of_order=DELAY), None, group_by="key", inputs=("l", "r"), join=IntervalJoin(0.0, UPPER)
    )
    pairs = 0
    for i, batch in enumerate(batches):
        pairs += len(processor.on_events(batch, "r" if i % 2 else "l").joins)
    return processor, pairs


def deep_size(obj: object, seen: set[int] | None = None) -> int:
    """Bytes of ``obj`` and everything it holds (shared objects once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep_size(item, seen) for item in obj)
    else:
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                size += deep_size(getattr(obj, name), seen)
        if hasattr(obj, "__dict__"):
            size += deep_size(vars(obj), seen)
    return size


def state_bytes(processor: Processor) -> tuple[float, float | None]:
    """(bytes in memory, bytes of its snapshot) per key of the open state."""
    stores = processor._flow.stores()
    shared = {id(processor._flow.shape.reducer), id(None)}
    memory = sum(deep_size(store, set(shared)) for store in stores)
    snap = None if processor.merged is not None else len(processor.snapshot())
    return memory / KEYS, None if snap is None else snap / KEYS


def shapes(batches: list[list[Event]], rounds: int) -> None:
    """Tumbling, sessions and the join on the same events: events/s and state per key."""
    n = sum(len(b) for b in batches)
    print(f"{n:,} events, {KEYS} keys, 5 % out of order (tolerance {DELAY:g} s), best of {rounds}:")
    print(
        f"  {'shape':34} {'events/s':>12} {'per CPU s':>12} {'results':>9} {'state B/key':>12} {'snapshot B/key':>15}"
    )
    timed_runs: list[Report] = []
    for name, run in (
        (f"tumbling {SIZE:g} s count", counting(Tumbling(SIZE))),
        (f"session gap {GAP:g} s count", counting(Session(GAP))),
        # Every event its own id: what dedup costs when nothing is a duplicate.
        (f"tumbling {SIZE:g} s, dedup {DEDUP:g} s", counting(Tumbling(SIZE), Dedup(key=_token, within=DEDUP))),
        (f"tumbling {EVENTS} events count", counting(Tumbling(events=EVENTS))),
        (f"sliding {GAP:g} s count", counting(Sliding(GAP))),
        (f"interval join [0, {UPPER:g} s], inner", join),
    ):
        reports = []
        for _ in range(max(1, rounds)):
            with timed(n, freeze=False) as clock:
                processor, results = run(batches)
            reports.append(clock.report())
        memory, snap = state_bytes(processor)
        snapshot = "-" if snap is None else f"{snap:,.0f}"
        fastest = best(reports)
        if fastest.rate is not None:
            timing.note(f"{name.strip()}, events/s", fastest.rate)
        timing.note(f"{name.strip()}, state bytes a key", memory)
        print(
            f"  {name:34} {figure(fastest):>12} {cpu_figure(fastest):>12} {results:9,} {memory:12,.0f} {snapshot:>15}"
        )
        timed_runs += reports
    print(f"  {coverage_line(timed_runs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; best of each kept")
    args = parser.parse_args()
    batches = make_batches(args.events)
    n = args.events
    hands, cores = [], []
    for _ in range(max(1, args.rounds)):  # alternate, so both sides see the same machine load
        with timed(n, freeze=False) as clock:  # a synchronous loop: timed from its start to its end
            expected = hand_loop(batches)
        hands.append(clock.report())
        with timed(n, freeze=False) as clock:
            got = core(batches)
        cores.append(clock.report())
    if sorted(got, key=repr) != sorted(expected, key=repr):
        raise SystemExit("the core and the hand loop disagree: the benchmark is void")
    core_run, hand_run = best(cores), best(hands)
    print(f"tumbling count per key: {n:,} events, {KEYS} keys, 5 % out of order, {len(got):,} windows")
    print(f"best of {args.rounds} alternating rounds:")
    for name, run in (("core", core_run), ("hand loop", hand_run)):
        print(
            f"  {name:9} {figure(run):>12} events/s   ({run.wall:.2f} s)  "
            f"{cpu_figure(run):>12} per CPU s  ({run.cpu:.2f} s)"
        )
    if core_run.rate and hand_run.rate and core_run.cpu_rate and hand_run.cpu_rate:
        print(
            f"  ratio core/hand: {timing.note('tumbling count / hand loop', core_run.rate / hand_run.rate):.2f} "
            f"({core_run.cpu_rate / hand_run.cpu_rate:.2f} per CPU second)"
        )
    print(f"  {coverage_line(cores + hands)}")
    shapes(batches, args.rounds)
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
