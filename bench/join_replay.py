"""What a crash would replay of an interval join: the records between the queue's persisted
checkpoint and its last record, once everything published has been taken.

Workload: clicks joined to orders of the same user within 60 s after (a left
join), on the embedded store (one queue), 20 users; ``--silent`` of them never order (their
orders input is silent, so their merged watermark never moves). A join whose state is not
saved holds the checkpoint at the oldest event it keeps: a crash replays from there (and,
with a silent input, from its first click, for ever). One whose state is saved with the
checkpoint holds it only at the events taken since the last save.

Run: .venv/bin/python bench/join_replay.py [--records 5000] [--silent 2]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import timing  # noqa: E402
from streams import StreamId, StreamProvider  # noqa: E402
from streams.eventtime import EventTime, OrderingPolicy  # noqa: E402
from streams.eventtime.joins import IntervalJoin  # noqa: E402


def provider_for(path: Path) -> StreamProvider:
    provider = StreamProvider.embedded(path, queues=1, co_partitioned=[("clicks", "orders")])

    @provider.implicit("clicks", "orders")
    class ClickToOrder:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t"),
            inputs=("clicks", "orders"),
            join=IntervalJoin(lower=0, upper=60, how="left"),
        )

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_join(self, pairs: object) -> None: ...

    return provider


async def run(records: int, silent: int, path: Path) -> tuple[int, int]:
    rng = random.Random(35)
    users = [f"u{i}" for i in range(20)]
    quiet = set(users[:silent])
    provider = provider_for(path)
    async with provider:
        for n in range(records):
            user = rng.choice(users)
            namespace = "clicks" if user in quiet or rng.random() < 0.6 else "orders"
            await provider.get_stream(StreamId(namespace, user)).on_next({"t": float(n)})  # a record each
        await provider.drain()
        await anyio.sleep(1.0)  # a few checkpoint periods
        with sqlite3.connect(path / "headrace.db") as conn:
            (checkpoint,) = conn.execute("SELECT seq FROM checkpoints WHERE queue = 0").fetchone() or (-1,)
            (last,) = conn.execute("SELECT MAX(seq) FROM queue_records WHERE queue = 0").fetchone()
    return last, checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000)
    parser.add_argument("--silent", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        last, checkpoint = anyio.run(run, args.records, args.silent, Path(tmp))
    print(
        f"{args.records:,} records, {args.silent} of 20 users silent on orders: checkpoint at {checkpoint:,}, "
        f"last record {last:,}: a crash now replays {last - checkpoint:,} records ({time.perf_counter() - began:.1f} s)"
    )
    silent = f"{args.silent} users silent" if args.silent else "none silent"  # as the page names them
    timing.save_run(__file__, {f"records a crash replays, {silent}": last - checkpoint}, params=vars(args))


if __name__ == "__main__":
    main()
