"""``BatchTaker`` (streams/backends/kafka/fetched.py) takes a fetch's records from its record
batches, reading aiokafka's fetcher: on a real broker, it gives what ``getmany`` gives,
record for record, moves the position as ``getmany`` does, never returns more than asked,
loses nothing across a read that stops inside a batch (then a seek, or a read of one
record), waits as ``getmany`` waits, and leaves a ``read_committed`` read to ``getmany``."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Producer

from streams.backends.kafka.clients import ensure_topic
from streams.backends.kafka.fetched import BatchTaker, KafkaRecord

RECORDS = 500


def write(bootstrap: str, topic: str, codec: str) -> None:
    """``RECORDS`` records on partition 0 by librdkafka, in batches of at most 37: a key on
    most, headers on every third, no value (a tombstone) on every eleventh."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "enable.idempotence": False,
            "linger.ms": 20,
            "batch.num.messages": 37,
        }
    )
    for n in range(RECORDS):
        producer.produce(
            topic,
            None if n % 11 == 0 else b'{"n": %d}' % n,
            key=None if n % 5 == 0 else b"k%d" % (n % 7),
            partition=0,
            timestamp=1_700_000_000_000 + n,
            headers=[("trace", b"t%d" % n), ("empty", None)] if n % 3 == 0 else None,
        )
        producer.poll(0)
    assert producer.flush(30) == 0


def fields(r: KafkaRecord) -> tuple[Any, ...]:
    return (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])


async def consumer_of(bootstrap: str, topic: str, **options: Any) -> tuple[AIOKafkaConsumer, TopicPartition]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **options)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    return consumer, tp


async def by_getmany(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    consumer, tp = await consumer_of(bootstrap, topic)
    out: list[tuple[Any, ...]] = []
    try:
        with anyio.fail_after(30):
            while len(out) < RECORDS:
                for records in (await consumer.getmany(tp, timeout_ms=1000)).values():
                    out += [fields(r) for r in records]
    finally:
        await consumer.stop()
    return out


@pytest.fixture
async def topic(kafka_broker: str, kafka_topic: str, request: pytest.FixtureRequest) -> str:
    await ensure_topic(kafka_broker, kafka_topic, 1)
    codec = getattr(request, "param", "none")
    await anyio.to_thread.run_sync(write, kafka_broker, kafka_topic, codec)
    return kafka_topic


@pytest.mark.parametrize("topic", ["none", "lz4"], indirect=True)
@pytest.mark.parametrize("max_records", [1000, 10])
async def test_it_takes_what_getmany_gives_without_calling_it(kafka_broker: str, topic: str, max_records: int) -> None:
    expected = await by_getmany(kafka_broker, topic)
    assert len(expected) == RECORDS and [r[0] for r in expected] == list(range(RECORDS))
    consumer, tp = await consumer_of(kafka_broker, topic)
    calls = 0
    getmany = consumer.getmany

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await getmany(*args, **kwargs)

    consumer.getmany = counted  # type: ignore[method-assign]
    taker = BatchTaker(consumer)
    taken: list[tuple[Any, ...]] = []
    try:
        with anyio.fail_after(30):  # a record lost would leave the loop waiting for it
            while len(taken) < RECORDS:
                read = await taker.getmany(tp, timeout_ms=1000, max_records=max_records)
                assert sum(len(r) for r in read.values()) <= max_records
                taken += [fields(r) for r in read.get(tp, [])]
                if taken:
                    assert await consumer.position(tp) == taken[-1][0] + 1
        assert taken == expected
        assert calls == 0  # every record came from the batches, none through getmany
        assert await taker.getmany(tp, timeout_ms=0, max_records=max_records) == {}
    finally:
        await consumer.stop()


async def test_a_read_that_stops_inside_a_batch_loses_nothing_after_a_seek_or_a_one_record_read(
    kafka_broker: str, topic: str
) -> None:
    consumer, tp = await consumer_of(kafka_broker, topic)
    taker = BatchTaker(consumer)
    try:
        first = (await taker.getmany(tp, timeout_ms=1000, max_records=5))[tp]  # inside the first batch
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]
        # One record a read goes through getmany, but the batch's other records come first.
        one = (await taker.getmany(tp, timeout_ms=1000, max_records=1))[tp]
        assert [r.offset for r in one] == [5]
        more = (await taker.getmany(tp, timeout_ms=1000, max_records=3))[tp]
        assert [r.offset for r in more] == [6, 7, 8]
        # A seek drops the fetch, and with it the records the read stopped before.
        consumer.seek(tp, 2)
        again: list[int] = []
        with anyio.fail_after(30):
            while len(again) < RECORDS - 2:
                read = await taker.getmany(tp, timeout_ms=1000, max_records=64)
                again += [r.offset for r in read.get(tp, [])]
        assert again == list(range(2, RECORDS))
    finally:
        await consumer.stop()


async def test_a_read_committed_consumer_is_left_to_getmany(kafka_broker: str, topic: str) -> None:
    expected = await by_getmany(kafka_broker, topic)
    consumer, tp = await consumer_of(kafka_broker, topic, isolation_level="read_committed")
    taker = BatchTaker(consumer)
    taken: list[tuple[Any, ...]] = []
    try:
        with anyio.fail_after(30):
            while len(taken) < RECORDS:
                taken += [fields(r) for r in (await taker.getmany(tp, timeout_ms=1000, max_records=100)).get(tp, [])]
        assert taken == expected
        assert all(type(r).__name__ == "ConsumerRecord" for r in (await _one_more(kafka_broker, topic, taker, tp)))
    finally:
        await consumer.stop()


async def _one_more(bootstrap: str, topic: str, taker: BatchTaker, tp: TopicPartition) -> list[KafkaRecord]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", partition=0)
    finally:
        await producer.stop()
    return (await taker.getmany(tp, timeout_ms=5000, max_records=100))[tp]


async def test_it_waits_for_a_fetch_as_getmany_does(kafka_broker: str, topic: str) -> None:
    consumer, tp = await consumer_of(kafka_broker, topic)
    consumer.seek(tp, RECORDS)  # at the end: nothing to read
    taker = BatchTaker(consumer)
    try:
        began = time.monotonic()
        assert await taker.getmany(tp, timeout_ms=300, max_records=100) == {}
        assert 0.25 <= time.monotonic() - began < 3.0
        # A record written while a read waits is what that read returns.
        async with anyio.create_task_group() as tg:
            got: list[list[KafkaRecord]] = []

            async def read() -> None:
                got.append((await taker.getmany(tp, timeout_ms=10_000, max_records=100)).get(tp, []))

            tg.start_soon(read)
            await anyio.sleep(0.2)
            producer = AIOKafkaProducer(bootstrap_servers=kafka_broker, enable_idempotence=False)
            await producer.start()
            await producer.send_and_wait(topic, b"late", partition=0)
            await producer.stop()
        assert [(r.offset, r.value) for r in got[0]] == [(RECORDS, b"late")]
        assert await consumer.position(tp) == RECORDS + 1
    finally:
        await consumer.stop()
