"""What every aiokafka client of headrace does alike: start (and not leak a half-started
client), and find the offsets a partition spans."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


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
