"""Any Kafka-protocol broker: headrace's producers are idempotent where the broker
allows it; the test broker (Tansu) refuses InitProducerId, and headrace falls back to plain
producers, saying so once and naming the setting."""

from __future__ import annotations

import logging
from collections import Counter

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.streams.kafka.test_foreign_records import make_topic

T0 = 1_700_000_000.0


async def test_a_broker_that_refuses_idempotence_gets_plain_producers_and_one_warning(
    kafka_broker, kafka_topic, caplog
):
    await make_topic(kafka_broker, kafka_topic, 2)
    # idempotent left on (the default), which this broker refuses
    provider = StreamProvider.kafka(kafka_broker, kafka_topic, queues=2, kafka={"group_membership": False})
    windows: list[tuple[str, float, int]] = []

    @provider.implicit("sensors")
    class PerSensor:  # saves its windows' state to Kafka: a second producer
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_window(self, result) -> None:
            windows.append((self.key, result.start - T0, result.value))

    caplog.set_level(logging.WARNING, "headrace.kafka")
    async with provider:
        for n in range(30):
            await provider.get_stream(StreamId("sensors", f"s-{n % 3}")).on_next({"t": T0 + n})
        await drained(provider, 30)
        adapter = provider.factory._adapter
        await adapter.changelog._producer_started()  # the state's producer, started the same way
        assert adapter.producers.idempotent is False
    # windows [0, 10) and [10, 20) closed (the newest event of each sensor is past 20)
    expected = Counter((f"s-{n % 3}", n // 10 * 10.0) for n in range(20))
    assert sorted(windows) == sorted((key, start, count) for (key, start), count in expected.items())
    refusals = [r.getMessage() for r in caplog.records if "refused an idempotent producer" in r.getMessage()]
    assert len(refusals) == 1
    assert refusals[0].startswith(
        f"Kafka at {kafka_broker} refused an idempotent producer (InitProducerId: UnknownError"
    )
    assert "set idempotent=false" in refusals[0]
