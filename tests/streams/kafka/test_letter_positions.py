"""Every letter from a topic names its record: partition and offset, the same
however a read grouped the records, so a replay grouped otherwise letters nothing twice,
and ``headrace dlq list/show`` say partition and offset."""

from __future__ import annotations

import json

import anyio

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.kafka_fixtures import json_provider
from tests.streams.cli.helpers import headrace
from tests.streams.kafka.test_foreign_records import make_topic, produce

T0 = 1_700_000_000_000


def record(n: int) -> tuple:
    value = {"n": n} if n % 5 == 3 else {"n": n, "ts": T0 + n * 1000}  # n = 3, 8, 13, ...: no time
    return (b"d-1", json.dumps(value).encode(), 0, None, None)


def windowed(bootstrap: str, topic: str, store, group: str) -> StreamProvider:
    provider = json_provider(bootstrap, topic, queues=2, namespace="sensors", group_id=group, store=store)

    @provider.implicit("sensors")
    class PerDevice:
        event_time = EventTime(OrderingPolicy(timestamp_by="ts", unit="ms"), Tumbling(10), Count())

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, result) -> None:
            pass

    return provider


async def test_invalid_timestamps_are_lettered_at_partition_and_offset_once_over_a_regrouped_replay(
    kafka_broker, kafka_topic, tmp_path
):
    await make_topic(kafka_broker, kafka_topic, 2)
    store = tmp_path / "store"
    bad = [n for n in range(40) if n % 5 == 3]
    # First read: two halves, each grouped from its own first record.
    await produce(kafka_broker, kafka_topic, *[record(n) for n in range(20)])
    async with windowed(kafka_broker, kafka_topic, store, "first") as provider:
        await drained(provider, 30)
        await produce(kafka_broker, kafka_topic, *[record(n) for n in range(20, 40)])
        await drained(provider, 30)
        first = await provider.dead_letters.list("invalid_timestamp")
    assert sorted((d.queue, d.sequence_number, d.event_index) for d in first) == [(0, n, 0) for n in bad]
    assert all(f"record offset {d.sequence_number}" in d.detail for d in first)
    # A replay under another group reads all forty at once: grouped otherwise, the same letters.
    async with windowed(kafka_broker, kafka_topic, store, "replay") as provider:
        await drained(provider, 30)
        again = await provider.dead_letters.list("invalid_timestamp")
        assert await provider.dead_letters.count() == len(bad)
    assert sorted((d.queue, d.sequence_number) for d in again) == [(0, n) for n in bad]

    (tmp_path / "headrace.toml").write_text(
        f'[provider]\nadapter = "kafka"\nqueues = 2\npath = "store"\n'
        f'[provider.kafka]\nbootstrap_servers = "{kafka_broker}"\ntopic = "{kafka_topic}"\nrecords = "json"\n'
    )
    listed = await anyio.to_thread.run_sync(lambda: headrace("dlq", "list", cwd=tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert "partition:offset" in listed.stdout
    rows = [line.split() for line in listed.stdout.splitlines() if "invalid_timestamp" in line]
    assert [row[3] for row in rows] == [f"0:{n}" for n in bad]
    letter_id = rows[0][0]
    shown = await anyio.to_thread.run_sync(lambda: headrace("dlq", "show", letter_id, cwd=tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "partition:  0\n" in shown.stdout and f"offset:     {bad[0]}\n" in shown.stdout


async def test_a_failed_delivery_letters_each_event_at_its_records_offset(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic, 2)
    await produce(kafka_broker, kafka_topic, *[record(n) for n in range(20)])  # record n at offset n
    provider = json_provider(
        kafka_broker,
        kafka_topic,
        queues=2,
        namespace="sensors",
        max_event_delivery_time=0.3,
        delivery_retry_backoff=0.01,
    )

    @provider.implicit("sensors")
    class Refuses:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:
            if any(e.value["n"] == 13 for e in batch):
                raise ValueError("not 13")

    async with provider:
        await drained(provider, 30)
        letters = await provider.dead_letters.list("delivery_failed")
    assert letters and any(d.value["n"] == 13 for d in letters)
    # each event's letter stands at its record: partition 0, offset n, index 0
    assert all((d.queue, d.sequence_number, d.event_index) == (0, d.value["n"], 0) for d in letters)
