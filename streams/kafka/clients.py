"""What every aiokafka client of headrace does alike: start (and not leak a half-started
client), find the offsets a partition spans, and read one to its end."""

from __future__ import annotations

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from streams.kafka.settings import KafkaSettings

_FETCH_RECORDS = 500


async def start_client(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
    """Start ``client``; if that fails, stop it (its connections and tasks) and raise."""
    try:
        await client.start()
    except BaseException:
        await client.stop()
        raise


async def offset_bounds(consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int]:
    """The oldest retained offset of ``tp`` and the offset its next record will get."""
    first = await consumer.beginning_offsets([tp])
    end = await consumer.end_offsets([tp])
    return first[tp], end[tp]


async def read_partition(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, settings: KafkaSettings
) -> list[ConsumerRecord[bytes, bytes]]:
    """The records of ``tp`` from offset ``start`` (or the oldest retained, if later) to its
    end as it is now, read by ``consumer`` (assigned ``tp``, paused or not). A fetch that brings nothing
    for ``settings.request_timeout`` raises ``TimeoutError`` (an outage: the caller retries).

    Every record fetched counts, also past the end: newer still, and Tansu's end offset can
    fall inside the last batch written (its base offset + 1)."""
    first, end = await offset_bounds(consumer, tp)
    consumer.seek(tp, max(first, start))
    poll_ms = int(settings.poll_timeout * 1000)
    records: list[ConsumerRecord[bytes, bytes]] = []
    # A consumer kept between reads keeps ``tp`` paused, so that its fetcher does not wait
    # on the broker meanwhile (which delays the offset requests above by its fetch wait).
    paused = tp in consumer.paused()
    if paused:
        consumer.resume(tp)
    try:
        while await consumer.position(tp) < end:
            with anyio.fail_after(settings.request_timeout):
                fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
                while not fetched and await consumer.position(tp) < end:
                    fetched = await consumer.getmany(tp, timeout_ms=poll_ms, max_records=_FETCH_RECORDS)
            records += fetched.get(tp, ())
    finally:
        if paused:
            consumer.pause(tp)
    return records
