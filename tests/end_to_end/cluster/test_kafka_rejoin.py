"""A ``headrace worker`` on Kafka killed outright (SIGKILL) and started again on its state
directory rejoins the consumer group as the member it was: it reads its own queues again
before the dead member's session would have expired, the live worker beside it keeps every
queue it had without a pause (no new tenure), and every published event is delivered, a
redelivery being the same record."""

from __future__ import annotations

import signal

import anyio

from tests.end_to_end.cluster.test_kafka_workers import SESSION, KafkaCluster, all_delivered, two_workers_producing
from tests.end_to_end.cluster.test_workers import assert_nothing_lost_and_no_overlap
from tests.end_to_end.cluster.worker_app import QUEUES


async def test_a_sigkilled_kafka_worker_restarted_on_its_state_dir_takes_its_queues_back_alone(
    tmp_path, kafka_broker, kafka_topic
):
    cluster = KafkaCluster(tmp_path, kafka_broker, kafka_topic)
    cluster.env["HEADRACE_TEST_STATE_DIR"] = str(tmp_path / "state")
    async with two_workers_producing(cluster, kafka_broker, kafka_topic) as producer:
        kept, killed = cluster.owned_by("w1"), cluster.owned_by("w2")
        tenures_of_w1 = {q: len(spans) for q, spans in cluster.tenures().items() if q in kept}
        cluster.workers["w2"].send_signal(signal.SIGKILL)
        cluster.workers["w2"].wait()
        cluster.start("w2")  # same name, same state directory
        # Its own queues again, within the dead member's session: nothing waited for it.
        await cluster.until(lambda owners: cluster.owned_by("w2") == killed, SESSION)
        await producer.more(100)
        await anyio.sleep(SESSION)  # past the session: nothing else moves
        assert cluster.owned_by("w1") == kept and cluster.owned_by("w2") == killed
        assert {q: len(spans) for q, spans in cluster.tenures().items() if q in kept} == tenures_of_w1
        await all_delivered(cluster, producer)

    assert kept and killed and kept | killed == set(range(QUEUES))
    assert "rejoining group" in cluster.log("w2")
    assert_nothing_lost_and_no_overlap(cluster, producer.published, moved=set())
