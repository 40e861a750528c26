"""Publishing to Kafka with send and flush, through an outage."""

from __future__ import annotations

from typing import Any

import anyio
import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams import PublishError, StreamId, StreamProvider
from tests.kafka_broker import TansuBroker, TansuProxy


@pytest.fixture
def reachable_broker() -> Any:
    with TansuBroker() as broker, TansuProxy(broker) as proxy:
        yield proxy


async def stored_values(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Any]:
    """The event values in the topic's batch containers: read until ``expected`` of them,
    then once more for anything beyond (Tansu's end offsets are off after batched writes)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        values: list[Any] = []
        with anyio.fail_after(20):
            while len(values) < expected:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values += [v for r in records for v in msgpack.unpackb(r.value)[5]]
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            values += [v for r in records for v in msgpack.unpackb(r.value)[5]]
        return values
    finally:
        await consumer.stop()


async def test_send_while_the_broker_is_down_makes_flush_raise_with_the_count_and_loses_nothing_flushed(
    reachable_broker: TansuProxy, kafka_topic: str
) -> None:
    settings = {"idempotent": False, "give_up_after": 1.5, "request_timeout": 0.5}
    provider = StreamProvider.kafka(reachable_broker.bootstrap, kafka_topic, queues=2, kafka=settings)
    sids = [StreamId("s", str(n)) for n in range(4)]
    async with provider.client():
        for n in range(10):
            await provider.get_stream(sids[n % 4]).send(n)
        await provider.flush()  # durable: these must survive what follows
        await anyio.to_thread.run_sync(reachable_broker.stop)
        for n in range(100, 107):
            await provider.get_stream(sids[n % 4]).send(n)  # buffered: returns at once
        with pytest.raises(PublishError) as failed:
            await provider.flush()
        await anyio.to_thread.run_sync(reachable_broker.start)
        await provider.get_stream(sids[0]).send(200)  # the broker is back: sends work again
    assert failed.value.failed == 7
    assert "unreachable" in str(failed.value)
    assert sorted(await stored_values(reachable_broker.bootstrap, kafka_topic, 2, 11)) == [*range(10), 200]
