"""Several inputs on co-partitioned Kafka topics: Kafka's partitioner places by
key, so ``@provider.implicit("tolls", "prices")`` needs no ``co_partitioned``; one activation
per key merges both topics' streams into one clock."""

from __future__ import annotations

import json

from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy
from tests.agents.delivery.conftest import drained
from tests.streams.kafka.test_foreign_records import QUEUES, make_topic, produce

T0 = 1_700_000_000.0
PLAZAS = [f"plaza-{p}" for p in range(3)]


async def test_prices_from_one_topic_release_tolls_from_another_in_event_time(kafka_broker, kafka_topic):
    tolls, prices = f"{kafka_topic}-tolls", f"{kafka_topic}-prices"
    await make_topic(kafka_broker, tolls)
    await make_topic(kafka_broker, prices)
    await produce(
        kafka_broker,
        prices,
        *[
            (p.encode(), json.dumps({"t": T0 + t, "price": 10.0 * i + t}).encode(), None, None, None)
            for t in (0, 10)
            for i, p in enumerate(PLAZAS)
        ],
    )
    await produce(
        kafka_broker,
        tolls,
        *[
            (p.encode(), json.dumps({"t": T0 + n + 0.5, "n": n}).encode(), None, None, None)
            for n in range(15)
            for p in PLAZAS
        ],
    )
    provider = StreamProvider.kafka(
        kafka_broker,
        topics={"tolls": tolls, "prices": prices},
        queues=QUEUES,
        records="json",
        kafka={"idempotent": False, "group_membership": False},
    )
    built: list[StreamId] = []
    priced: dict[str, list[tuple[int, float]]] = {}

    @provider.implicit("tolls", "prices")  # no co_partitioned: the partitioner places by key
    class PricedTolls:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"))

        def __init__(self, stream_id):
            built.append(stream_id)
            self.key, self.price = stream_id.key, None

        def on_events(self, events):
            for e in events:
                if e.record.stream_id.namespace == "prices":
                    self.price = e.record.value["price"]
                else:
                    priced.setdefault(self.key, []).append((e.record.value["n"], self.price))

    async with provider:
        await drained(provider, 30)
    assert sorted(built) == [StreamId("tolls", p) for p in PLAZAS]  # one activation per key
    # prices stand at 10: tolls up to 9.5 are released, each with the price of t=0
    assert priced == {p: [(n, 10.0 * i) for n in range(10)] for i, p in enumerate(PLAZAS)}
