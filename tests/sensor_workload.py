"""The sensor workload shared by the Kafka tests and bench/kafka.py: JSON
readings of ``sensors`` sensors written by a plain aiokafka producer, as a program that is
not headrace would write them.

Reading ``n`` is sensor ``n % sensors``'s, keyed ``sensor-N``, at ``T0 + n * spacing``; one
in ``1 / late_share`` of them is ``late`` seconds older than that (out of order). ``ts`` is
epoch milliseconds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer

T0_MS = 1_700_000_000_000


def readings(
    count: int, sensors: int = 100, spacing: float = 0.01, late_share: float = 0.05, late: float = 3.0
) -> Iterator[tuple[bytes, dict[str, object]]]:
    """``(key, value)`` of each reading, in the order they are written."""
    every = round(1 / late_share)
    for n in range(count):
        ts = T0_MS + round(n * spacing * 1000) - (round(late * 1000) if n % every == every - 1 else 0)
        sensor = f"sensor-{n % sensors}"
        yield sensor.encode(), {"sensor": sensor, "ts": ts, "value": n % 7 * 0.5}


def closed_window_counts(
    values: list[dict[str, object]], window: float, out_of_order: float
) -> Counter[tuple[str, float]]:
    """(sensor, window start) -> events, for the tumbling windows a consumer with this
    out-of-order tolerance has closed once it has seen every reading: those whose end is at
    or below the sensor's largest timestamp minus the tolerance."""
    newest: dict[str, float] = {}
    counts: Counter[tuple[str, float]] = Counter()
    for v in values:
        t = int(v["ts"]) / 1000  # type: ignore[call-overload]
        sensor = str(v["sensor"])
        newest[sensor] = max(newest.get(sensor, t), t)
        counts[(sensor, t // window * window)] += 1
    return Counter({(s, start): n for (s, start), n in counts.items() if start + window <= newest[s] - out_of_order})


async def write_json(
    bootstrap: str, topic: str, items: list[tuple[bytes | None, dict[str, object]]], compression: str | None = None
) -> None:
    """Write ``items`` to ``topic`` with a plain aiokafka producer: Kafka's default
    partitioner places each key (a record without one on any partition); ``compression``: its record batches' codec (gzip, snappy,
    lz4, zstd)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type=compression)
    await producer.start()
    try:
        sent = [await producer.send(topic, json.dumps(v).encode(), key=k) for k, v in items]
        for future in sent:
            await future
    finally:
        await producer.stop()


def write_with_librdkafka(
    bootstrap: str, topic: str, items: list[tuple[bytes | None, dict[str, object]]], compression: str = "none"
) -> None:
    """Write ``items`` with confluent-kafka (librdkafka), the client most non-Java producers
    are built on, with its ``compression.type`` (none, gzip, snappy, lz4, zstd) and its
    default partitioner (a record without a key on a random partition); blocks until the broker has every record."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "enable.idempotence": False,
            "linger.ms": 5,
            "partitioner": "murmur2_random",  # the Java client's partitioner
        }
    )
    failures: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            failures.append(str(error))

    for key, value in items:
        while True:
            try:
                producer.produce(topic, json.dumps(value).encode(), key=key, on_delivery=delivered)
                break
            except BufferError:  # its local queue is full: let it send
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(30) or failures:
        raise RuntimeError(f"librdkafka did not deliver every record: {failures[:3]}")
