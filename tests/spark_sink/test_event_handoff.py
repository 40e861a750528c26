"""A windowless consumer hands its events to Spark in timestamp order, once the watermark has
passed them, and each event once, across a worker restart that replays held events."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import anyio
import pytest
from pyspark.sql import functions as F

from spark_sink import EventHandoff, Handoff
from streams import StreamId, StreamProvider
from streams.core.errors import ConfigurationError
from streams.eventtime import EventTime, OrderingPolicy, Tumbling

STREAM = "readings"
BASE = 1_700_000_000
Reading = tuple[str, int, float]  # (stream id, event time in µs, value)


def worker(path: Path) -> StreamProvider:
    provider = StreamProvider.embedded(path, queues=2)

    @provider.implicit("sensors")
    class Readings:
        event_time = EventTime(OrderingPolicy(timestamp_by="t", out_of_order=10))
        handoff = EventHandoff(STREAM, {"sensor": "string", "value": "double"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    return provider


def readings() -> list[tuple[str, dict]]:
    """Six sensors, 150 readings each, in arrival order; times jitter by up to 4 s, within
    the 10 s out-of-order tolerance (nothing is adjusted)."""
    rng = random.Random(8)
    out = []
    for j in range(150):
        for sensor in range(6):
            t = BASE + j * 2 + rng.uniform(-4, 4)
            out.append((f"s{sensor}", {"t": t, "sensor": f"s{sensor}", "value": float(j * 10 + sensor)}))
    return out


async def publish(provider: StreamProvider, items: list[tuple[str, dict]], complete: bool = False) -> None:
    for sensor, value in items:
        await provider.get_stream(StreamId("sensors", sensor)).on_next(value)
    if complete:
        for sensor in sorted({s for s, _ in items}):
            await provider.get_stream(StreamId("sensors", sensor)).on_completed()


def test_events_reach_spark_in_timestamp_order_each_once_across_a_restart(spark, tmp_path):
    items = readings()
    first, second = items[: len(items) // 2], items[len(items) // 2 :]

    async def run() -> None:
        async with worker(tmp_path) as provider:
            await publish(provider, first)
            with anyio.fail_after(30):
                await provider.drain()
        # Stopped with events the watermark has not passed: the checkpoint stays at the oldest
        # of them, so the next worker replays from there, including events already handed off.
        async with worker(tmp_path) as provider:
            await publish(provider, second, complete=True)
            with anyio.fail_after(30):
                await provider.drain()

    anyio.run(run)
    df = spark.read.format("headrace").option("path", str(tmp_path)).option("stream", STREAM).load()
    assert df.schema.simpleString() == "struct<event_time:timestamp,stream_id:string,sensor:string,value:double>"
    rows = [tuple(r) for r in df.select("stream_id", F.unix_micros("event_time"), "sensor", "value").collect()]
    expected = [(f"sensors/{s}", round(v["t"] * 1e6), v["sensor"], v["value"]) for s, v in items]
    assert sorted(rows) == sorted(expected)  # every event, each once
    times: dict[str, list[int]] = defaultdict(list)
    for stream_id, t, _, _ in rows:  # a partition's rows, in the order they were handed off
        times[stream_id].append(t)
    assert all(ts == sorted(ts) for ts in times.values())
    assert len(times) == 6


@pytest.mark.parametrize(
    ("event_time", "handoff", "message"),
    [
        (EventTime(OrderingPolicy()), Handoff("x", {"n": "bigint"}), "hands off windows .* has no window"),
        (
            EventTime(OrderingPolicy(), Tumbling(10)),
            EventHandoff("x", {"n": "bigint"}),
            "hands off events .* has a window",
        ),
        (None, EventHandoff("x", {"n": "bigint"}), "has no event_time"),
    ],
)
def test_a_handoff_the_event_time_cannot_feed_is_refused(tmp_path, event_time, handoff, message):
    provider = StreamProvider.embedded(tmp_path, queues=1)

    @provider.implicit("sensors")
    class Mismatched:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        async def on_next(self, batch) -> None:
            pass

    Mismatched.handoff = handoff
    if event_time is not None:
        Mismatched.event_time = event_time

    async def start() -> None:
        async with provider:
            pass

    with pytest.raises(ConfigurationError, match=message):
        anyio.run(start)


def test_window_rows_carry_their_stream_so_one_key_of_two_streams_stays_apart(spark, tmp_path):
    provider = StreamProvider.embedded(tmp_path, queues=2)

    @provider.implicit("plazas")
    class BoothCounts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(60), group_by="booth")
        handoff = Handoff("booth-counts", {"cars": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    async def run() -> None:
        async with provider:
            for plaza, cars in [("p1", 3), ("p2", 5)]:
                stream = provider.get_stream(StreamId("plazas", plaza))
                await stream.on_next_batch([{"t": BASE + n, "booth": "b0"} for n in range(cars)])
                await stream.on_completed()
            with anyio.fail_after(30):
                await provider.drain()

    anyio.run(run)
    df = spark.read.format("headrace").option("path", str(tmp_path)).option("stream", "booth-counts").load()
    assert df.schema.simpleString() == (
        "struct<window_start:timestamp,window_end:timestamp,stream_id:string,key:string,cars:bigint,"
        "final:boolean,revision:bigint>"
    )
    rows = sorted(tuple(r) for r in df.select("stream_id", "key", "cars").collect())
    assert rows == [("plazas/p1", "b0", 3), ("plazas/p2", "b0", 5)]
