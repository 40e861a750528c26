"""``headrace demo``: the runtime at work in one process, on generated sensor data.

Generator queues make readings for many sensor streams; a worker's pulling agents deliver
them to an implicit consumer per stream that keeps a running mean; the demo prints a
summary that reconciles what was generated with what was delivered.
"""

from __future__ import annotations

import argparse
import time

import anyio

from ..adapters.generator import GeneratorConfig
from ..ids import StreamId
from ..provider import StreamProvider

EXAMPLES = """examples:
  headrace demo
  headrace demo --streams 500 --events 2000
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the pipeline on generated data and print a summary",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--streams", type=int, default=200, help="sensor streams (default 200)")
    parser.add_argument("--events", type=int, default=500, help="readings per stream (default 500)")
    parser.add_argument("--queues", type=int, default=8, help="queues (default 8)")


def run(args: argparse.Namespace) -> int:
    if args.streams < 1 or args.events < 1 or args.queues < 1:
        raise ValueError("--streams, --events and --queues must be positive")
    return anyio.run(_demo, args.streams, args.events, args.queues)


async def _demo(streams: int, events: int, queues: int) -> int:
    config = GeneratorConfig(
        namespace="sensors",
        streams=streams,
        events_per_stream=events,
        batch_size=50,
        make_value=lambda sid, n: {"sensor": sid.key, "n": n, "temp": 20.0 + ((int(sid.key) * 31 + n * 7) % 100) / 10},
    )
    provider = StreamProvider.generator(config, queues=queues)
    means: dict[str, tuple[int, float]] = {}
    completed: set[str] = set()

    @provider.implicit("sensors")
    class RunningMean:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key
            self.n, self.total = 0, 0.0

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            for value in batch.values:
                self.n += 1
                self.total += value["temp"]
            means[self.key] = (self.n, self.total / self.n)

        def on_completed(self) -> None:
            completed.add(self.key)

    started = time.perf_counter()
    async with provider:
        with anyio.fail_after(600):
            await provider.drain()
        agents = provider.agents
    elapsed = time.perf_counter() - started
    delivered = sum(n for n, _ in means.values())
    generated = streams * events
    print(f"headrace demo: {streams} sensor streams over {queues} queues, {events} readings each")
    print(f"  agents: {len(agents)}, batches read: {sum(a.read_messages for a in agents)}")
    print(f"  generated {generated:,} readings, delivered {delivered:,}, streams completed {len(completed)}")
    print(f"  {delivered / elapsed:,.0f} readings/s end to end")
    sample = sorted(means)[:3]
    for key in sample:
        n, mean = means[key]
        print(f"  sensors/{key}: {n} readings, mean {mean:.2f}")
    ok = delivered == generated and len(completed) == streams
    print("  reconciled: every generated reading was delivered exactly once" if ok else "  MISMATCH")
    return 0 if ok else 1
