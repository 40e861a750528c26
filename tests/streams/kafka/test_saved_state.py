"""Open windows no longer hold the committed offset on Kafka: each activation's state is
saved in the provider's compacted changelog topic before the offset that relies on it is
committed, and restored by whichever worker reads the queue next. The
embedded store's counterparts are in tests/end_to_end/durable/test_saved_state.py."""

from __future__ import annotations

import signal

import anyio
import pyarrow as pa
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams import StreamId, StreamProvider
from streams.backends.kafka.adapter import KafkaQueueAdapter
from streams.backends.kafka.changelog import changelog_topic, decode_key
from streams.backends.kafka.handoff_log import KafkaHandoffLog
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import QueueId
from streams.eventtime import Collect, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_saved_state import (
    Distinct,
    assert_held_as_before,
    count_windows,
    publish_quiet_and_busy,
    read_count,
    start_worker,
)


def kafka_provider(bootstrap: str, topic: str) -> StreamProvider:
    """One queue, one worker reading it alone (no group: no rebalance to wait for)."""
    settings = {"idempotent": False, "group_membership": False}
    return StreamProvider.kafka(bootstrap, topic, queues=1, kafka=settings)


async def committed(bootstrap: str, topic: str) -> int | None:
    """The offset the group ``headrace`` has committed for partition 0, as Kafka has it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="headrace", enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()


async def wait_for_commit(bootstrap: str, topic: str, offset: int, seconds: float = 20.0) -> int | None:
    with anyio.move_on_after(seconds):
        while (found := await committed(bootstrap, topic)) != offset:
            await anyio.sleep(0.1)
    return found


async def saved_states(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    """(stream, sequence number, event index) of each state saved for queue 0, read back as
    a worker taking the queue over reads it."""
    changelog = KafkaQueueAdapter(KafkaSettings(bootstrap, topic, queues=1)).changelog
    states = await changelog.load(QueueId(0))
    return sorted((stream, p.sequence_number, p.event_index) for (_, stream), (p, _) in states.items())


async def changelog_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """The changelog topic's configs, as the broker describes them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        name = changelog_topic(KafkaSettings(bootstrap, topic))
        [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    finally:
        await admin.close()
    [(_, _, _, _, entries)] = described.resources
    return {name: value for name, value, *_ in entries}


async def changelog_records(bootstrap: str, topic: str) -> list[tuple[str, bool]]:
    """(stream, is a tombstone) of every record of the changelog's partition 0, in order
    (Tansu does not compact)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(changelog_topic(KafkaSettings(bootstrap, topic)), 0)
        consumer.assign([tp])
        records = []
        while batch := (await consumer.getmany(tp, timeout_ms=500)).get(tp):
            records += [(decode_key(r.key)[2], r.value is None) for r in batch]
        return records
    finally:
        await consumer.stop()


async def handoff_rows(bootstrap: str, prefix: str, stream: str) -> list[dict]:
    """Every row of handoff stream ``stream`` that counts (what Spark reads), queue 0."""
    async with KafkaHandoffLog(bootstrap, prefix) as log:
        _, end = await log.offsets(stream)
        records = await log.records(stream, 0, 0, end[0])
    return [row for record in records if record.valid for row in pa.Table.from_batches(record.batches()).to_pylist()]


async def handed_off(bootstrap: str, prefix: str) -> list[tuple[float, float, int]]:
    """(window start, window end, count) of every row of the ``counts`` handoff stream."""
    rows = await handoff_rows(bootstrap, prefix, "counts")
    return [(r["window_start"].timestamp(), r["window_end"].timestamp(), r["count"]) for r in rows]


async def wait_for_rows(bootstrap: str, prefix: str, rows: int, seconds: float = 20.0) -> None:
    with anyio.move_on_after(seconds):
        while len(await handed_off(bootstrap, prefix)) < rows:
            await anyio.sleep(0.2)


async def test_a_quiet_stream_beside_a_busy_one_does_not_pin_the_committed_offset(kafka_broker, kafka_topic):
    provider = kafka_provider(kafka_broker, kafka_topic)
    closed = count_windows(provider)
    async with provider:
        await publish_quiet_and_busy(provider, 500)  # offsets 0 (quiet), 1..500: 100 windows, the last open
        # The busy stream's last record is committed, though quiet's window [0, 5) is open.
        assert await wait_for_commit(kafka_broker, kafka_topic, 501) == 501
        # Only open state is kept: quiet's window [0, 5) and busy's [495, 500).
        assert await saved_states(kafka_broker, kafka_topic) == [("devices/busy", 500, 0), ("devices/quiet", 0, 0)]
        configs = await changelog_configs(kafka_broker, kafka_topic)
        assert configs["cleanup.policy"] == "compact" and configs["segment.ms"] == "600000"
        # quiet completes: its window closes, nothing is open, its state goes (a tombstone).
        await provider.get_stream(StreamId("devices", "quiet")).on_completed()  # offset 501
        await drained(provider, 30)
        assert await wait_for_commit(kafka_broker, kafka_topic, 502) == 502
        assert await saved_states(kafka_broker, kafka_topic) == [("devices/busy", 500, 0)]
        quiet = [
            tombstone for stream, tombstone in await changelog_records(kafka_broker, kafka_topic) if "quiet" in stream
        ]
        assert quiet == [False, True]  # saved once, then deleted
    assert ("quiet", 0.0, 1) in closed
    busy = [(k, v) for k, _, v in closed if k == "busy"]
    assert len(busy) == 99 and all(v == 5 for _, v in busy)


async def test_a_state_that_cannot_be_saved_holds_the_committed_offset_as_before(kafka_broker, kafka_topic, caplog):
    provider = kafka_provider(kafka_broker, kafka_topic)
    closed = count_windows(provider, Distinct())
    async with provider:
        await publish_quiet_and_busy(provider, 50)
        await anyio.sleep(2.5)  # commit intervals go by
        assert await committed(kafka_broker, kafka_topic) is None  # quiet's window [0, 5) holds offset 0
    # Not even at shutdown: the open windows still need offset 0 on.
    assert await committed(kafka_broker, kafka_topic) is None
    assert await saved_states(kafka_broker, kafka_topic) == []
    assert await changelog_records(kafka_broker, kafka_topic) == []
    assert_held_as_before(closed, caplog)


async def test_sigkill_with_a_one_hour_window_open_resumes_from_the_changelog(tmp_path, kafka_broker, kafka_topic):
    meter = StreamId("meters", "m1")
    client_provider = StreamProvider.kafka(kafka_broker, kafka_topic, queues=1, kafka={"idempotent": False})
    first = start_worker(tmp_path, "run", kafka_broker, kafka_topic)
    try:
        async with client_provider.client() as client:
            for n in range(500):  # offsets 0..499, all in window [0, 3600)
                await client.get_stream(meter).on_next({"t": float(n)})
        assert await wait_for_commit(kafka_broker, kafka_topic, 500) == 500  # not held by the window
        assert await saved_states(kafka_broker, kafka_topic) == [("meters/m1", 499, 0)]
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
    second = start_worker(tmp_path, "run", kafka_broker, kafka_topic)
    try:
        async with client_provider.client() as client:
            await client.get_stream(meter).on_next({"t": 4000.0})  # offset 500 closes [0, 3600)
        replayed = read_count(second)
        await wait_for_rows(kafka_broker, kafka_topic, 1)
    finally:
        second.terminate()
        second.wait()
    # The result of an uninterrupted run (500 events), and the replay was the one new record.
    assert await handed_off(kafka_broker, kafka_topic) == [(0.0, 3600.0, 500)]
    assert replayed == 1


async def stop_with_open_windows(tmp_path, bootstrap: str, topic: str, ending: str, *records: str) -> int:
    """Five meters with one-hour windows open (100 events) on a worker that then ends
    (``sigkill``; ``takeover``: a second worker joins and the first stops without a word, so
    its session runs out); a second worker goes on (10 more events, then each window closes).
    ``records``: the topic's format, when not headrace's. Returns the events the second
    worker read until a window closed, once the five windows are handed off."""
    meters = [StreamId("meters", f"m{i}") for i in range(5)]
    foreign = {"records": records[0], "namespace": "meters"} if records else {}
    client_provider = StreamProvider.kafka(bootstrap, topic, queues=1, kafka={"idempotent": False}, **foreign)

    async def publish(times: list[float]) -> None:
        async with client_provider.client() as client:
            for n, t in enumerate(times):
                await client.get_stream(meters[n % 5]).on_next({"t": t})

    first = start_worker(tmp_path, "run", bootstrap, topic, *records)
    try:
        await publish([float(n) for n in range(100)])  # offsets 0..99: windows [0, 3600) open on five streams
        assert await wait_for_commit(bootstrap, topic, 100) == 100  # not held by the windows
        assert await saved_states(bootstrap, topic) == [(f"meters/m{i}", 95 + i, 0) for i in range(5)]
        if ending == "sigkill":
            first.send_signal(signal.SIGKILL)
            first.wait()
        second = start_worker(tmp_path, "run", bootstrap, topic, *records)
        if ending == "takeover":
            first.send_signal(signal.SIGSTOP)
        try:
            await publish([float(n) for n in range(100, 110)] + [4000.0] * 5)  # 2 more each, then close
            replayed = read_count(second, events=True)
            await wait_for_rows(bootstrap, topic, 5)
        finally:
            second.terminate()
            second.wait()
    finally:
        first.kill()
        first.wait()
    return replayed


async def test_a_queue_taken_over_with_open_windows_loses_and_repeats_nothing(tmp_path, kafka_broker, kafka_topic):
    replayed = await stop_with_open_windows(tmp_path, kafka_broker, kafka_topic, "takeover")
    assert sorted(await handed_off(kafka_broker, kafka_topic)) == [(0.0, 3600.0, 22)] * 5
    assert replayed <= 15  # the new records, not the 100 the first worker had taken


async def test_a_state_kafka_refuses_holds_the_committed_offset_until_it_can_be_saved(
    kafka_broker, kafka_topic, caplog
):
    provider = kafka_provider(kafka_broker, kafka_topic)
    closed: list[tuple[float, int]] = []

    @provider.implicit("logs")
    class Lines:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(100), Collect(), select="line")

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, w):
            closed.append((w.start, len(w.value)))

    adapter = await provider.factory.create_adapter()
    adapter.changelog.max_record_bytes = 4096  # a record larger is refused (by the client here)
    big = provider.get_stream(StreamId("logs", "big"))
    async with provider:
        for n in range(60):  # offsets 0..59 in window [0, 100): 60 lines of 200 bytes
            await big.on_next({"t": float(n), "line": f"{n:03}" + "x" * 197})
            if n == 9:
                await drained(provider, 30)
                assert await wait_for_commit(kafka_broker, kafka_topic, 10) == 10  # 2 KB: saved
        await drained(provider, 30)
        await anyio.sleep(2.5)  # commit intervals go by
        # Held where the state last fit: the saved state holds the events up to it, and the
        # committed offset is not past them.
        [(stream, position, _)] = await saved_states(kafka_broker, kafka_topic)
        assert stream == "logs/big" and 9 <= position < 30
        assert await committed(kafka_broker, kafka_topic) == position + 1
        await big.on_next({"t": 150.0, "line": "last"})  # offset 60 closes [0, 100)
        await drained(provider, 30)
        # The state is small again (the new window's one line): saved, and the offset goes on.
        assert await wait_for_commit(kafka_broker, kafka_topic, 61) == 61
        assert await saved_states(kafka_broker, kafka_topic) == [("logs/big", 60, 0)]
    assert closed == [(0.0, 60)]
    refused = [r.getMessage() for r in caplog.records if "Kafka refused its saved event-time state" in r.getMessage()]
    again = [r.getMessage() for r in caplog.records if "is saved again" in r.getMessage()]
    assert len(refused) == 1 and "MessageSizeTooLarge" in refused[0] and len(again) == 1
