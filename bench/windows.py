"""Event-time core benchmark: a tumbling count per key through ``streams.eventtime.Processor``
against the dict-of-counts loop a user would write by hand, on the same events, in one run.

Workload: 100 keys, 1 million events one millisecond apart, 5 % of them out of order (up to
2 s behind), out-of-order tolerance 1 s (later ones are adjusted), 10 s tumbling windows,
batches of 1000 events as the runtime delivers them. Both sides must produce the same windows.

Run: .venv/bin/python bench/windows.py [--events N] [--rounds R]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import Stopwatch  # noqa: E402
from streams.core.batch import Event  # noqa: E402
from streams.core.ids import StreamId  # noqa: E402
from streams.core.tokens import SequenceToken  # noqa: E402
from streams.eventtime import OrderingPolicy, Processor, Tumbling  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; best of each kept")
    args = parser.parse_args()
    batches = make_batches(args.events)
    hand_best = core_best = math.inf
    for _ in range(max(1, args.rounds)):  # alternate, so both sides see the same machine load
        with Stopwatch() as hand_watch:
            expected = hand_loop(batches)
        with Stopwatch() as core_watch:
            got = core(batches)
        hand_best = min(hand_best, hand_watch.seconds)
        core_best = min(core_best, core_watch.seconds)
    if sorted(got, key=repr) != sorted(expected, key=repr):
        raise SystemExit("the core and the hand loop disagree: the benchmark is void")
    n = args.events
    core_rate, hand_rate = n / core_best, n / hand_best
    print(f"tumbling count per key: {n:,} events, {KEYS} keys, 5 % out of order, {len(got):,} windows")
    print(f"best of {args.rounds} alternating rounds:")
    print(f"  core      {core_rate:12,.0f} events/s   ({core_best:.2f} s)")
    print(f"  hand loop {hand_rate:12,.0f} events/s   ({hand_best:.2f} s)")
    print(f"  ratio core/hand: {core_rate / hand_rate:.2f}")


if __name__ == "__main__":
    main()
