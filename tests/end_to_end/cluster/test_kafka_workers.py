"""``headrace worker`` processes on one Kafka topic share its partitions through Kafka's
consumer group: two split them, a third gets some, one leaving (SIGTERM) hands its queues
over, a killed one's move after the session timeout; under continuous production every event
is delivered and no queue is ever read by two workers at the same moment."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from streams import StreamProvider
from tests.end_to_end.cluster.test_workers import Cluster, Producer, assert_nothing_lost_and_no_overlap, spread_over
from tests.end_to_end.cluster.worker_app import QUEUES

SESSION = 3.0  # the group's session timeout, seconds: how soon a killed worker's queues move
ACTIVE = 1.0  # a queue whose receiver was called this recently is being read


class KafkaCluster(Cluster):
    """Workers of ``tests.end_to_end.cluster.kafka_worker_app``; who reads which queue comes from their
    receivers' call records (an agent calls its receiver every poll)."""

    def __init__(self, tmp_path: Path, bootstrap: str, topic: str) -> None:
        super().__init__(tmp_path)
        self.env |= {
            "HEADRACE_TEST_KAFKA": bootstrap,
            "HEADRACE_TEST_TOPIC": topic,
            "HEADRACE_TEST_LEASE": str(SESSION),
        }

    def launch(self, name: str, *options: str):  # type: ignore[no-untyped-def]
        return super().launch(
            name, *(options or ("--app", "tests.end_to_end.cluster.kafka_worker_app:app", "--name", name))
        )

    def owners(self) -> dict[int, str]:
        now = time.time()
        return {
            queue: worker
            for queue, spans in self.tenures().items()
            for _, end, worker in spans[-1:]
            if now - end < ACTIVE
        }


@asynccontextmanager
async def two_workers_producing(cluster: KafkaCluster, bootstrap: str, topic: str) -> AsyncIterator[Producer]:
    """Workers ``w1`` and ``w2`` of ``cluster`` sharing ``topic``'s queues, a producer publishing
    to it (its first 100 events in once they share); every worker stopped on the way out."""
    client = StreamProvider.kafka(bootstrap, topic, queues=QUEUES, kafka={"idempotent": False})
    try:
        async with client.client(), anyio.create_task_group() as tg:
            producer = Producer(client)
            tg.start_soon(producer.run)
            for name in ("w1", "w2"):
                cluster.start(name)
            await cluster.until(spread_over({"w1", "w2"}), 30)
            await producer.more(100)
            yield producer
    finally:
        cluster.stop_all()


async def all_delivered(cluster: KafkaCluster, producer: Producer) -> None:
    """Stop ``producer`` and wait until the workers have delivered all it published."""
    await producer.stop()
    with anyio.fail_after(20):
        while {value for value, _ in cluster.deliveries()} < set(producer.published):
            await anyio.sleep(0.1)


async def test_kafka_workers_share_partitions_through_a_join_a_leave_and_a_kill(tmp_path, kafka_broker, kafka_topic):
    cluster = KafkaCluster(tmp_path, kafka_broker, kafka_topic)
    async with two_workers_producing(cluster, kafka_broker, kafka_topic) as producer:
        cluster.start("w3")  # a newcomer gets a share
        await cluster.until(spread_over({"w1", "w2", "w3"}), 30)
        await producer.more(100)

        leaving = cluster.owned_by("w1")
        cluster.workers["w1"].send_signal(signal.SIGTERM)
        assert cluster.workers["w1"].wait(timeout=30) == 0, cluster.log("w1")
        await cluster.until(spread_over({"w2", "w3"}), 30)
        await producer.more(100)

        killed = cluster.owned_by("w2")
        cluster.workers["w2"].send_signal(signal.SIGKILL)
        cluster.workers["w2"].wait()
        await cluster.until(lambda owners: len(owners) == QUEUES and set(owners.values()) == {"w3"}, 30)
        await producer.more(100)

        await all_delivered(cluster, producer)

    assert leaving and killed
    assert_nothing_lost_and_no_overlap(cluster, producer.published, moved=leaving | killed)
