"""Throughput of the embedded queue adapter: producer insert rates and receiver read rate.

Run: ``.venv/bin/python bench/embedded_queue.py [--records N]``. Every figure is measured in
this run, side by side, on fresh stores in a temporary directory; a record is one batch
container of ``--events`` small events.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/streams.py would shadow the package

from bench import timing  # noqa: E402
from bench.timing import Report, coverage_line, cpu_figure, figure, timed  # noqa: E402
from streams.backends.embedded.adapter import EmbeddedAdapterFactory, EmbeddedQueueAdapter  # noqa: E402
from streams.backends.embedded.store import Synchronous  # noqa: E402
from streams.core.batch import BatchContainer, BatchKind  # noqa: E402
from streams.core.ids import StreamId  # noqa: E402

QUEUES = 8
STREAMS = 64


def _payloads(events: int) -> list[tuple[StreamId, bytes]]:
    out = []
    for s in range(STREAMS):
        sid = StreamId("bench", f"device-{s}")
        values = [{"device": s, "reading": i * 0.5, "ok": True} for i in range(events)]
        out.append((sid, BatchContainer(sid, BatchKind.DATA, time.time(), values).encode()))
    return out


async def _sequential(adapter: EmbeddedQueueAdapter, items: list, n: int) -> None:
    for i in range(n):
        queue, sid, payload = items[i % len(items)]
        await adapter.queue_message_batch(queue, sid, payload)


async def _concurrent(adapter: EmbeddedQueueAdapter, items: list, n: int, producers: int = 32) -> None:
    async def producer(k: int) -> None:
        for i in range(k, n, producers):
            queue, sid, payload = items[i % len(items)]
            await adapter.queue_message_batch(queue, sid, payload)

    async with anyio.create_task_group() as tg:
        for k in range(producers):
            tg.start_soon(producer, k)


async def _batched(adapter: EmbeddedQueueAdapter, items: list, n: int, size: int = 500) -> None:
    for start in range(0, n, size):
        await adapter.queue_message_batches([items[i % len(items)] for i in range(start, min(n, start + size))])


async def _read_all(adapter: EmbeddedQueueAdapter) -> int:
    total = 0
    for queue in adapter.mapper.get_all_queues():
        receiver = adapter.create_receiver(queue)
        await receiver.initialize()
        while batch := await receiver.get_queue_messages(1000):
            total += len(batch)
            await receiver.messages_delivered([m.token for m in batch])
        await receiver.shutdown()
    return total


async def _rate(
    synchronous: Synchronous,
    write: Callable[[EmbeddedQueueAdapter, list, int], Awaitable[None]],
    n: int,
    events: int,
    read: bool = False,
) -> tuple[Report, Report | None]:
    with tempfile.TemporaryDirectory() as path:
        async with EmbeddedAdapterFactory(path, QUEUES, synchronous=synchronous) as factory:
            adapter = await factory.create_adapter()
            mapper = factory.get_queue_mapper()
            items = [(mapper.get_queue_for_stream(sid), sid, p) for sid, p in _payloads(events)]
            with timed(n, freeze=False) as clock:  # the writer's calls, to the last one committed
                await write(adapter, items, n)
            write_rate, read_rate = clock.report(), None
            if read:
                with timed(n, freeze=False) as clock:  # the only task: nothing else to starve
                    got = await _read_all(adapter)
                read_rate = clock.report()
                assert got == n, (got, n)
            return write_rate, read_rate


async def main(records: int, events: int) -> None:
    print(f"embedded queue adapter: {QUEUES} queues, {STREAMS} streams, {events} events per record, rates in records/s")
    rows = []
    for sync in ("NORMAL", "FULL"):
        # FULL fsyncs every commit: fewer records keep the unbatched runs short.
        n_single = records if sync == "NORMAL" else max(200, records // 20)
        seq, _ = await _rate(sync, _sequential, n_single, events)
        conc, _ = await _rate(sync, _concurrent, records, events)
        bat, read = await _rate(sync, _batched, records, events, read=True)
        rows.append((sync, seq, conc, bat, read))
    print(f"{'synchronous':<12}{'sequential':>12}{'32 concurrent':>15}{'batches of 500':>16}{'read':>12}")
    for sync, seq, conc, bat, read in rows:
        for shape, r in (
            ("one at a time", seq),
            ("32 concurrent producers", conc),
            ("batches of 500", bat),
            ("read", read),
        ):
            if r is not None and r.rate is not None:
                timing.note(f"{shape}, {sync}, records/s", r.rate)
        for label, rate in ((sync, figure), ("  per CPU s", cpu_figure)):
            read_text = rate(read) if read else "-"
            print(f"{label:<12}{rate(seq):>12}{rate(conc):>15}{rate(bat):>16}{read_text:>12}")
    print(coverage_line(r for row in rows for r in row[1:] if r is not None))
    normal, full = [[r.rate or math.nan for r in row[1:4]] for row in rows]
    print(
        f"ratios: concurrent/sequential (group commit) NORMAL {normal[1] / normal[0]:.1f}x, "
        f"batched/sequential NORMAL {normal[2] / normal[0]:.1f}x; "
        f"NORMAL/FULL sequential {normal[0] / full[0]:.1f}x, batched {normal[2] / full[2]:.1f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=10)
    args = parser.parse_args()
    anyio.run(main, args.records, args.events)
    timing.save_run(__file__, {}, params=vars(args))
