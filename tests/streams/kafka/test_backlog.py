"""A backlog on Kafka gives what the records alone give: a topic written by plain
aiokafka, its records' Kafka timestamps an hour old (their arrival times), two streams in
its one partition, read from its start by a worker whose timer period is far shorter than
the read. Until the high-water mark says the partition is read, the agent's clock is the
records' (the quiet stream's windows close by the busy stream's arrivals); once it is, the
wall clock closes the rest."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from streams import StreamProvider
from streams.backends.kafka.clients import ensure_topic
from streams.eventtime import OrderingPolicy, Tumbling
from streams.eventtime.replay import Row
from tests.agents.delivery.conftest import drained
from tests.agents.eventtime.backlog import (
    HOUR,
    NAMESPACE,
    Seen,
    backlog_rows,
    collect,
    counting_type,
    reference,
)

# A tenth of the backlog helpers' times (their window is 10 s, their late arrival 5 s): once
# caught up, the clock moves on from the last arrival read at the wall clock's pace, so the
# windows left open close only after up to a window and a late arrival of it.
WINDOW = Tumbling(1)


def scaled(action: str) -> OrderingPolicy:
    return OrderingPolicy(late_arrival=0.5, out_of_order=0.1, action=action)  # type: ignore[arg-type]


async def write(bootstrap: str, topic: str, rows) -> None:
    """Each row as one JSON record ``{"i": index, "t": event time}``, keyed by its stream,
    its Kafka timestamp its arrival time."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic,
                json.dumps({"i": row.index, "t": row.event_time}).encode(),
                key=str(row.key).encode(),
                partition=0,
                timestamp_ms=round(row.arrival_time * 1000),
            )
            for row in rows
        ]
        for future in sent:
            await future
    finally:
        await producer.stop()


def kafka_provider(bootstrap: str, topic: str, cache_size: int) -> StreamProvider:
    return StreamProvider.kafka(
        bootstrap,
        topic,
        queues=1,
        records="json",
        namespace=NAMESPACE,
        kafka={"idempotent": False, "group_membership": False},
        get_queue_msgs_timer_period=0.001,
        cache_size=cache_size,
        cache_buckets=min(10, cache_size),
    )


@pytest.mark.parametrize("action", ["adjust", "drop", "accept"])
async def test_a_kafka_backlog_an_hour_old_gives_what_the_records_alone_give(kafka_broker, kafka_topic, action):
    rows = backlog_rows(4_000, HOUR, quiet_every=40, seed=17, lags=(0.3, 3.0))  # a third late
    rows = [replace(row, arrival_time=round(row.arrival_time * 1000) / 1000) for row in rows]  # Kafka's ms
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    await write(kafka_broker, kafka_topic, rows)
    provider = kafka_provider(kafka_broker, kafka_topic, 300)  # reads of at most 300 records
    ordering = scaled(action)
    seen = counting_type(provider, action, ordering=replace(ordering, timestamp_by="t"), window=WINDOW, select="i")
    now = time.time()  # the backlog ended an hour before: any later tick closes the same
    expected = {
        key: reference(rows, action, key, ordering=ordering, window=WINDOW, then=now) for key in ("busy", "quiet")
    }
    async with provider:
        await drained(provider, 60)
        with anyio.fail_after(20):  # once caught up, the wall clock closes what is open
            while any(len(seen.get(key, expected[key]).windows) < len(expected[key].windows) for key in expected):
                await anyio.sleep(0.01)
        await collect(provider, seen)
        [agent] = provider.agents
        ticks = agent.ticks
    for key in ("busy", "quiet"):
        assert seen[key].all() == expected[key].all(), key
    assert ticks > 0


@pytest.mark.parametrize("cache_size", [1, 100])
async def test_another_streams_record_between_two_of_a_read_moves_the_clock_for_the_second(
    kafka_broker, kafka_topic, cache_size
):
    # One read gathers busy's two records into one batch; quiet's record stood between them.
    # Under accept busy's second event (1.8 s late) is judged at the clock quiet's record set
    # (watermark base + 2.5): its window [base + 1, base + 2) had closed, so it is
    # dead-lettered, whether the three records come in one read or one by one.
    base = math.floor(time.time() - HOUR)
    rows = [Row(0, base, base, "busy"), Row(1, base + 3, base + 3, "quiet"), Row(2, base + 3.001, base + 1.2, "busy")]
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    await write(kafka_broker, kafka_topic, rows)
    provider = kafka_provider(kafka_broker, kafka_topic, cache_size)
    ordering = scaled("accept")
    seen = counting_type(provider, "accept", ordering=replace(ordering, timestamp_by="t"), window=WINDOW, select="i")
    async with provider:
        await drained(provider, 60)
        with anyio.fail_after(20):  # caught up: the wall clock closes the open windows
            while len(seen.get("quiet", Seen()).windows) < 1:
                await anyio.sleep(0.01)
        await collect(provider, seen)
    expected = reference(rows, "accept", "busy", ordering=ordering, window=WINDOW, then=time.time())
    assert seen["busy"].all() == expected.all()
    assert (seen["busy"].windows, seen["busy"].letters) == ([(base, base + 1, (0,))], [(2, "window_closed")])
    assert seen["quiet"].windows == [(base + 3, base + 4, (1,))]
