"""The Kafka adapter against a real Kafka-protocol broker (Tansu, started by the fixtures).

What is Kafka-specific is tested here: the topic's layout, where records land, offsets
committed to Kafka, the start position, and outages. The behaviour every adapter shares is
in the contract suite (``tests/streams/adapters``), which runs on this adapter too.
"""

from __future__ import annotations

import inspect
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams import StreamProvider
from streams.adapters.protocols import QueueAdapter, RewindableReceiver
from streams.backends.kafka.adapter import KafkaAdapterFactory
from streams.backends.kafka.backend import KafkaBackend
from streams.backends.kafka.clients import ensure_queue_topics, ensure_topic
from streams.backends.kafka.settings import KAFKA_SETTINGS, KafkaSettings
from streams.backends.kafka.state_receiver import KafkaStateReceiver
from streams.core.batch import BatchContainer, BatchKind, QueueMessage
from streams.core.errors import ConfigurationError, DecodeError, QueueAdapterError
from streams.core.ids import QueueId, StreamId
from streams.runtime import config
from streams.runtime.config_schema import SCHEMA
from tests.kafka_broker import TansuBroker, TansuProxy, free_port, produce_raw
from tests.streams.adapters.harness import drain

QUEUES = 4
Q0 = QueueId(0)


@asynccontextmanager
async def kafka(bootstrap: str, topic: str, **settings: Any) -> AsyncIterator[KafkaAdapterFactory]:
    settings.setdefault("queues", QUEUES)
    settings.setdefault("idempotent", False)  # Tansu's memory storage has no producer ids
    async with KafkaAdapterFactory(KafkaSettings(bootstrap, topic, **settings)) as factory:
        yield factory


@asynccontextmanager
async def receiving(factory: KafkaAdapterFactory, queue: QueueId) -> AsyncIterator[KafkaStateReceiver]:
    receiver = (await factory.create_adapter()).create_receiver(queue)
    await receiver.initialize()
    try:
        yield receiver
    finally:
        await receiver.shutdown()


async def drain_queue(factory: KafkaAdapterFactory, queue: QueueId) -> list[QueueMessage]:
    """What a new receiver of ``queue`` reads, acknowledging nothing."""
    async with receiving(factory, queue) as receiver:
        return await drain(receiver)


def streams_on(factory: KafkaAdapterFactory, queue: QueueId, count: int) -> list[StreamId]:
    mapper = factory.get_queue_mapper()
    candidates = (StreamId("kafka", f"s{n}") for n in range(10_000))
    return [sid for sid in candidates if mapper.get_queue_for_stream(sid) == queue][:count]


async def publish(factory: KafkaAdapterFactory, sid: StreamId, values: list[Any]) -> None:
    adapter = await factory.create_adapter()
    payload = BatchContainer(sid, BatchKind.DATA, 1.0, values).encode()
    await adapter.queue_message_batch(factory.get_queue_mapper().get_queue_for_stream(sid), sid, payload)


def values(messages: list[QueueMessage]) -> list[Any]:
    return [v for m in messages for v in BatchContainer.decode(m.payload).values]


async def committed_in_kafka(bootstrap: str, topic: str, group_id: str, queue: QueueId) -> int | None:
    """The group's committed offset for the queue, as another Kafka client sees it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False)
    await consumer.start()
    try:
        committed: int | None = await consumer.committed(TopicPartition(topic, queue.number))
        return committed
    finally:
        await consumer.stop()


# -- the topic ------------------------------------------------------------------------------


async def test_an_absent_topic_is_created_with_one_partition_per_queue(kafka_broker: str, kafka_topic: str) -> None:
    async with kafka(kafka_broker, kafka_topic, queues=5) as factory:
        adapter = await factory.create_adapter()
        assert isinstance(adapter, QueueAdapter) and adapter.is_rewindable
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker)
    await admin.start()
    try:
        [described] = await admin.describe_topics([kafka_topic])
    finally:
        await admin.close()
    assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2, 3, 4]
    async with kafka(kafka_broker, kafka_topic, queues=5) as again:  # an existing, right topic
        await again.create_adapter()


async def test_a_topic_with_another_partition_count_is_refused(kafka_broker: str, kafka_topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(kafka_topic, 3, 1)])
    finally:
        await admin.close()
    async with kafka(kafka_broker, kafka_topic, queues=4) as factory:
        with pytest.raises(ConfigurationError, match=r"has 3 partitions but queues=4: use queues=3"):
            await factory.create_adapter()


async def test_topics_read_together_with_different_partition_counts_are_refused(
    kafka_broker: str, kafka_topic: str
) -> None:
    other = f"{kafka_topic}-b"
    assert await ensure_topic(kafka_broker, other, 3) == 3
    settings = KafkaSettings(kafka_broker, kafka_topic, queues=4, records="json", topics={"a": kafka_topic, "b": other})
    with pytest.raises(
        ConfigurationError,
        match=rf"^topics read together must have as many partitions each \(queue i reads partition i of every "
        rf"topic\): '{kafka_topic}' has 4, '{other}' has 3$",
    ):
        await ensure_queue_topics(settings)
    assert await ensure_topic(kafka_broker, kafka_topic, 9) == 4  # created, as asked


def test_settings_are_checked_when_they_are_made() -> None:
    with pytest.raises(ConfigurationError, match="start is 'earliest' or 'latest', not 'middle'"):
        KafkaSettings("127.0.0.1:9", "t", start="middle")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="queues is a positive int, not 0"):
        KafkaSettings("127.0.0.1:9", "t", queues=0)
    for bad in (0, -2.5, True, "6s"):  # seconds, a number above 0
        with pytest.raises(ConfigurationError, match=rf"^session_timeout is seconds > 0 .*, not {bad!r}$"):
            KafkaSettings("127.0.0.1:9", "t", session_timeout=bad)  # type: ignore[arg-type]
    assert KafkaSettings("127.0.0.1:9", "t").session_timeout == 10.0
    with pytest.raises(ConfigurationError, match="commit_every"):
        KafkaSettings.named("127.0.0.1:9", "t", commit_every=3)
    with pytest.raises(
        ConfigurationError, match=r"^StreamProvider.kafka: unknown keyword 'commit_every'; it takes queues, "
    ):
        StreamProvider.kafka("127.0.0.1:9", "t", commit_every=3)


def test_the_kafka_settings_are_declared_once_as_the_fields_of_kafka_settings() -> None:
    # docs/architecture.md says so: the provider's constructor, the backend and the adapter
    # factory name none of them, and [provider.kafka]'s keys are their names.
    takers = [StreamProvider.kafka, KafkaBackend.open, KafkaAdapterFactory]
    assert [set(inspect.signature(f).parameters) & set(KAFKA_SETTINGS) for f in takers] == [set(), set(), set()]
    keys = {config._KAFKA_FIELD.get(key, key) for key in SCHEMA["provider.kafka"]}
    assert sorted(keys - {"bootstrap_servers", "topic", *KAFKA_SETTINGS}) == []


# -- where records land ---------------------------------------------------------------------


async def test_each_stream_goes_to_the_partition_of_its_mapped_queue(kafka_broker: str, kafka_topic: str) -> None:
    streams = [StreamId("placement", str(n)) for n in range(40)]
    async with kafka(kafka_broker, kafka_topic) as factory:
        for round_ in range(3):
            for sid in streams:
                await publish(factory, sid, [round_])
        mapper = factory.get_queue_mapper()

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker, auto_offset_reset="earliest")
    await consumer.start()
    partitions: dict[str, set[int]] = defaultdict(set)
    try:
        consumer.assign([TopicPartition(kafka_topic, p) for p in range(QUEUES)])
        with anyio.fail_after(20):
            while sum(map(len, partitions.values())) < len(streams) or not all(
                len(p) == 1 for p in partitions.values()
            ):
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    for record in records:
                        assert record.key is not None
                        partitions[record.key.decode()].add(tp.partition)
                if len(partitions) == len(streams):
                    break
    finally:
        await consumer.stop()
    assert partitions == {str(sid): {mapper.get_queue_for_stream(sid).number} for sid in streams}
    assert len({p for ps in partitions.values() for p in ps}) == QUEUES  # all queues in use


async def test_streams_keep_their_order_when_produced_concurrently(kafka_broker: str, kafka_topic: str) -> None:
    async with kafka(kafka_broker, kafka_topic) as factory:
        adapter = await factory.create_adapter()
        streams = streams_on(factory, Q0, 5)

        async def one_stream(sid: StreamId) -> None:
            for n in range(0, 30, 3):  # three records at a time, then one by one
                await adapter.queue_message_batches(
                    [(Q0, sid, BatchContainer(sid, BatchKind.DATA, 1.0, [n + i]).encode()) for i in range(3)]
                )

        async with anyio.create_task_group() as tg:
            for sid in streams:
                tg.start_soon(one_stream, sid)

        async with receiving(factory, Q0) as receiver:
            messages = await drain(receiver, batch=7)
    per_stream: dict[StreamId, list[int]] = defaultdict(list)
    for m in messages:
        container = BatchContainer.decode(m.payload)
        per_stream[container.stream_id].extend(container.values)
    assert per_stream == {sid: list(range(30)) for sid in streams}
    assert [m.sequence_number for m in messages] == list(range(150))


# -- offsets in Kafka -----------------------------------------------------------------------


async def test_acknowledged_offsets_are_committed_to_kafka_and_a_restart_resumes_there(
    kafka_broker: str, kafka_topic: str
) -> None:
    group = f"{kafka_topic}-group"
    async with kafka(kafka_broker, kafka_topic, group_id=group) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        for n in range(10):
            await publish(factory, sid, [n])
        async with receiving(factory, Q0) as receiver:
            first = await drain(receiver)
            await receiver.messages_delivered([m.token for m in first[:4]])
            await receiver.messages_delivered([m.token for m in first[4:6]])
        assert await committed_in_kafka(kafka_broker, kafka_topic, group, Q0) == 6

    async with kafka(kafka_broker, kafka_topic, group_id=group) as factory:
        resumed = await drain_queue(factory, Q0)
    assert values(first) == list(range(10))
    assert [m.sequence_number for m in resumed] == [6, 7, 8, 9]
    assert [m.payload for m in resumed] == [m.payload for m in first[6:]]


async def test_unacknowledged_records_are_read_again_after_a_restart(kafka_broker: str, kafka_topic: str) -> None:
    for attempt in range(2):
        async with kafka(kafka_broker, kafka_topic) as factory:
            if attempt == 0:
                (sid,) = streams_on(factory, Q0, 1)
                for n in range(5):
                    await publish(factory, sid, [n])
            assert values(await drain_queue(factory, Q0)) == [0, 1, 2, 3, 4]
    assert await committed_in_kafka(kafka_broker, kafka_topic, "headrace", Q0) is None


async def test_commits_are_throttled_and_flushed_on_shutdown(kafka_broker: str, kafka_topic: str) -> None:
    group = f"{kafka_topic}-group"
    async with kafka(kafka_broker, kafka_topic, group_id=group, commit_interval=3600) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        for n in range(6):
            await publish(factory, sid, [n])
        receiver = (await factory.create_adapter()).create_receiver(Q0)
        await receiver.initialize()
        messages = await drain(receiver)
        await receiver.messages_delivered([m.token for m in messages[:2]])  # the first commit
        await receiver.messages_delivered([m.token for m in messages[2:5]])  # within the hour
        assert await committed_in_kafka(kafka_broker, kafka_topic, group, Q0) == 2  # not 5 yet
        await receiver.shutdown()  # as when the queue moves to another worker
        assert await committed_in_kafka(kafka_broker, kafka_topic, group, Q0) == 5


async def test_the_queues_of_a_worker_take_their_commits_in_turn(kafka_broker: str, kafka_topic: str) -> None:
    """A commit interval is divided among the queues: queue 0 commits at its first
    acknowledgement, queue 2 of 4 half an interval on, so that the queues of a worker do not
    all wait on Kafka at once."""
    group = f"{kafka_topic}-group"
    async with kafka(kafka_broker, kafka_topic, group_id=group, queues=4, commit_interval=3600) as factory:
        q2 = QueueId(2)
        for queue in (Q0, q2):
            (sid,) = streams_on(factory, queue, 1)
            for n in range(3):
                await publish(factory, sid, [n])
        first = (await factory.create_adapter()).create_receiver(Q0)
        third = (await factory.create_adapter()).create_receiver(q2)
        for receiver in (first, third):
            await receiver.initialize()
            messages = await drain(receiver)
            await receiver.messages_delivered([m.token for m in messages[:2]])
        assert await committed_in_kafka(kafka_broker, kafka_topic, group, Q0) == 2
        assert await committed_in_kafka(kafka_broker, kafka_topic, group, q2) is None  # its turn: in 30 min
        for receiver in (first, third):
            await receiver.shutdown()
        assert await committed_in_kafka(kafka_broker, kafka_topic, group, q2) == 2


@pytest.mark.parametrize(("start", "expected"), [("earliest", [0, 1, 2, 3]), ("latest", [2, 3])])
async def test_with_no_committed_offset_reading_starts_as_configured(
    kafka_broker: str, kafka_topic: str, start: str, expected: list[int]
) -> None:
    async with kafka(kafka_broker, kafka_topic, start=start) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        await publish(factory, sid, [0])
        await publish(factory, sid, [1])
        async with receiving(factory, Q0) as receiver:
            await publish(factory, sid, [2])
            await publish(factory, sid, [3])
            assert values(await drain(receiver)) == expected


# -- rewind and foreign records -------------------------------------------------------------


async def test_read_range_rewinds_with_its_own_consumer(kafka_broker: str, kafka_topic: str) -> None:
    async with kafka(kafka_broker, kafka_topic) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        for n in range(8):
            await publish(factory, sid, [n])
        async with receiving(factory, Q0) as receiver:
            assert isinstance(receiver, RewindableReceiver)
            assert values(await receiver.get_queue_messages(5)) == [0, 1, 2, 3, 4]
            assert values(await receiver.read_range(-10, 3)) == [0, 1, 2]  # from the oldest
            assert values(await receiver.read_range(6, 100)) == [6, 7]
            assert await receiver.read_range(8, 10) == []
            assert values(await drain(receiver)) == [5, 6, 7]  # the position did not move


async def test_records_from_other_writers_come_back_raw_with_their_offsets(kafka_broker: str, kafka_topic: str) -> None:
    garbage, foreign = b"\xc1 not msgpack", msgpack.packb({"event": "not ours"})
    async with kafka(kafka_broker, kafka_topic) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        await publish(factory, sid, ["before"])
        await produce_raw(kafka_broker, kafka_topic, 0, garbage, foreign, None)
        await publish(factory, sid, ["after"])
        messages = await drain_queue(factory, Q0)
    assert [(m.queue, m.sequence_number) for m in messages] == [(Q0, n) for n in range(5)]
    assert [m.payload for m in messages[1:4]] == [garbage, foreign, b""]  # b"": a tombstone
    for message in messages[1:4]:
        with pytest.raises(DecodeError):
            BatchContainer.decode(message.payload)
    assert values([messages[0], messages[4]]) == ["before", "after"]
    assert all(m.enqueued_time is not None and m.enqueued_time > 1e9 for m in messages)


# -- outages --------------------------------------------------------------------------------


@pytest.fixture
def reachable_broker() -> Any:
    """A broker of its own behind a proxy: stopping the proxy is the broker going away
    (with its data kept, which Tansu's memory storage would lose on a real restart)."""
    with TansuBroker() as broker, TansuProxy(broker) as proxy:
        yield proxy


async def test_an_outage_is_logged_once_and_nothing_is_lost(
    reachable_broker: TansuProxy, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fast = {"outage_after": 0.3, "request_timeout": 1.0, "commit_interval": 0}
    async with kafka(reachable_broker.bootstrap, kafka_topic, **fast) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        adapter = await factory.create_adapter()
        async with receiving(factory, Q0) as receiver:
            for n in range(3):
                await publish(factory, sid, [n])
            before = await drain(receiver)
            await receiver.messages_delivered([m.token for m in before])

            await anyio.to_thread.run_sync(reachable_broker.stop)
            for _ in range(4):  # reads during the outage back off and find nothing
                assert await receiver.get_queue_messages(10) == []
            assert adapter.outage.ongoing

            produced: list[int] = []

            async def produce_through_the_outage() -> None:
                for n in range(3, 6):
                    await publish(factory, sid, [n])
                    produced.append(n)

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce_through_the_outage)
                await anyio.sleep(1.5)
                assert produced == []  # the first send is still being retried
                await anyio.to_thread.run_sync(reachable_broker.start)
            assert produced == [3, 4, 5]
            with anyio.fail_after(20):
                after: list[QueueMessage] = []
                while len(after) < 3:
                    after += await receiver.get_queue_messages(10)
            await receiver.messages_delivered([m.token for m in after])
    assert values(before) == [0, 1, 2]
    assert values(after) == [3, 4, 5]
    assert [m.sequence_number for m in before + after] == list(range(6))
    assert await committed_in_kafka(reachable_broker.bootstrap, kafka_topic, "headrace", Q0) == 6
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["headrace.kafka", "headrace.kafka"]  # aiokafka's: DEBUG
    assert "is unreachable" in warnings[0].getMessage()
    assert "is reachable again" in warnings[1].getMessage()
    assert adapter.outage.outages == 1


async def test_a_receiver_shut_down_while_its_fetch_backs_off_stops_cleanly(
    reachable_broker: TansuProxy, kafka_topic: str
) -> None:
    """aiokafka's consumer, stopped while a failed fetch waits out its back-off, raises that
    fetch's cancellation into the caller; the receiver's shutdown absorbs it and returns, and
    what was read stays read."""
    backoff = {"client_options": {"retry_backoff_ms": 3000}}
    async with kafka(reachable_broker.bootstrap, kafka_topic, **backoff) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        receiver = (await factory.create_adapter()).create_receiver(Q0)
        await receiver.initialize()
        await publish(factory, sid, [1, 2])
        read: list[QueueMessage] = []
        with anyio.fail_after(20):
            while not read:
                read = await receiver.get_queue_messages(10)
        assert values(read) == [1, 2]
        await anyio.to_thread.run_sync(reachable_broker.stop)
        try:
            await receiver.get_queue_messages(10)  # its fetch fails and backs off for 3 s
            await anyio.sleep(0.5)
            with anyio.fail_after(10):
                await receiver.shutdown()  # raised CancelledError before stop_client
        finally:
            await anyio.to_thread.run_sync(reachable_broker.start)


async def test_an_unreachable_broker_fails_with_a_clear_error_after_the_give_up_time(
    kafka_topic: str,
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    async with kafka(nowhere, kafka_topic, give_up_after=0.5, request_timeout=0.3) as factory:
        with pytest.raises(QueueAdapterError, match=rf"Kafka at {nowhere} has been unreachable for \d+ s"):
            await factory.create_adapter()


async def test_a_group_that_kafka_consumers_joined_is_refused_with_a_clear_error(
    kafka_broker: str, kafka_topic: str
) -> None:
    group = f"{kafka_topic}-shared"
    async with kafka(kafka_broker, kafka_topic, group_id=group, commit_interval=0) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        await publish(factory, sid, [1])
        member = AIOKafkaConsumer(
            kafka_topic,
            bootstrap_servers=kafka_broker,
            group_id=group,
            session_timeout_ms=1000,  # Tansu settles a first join within about half of it
            heartbeat_interval_ms=300,
        )
        await member.start()
        try:
            with anyio.fail_after(20):
                while not member.assignment():
                    await anyio.sleep(0.05)  # until the member has joined the group
            async with receiving(factory, Q0) as receiver:
                messages = await drain(receiver)
                with pytest.raises(QueueAdapterError, match="must not be used by consumers that join"):
                    await receiver.messages_delivered([m.token for m in messages])
        finally:
            await member.stop()
