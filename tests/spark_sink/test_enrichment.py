"""As-of enrichment over two inputs: tolls enriched with the price in force at
their event time, prices importing the tolls' watermark, handed to Spark through an
``EventHandoff``; the worker is SIGKILLed mid-stream and another takes over. Spark then
reads every toll once, each with the price a computation in the test gives."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
from pyspark.sql import functions as F

from streams import StreamId, StreamProvider
from tests.helpers import handoff_count, start_worker, wait_until
from tests.spark_sink.enrichment_worker import HANDOFF

WORKER = Path(__file__).with_name("enrichment_worker.py")

BASE = 1_700_000_000.0
BOOTHS = [f"b{i}" for i in range(4)]
TOLLS = 60  # per booth, one a second
Item = tuple[str, str, dict]  # (namespace, booth, payload)


def traffic() -> list[Item]:
    """Per booth: a price every 10 s (set just before), tolls at n + 0.5 s; booths interleaved."""
    items: list[Item] = []
    for n in range(TOLLS):
        for i, booth in enumerate(BOOTHS):
            if n % 10 == 0:
                items.append(("prices", booth, {"t": BASE + n, "price": 100.0 * i + n}))
            items.append(("tolls", booth, {"t": BASE + n + 0.5, "booth": booth, "n": n}))
    return items


def expected(items: list[Item]) -> list[tuple[str, int, str, int, float]]:
    in_force: dict[str, float] = {}
    rows = []
    for namespace, booth, v in items:  # published in event-time order per booth
        if namespace == "prices":
            in_force[booth] = v["price"]
        else:
            rows.append((f"tolls/{booth}", round(v["t"] * 1e6), booth, v["n"], in_force[booth]))
    return rows


async def publish(path: Path, items: list[Item], complete: bool = False) -> None:
    async with StreamProvider.embedded(path, queues=2, co_partitioned=[("tolls", "prices")]).client() as client:
        for namespace, booth, value in items:
            await client.get_stream(StreamId(namespace, booth)).on_next(value)
        if complete:
            for booth in BOOTHS:
                await client.get_stream(StreamId("tolls", booth)).on_completed()
                await client.get_stream(StreamId("prices", booth)).on_completed()


def test_enriched_tolls_reach_spark_each_once_with_the_price_in_force_across_a_kill(spark, tmp_path):
    items = traffic()
    cut = len(items) // 2
    first = start_worker(WORKER, tmp_path)
    try:
        anyio.run(publish, tmp_path, items[:cut])
        wait_until(lambda: handoff_count(tmp_path, HANDOFF) >= 40, 30)
        before = handoff_count(tmp_path, HANDOFF)
        first.send_signal(signal.SIGKILL)  # mid-stream: tolls held, a handoff perhaps in flight
        first.wait()
    finally:
        first.kill()
    assert 40 <= before < len(expected(items))
    anyio.run(publish, tmp_path, items[cut:])  # while no worker runs
    second = start_worker(WORKER, tmp_path)
    try:
        anyio.run(publish, tmp_path, [], True)
        wait_until(lambda: handoff_count(tmp_path, HANDOFF) >= len(expected(items)), 60)
        time.sleep(0.5)  # a duplicate would come now
    finally:
        second.terminate()
        second.wait()

    df = spark.read.format("headrace").option("path", str(tmp_path)).option("stream", HANDOFF).load()
    assert (
        df.schema.simpleString() == "struct<event_time:timestamp,stream_id:string,booth:string,n:bigint,price:double>"
    )
    rows = [tuple(r) for r in df.select("stream_id", F.unix_micros("event_time"), "booth", "n", "price").collect()]
    want = expected(items)
    assert len(rows) == len(want)  # none twice
    assert sorted(rows) == sorted(want)  # none missing, each with the price in force
