"""``headrace status`` on Kafka, on the test broker: how far behind each queue is in time
(``lag_seconds``), from the timestamp of its oldest record past the committed offset (records
written by confluent-kafka with the timestamps given, so the ages are exact); and the results
per consumer type and input watermarks the status topic carries."""

from __future__ import annotations

import json

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from confluent_kafka import Producer

from streams.adapters.status import AgentStatus, consumer_type_fates
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.status import KafkaStatusBoard, read_kafka_status, read_reports
from tests.streams.kafka.test_foreign_records import make_topic

QUEUES = 3
NOW = 1_800_000_000.0  # the status' clock: ages are counted from it


def write(bootstrap: str, topic: str, records: list[tuple[int, float]]) -> None:
    """``(partition, written at)`` records, one JSON event each, in this order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "linger.ms": 0})
    failures: list[str] = []
    for n, (partition, at) in enumerate(records):
        producer.produce(
            topic,
            json.dumps({"n": n}).encode(),
            partition=partition,
            timestamp=int(at * 1000),
            on_delivery=lambda error, _: failures.append(str(error)) if error else None,
        )
        producer.flush(30)  # one at a time: the offsets follow the list
    assert failures == []


async def commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


async def test_lag_in_seconds_is_the_age_of_the_oldest_record_not_committed(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic, QUEUES)
    # partition 0: offsets 0-2 written 300, 200 and 100 s before NOW; partition 1: one, 50 s
    # before; partition 2: one, 10 s before
    write(kafka_broker, kafka_topic, [(0, NOW - 300), (0, NOW - 200), (0, NOW - 100), (1, NOW - 50), (2, NOW - 10)])
    settings = KafkaSettings(kafka_broker, kafka_topic, QUEUES, group_id=f"{kafka_topic}-g", records="json")

    # Nothing committed: each queue is as old as its oldest retained record.
    status = await read_kafka_status(settings, suspicion_timeout=10, now=NOW)
    assert [(q.checkpoint_lag, q.lag_seconds) for q in status.queues] == [(3, 300.0), (1, 50.0), (1, 10.0)]

    # Partition 0 committed to offset 2 (the record written 100 s ago is the oldest left),
    # partition 2 to its end (caught up: no age), partition 1 not at all.
    tp = [TopicPartition(kafka_topic, p) for p in range(QUEUES)]
    await commit(kafka_broker, settings.group_id, {tp[0]: 2, tp[2]: 1})
    status = await read_kafka_status(settings, suspicion_timeout=10, now=NOW)
    assert [(q.checkpoint_lag, q.lag_seconds) for q in status.queues] == [(1, 100.0), (1, 50.0), (0, 0.0)]
    assert status.as_dict()["queues"][0]["lag_seconds"] == 100.0  # as `headrace status --json` prints it

    # A clock before the records were written (another machine's): never a negative age.
    status = await read_kafka_status(settings, suspicion_timeout=10, now=NOW - 400)
    assert [q.lag_seconds for q in status.queues] == [0.0, 0.0, 0.0]


async def test_the_status_topic_carries_results_and_input_watermarks(kafka_broker, kafka_topic):
    """What a worker on Kafka publishes for the page: results per consumer type and each
    input's watermark (``None``: none yet), read back as written and summed per type."""
    settings = KafkaSettings(kafka_broker, kafka_topic, QUEUES, idempotent=False)
    fates = {"events": 9, "windows_emitted": 2, "early_results": 3, "joins_emitted": 1, "active": 1}
    plain = (0, 4096, False, 1, 10, 0, None, None, NOW, NOW + 15)  # cache, reads, no watermark, fresh
    inputs = [{"tolls": NOW - 5 * q, "prices": None} for q in range(2)]
    rows = [AgentStatus("w1", q, *plain, fates={"app.T": fates}, input_watermarks=inputs[q]) for q in range(2)]
    board = KafkaStatusBoard(settings)
    try:
        await board.publish("w1", rows, NOW, NOW + 15)
    finally:
        await board.close()
    [report] = (await read_reports(settings)).values()
    assert report.agents == rows
    [summed] = consumer_type_fates(report.agents)
    assert (summed.events, summed.windows_emitted, summed.early_results, summed.joins_emitted) == (18, 4, 6, 2)
