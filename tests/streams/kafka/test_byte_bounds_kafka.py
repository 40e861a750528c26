"""Large records on Kafka, written by librdkafka: one over ``max_event_size`` is dead-lettered
``too_large`` with its offset and a prefix, never decoded, and the records around it are read; a
topic of 4 MiB records is read by a worker whose memory stays within its bounds in bytes (each
fetch freed once taken), and nothing is lost."""

from __future__ import annotations

import random
import zlib

from confluent_kafka import Producer

from streams import StreamId
from streams.backends.kafka.clients import ensure_topic
from streams.core.deadletters import LETTER_PREFIX
from tests.agents.delivery.conftest import drained
from tests.kafka_fixtures import json_provider
from tests.streams.runtime.test_byte_bounds import read_by_blob_worker

MIB = 1 << 20


def write(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """``(key, value, partition)`` records, written by confluent-kafka; blocks until all are in."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "message.max.bytes": 16 * MIB})
    for key, value, partition in records:
        producer.produce(topic, value, key=key, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


async def test_a_record_over_the_limit_is_dead_lettered_too_large_and_the_rest_is_read(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    big = b'{"blob": "' + b"z" * (2 * MIB) + b'"}'
    write(kafka_broker, kafka_topic, [(b"a", b'{"n": 1}', 0), (b"a", big, 0), (b"b", b'{"n": 3}', 0)])
    provider = json_provider(kafka_broker, kafka_topic, queues=1, namespace="docs", max_event_size=MIB)
    seen: list[tuple[str, object]] = []

    @provider.implicit("docs")
    class Keep:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch) -> None:
            seen.extend((self.key, e.value["n"]) for e in batch)

    async with provider:
        await drained(provider, 30)
        letters = await provider.dead_letters.list(reason="too_large")
    assert sorted(seen) == [("a", 1), ("b", 3)]
    [letter] = letters
    assert (letter.queue, letter.sequence_number) == (0, 1)
    assert letter.payload == big[:LETTER_PREFIX]
    assert f"{kafka_topic} partition 0 offset 1 is 2,097,164 bytes, over max_event_size (1,048,576" in letter.detail


async def test_a_topic_of_4_mib_records_is_read_within_the_bounds(kafka_broker, kafka_topic):
    count, rng, crc = 60, random.Random(7), 0  # 240 MiB in all: far more than the worker may hold
    assert await ensure_topic(kafka_broker, kafka_topic, 2) == 2
    records = [(f"k{n % 8}".encode(), rng.randbytes(4 * MIB), n % 2) for n in range(count)]
    for _, value, _ in records:
        crc ^= zlib.crc32(value)
    write(kafka_broker, kafka_topic, records)
    del records
    line, grown = await read_by_blob_worker(count, kafka_broker, kafka_topic)
    assert line.split() == ["done", str(count), str(crc)]  # every record, each once, intact
    # Two caches of 16 MiB, a fetch of two records per partition taken and one in flight, and
    # the record a consumer holds: far below the 240 MiB of the topic.
    assert grown < 120, f"peak RSS grew {grown:.0f} MiB"
