"""Durable subscriptions in the cluster's compacted topic: what one store writes, another
(another machine's) reads; a fault and an unsubscribe are seen the same way."""

from __future__ import annotations

from streams import StreamId
from streams.backends.kafka.pubsub import KafkaPubSubStore, pubsub_topic
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import SequenceToken
from streams.core.pubsub import SubscriptionRecord, SubscriptionState


async def test_subscriptions_written_by_one_store_are_read_by_another(kafka_broker, kafka_topic):
    settings = KafkaSettings(kafka_broker, kafka_topic, idempotent=False)
    here, there = KafkaPubSubStore(settings), KafkaPubSubStore(settings, freshness=0.0)
    a, b = StreamId("sensors", "s-1"), StreamId("sensors", "s-2")
    try:
        await here.add_subscription(SubscriptionRecord("sub-1", a, "Averager", SequenceToken(7, 2)))
        await here.add_subscription(SubscriptionRecord("sub-2", b, "Averager"))
        assert [r.subscription_id for r in await there.subscriptions(a)] == ["sub-1"]
        assert (await there.subscriptions(a))[0].start_token == SequenceToken(7, 2)
        await there.fault_subscription("sub-2")
        await here.remove_subscription("sub-1")
        assert [(r.subscription_id, r.state) for r in await there.subscriptions()] == [
            ("sub-2", SubscriptionState.FAULTED)
        ]
        await here.refresh()
        assert [r.state for r in await here.subscriptions(b)] == [SubscriptionState.FAULTED]
        # The topic: compacted, one record a change, the unsubscribe a tombstone.
        records = await here.log.read(0)
        assert [(r.key, r.value is None) for r in records] == [
            (b"sub-1", False),
            (b"sub-2", False),
            (b"sub-2", False),
            (b"sub-1", True),
        ]
        assert here.log.topic == pubsub_topic(settings) == f"headrace.pubsub.{kafka_topic}"
    finally:
        await here.close()
        await there.close()
