"""What every aiokafka client of headrace does alike: start (and not leak a half-started
client), start producers on any broker (:class:`Producers`), find the offsets a partition
spans, and read one to its end."""

from __future__ import annotations

import logging

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from streams.core.retry import reason_of
from streams.kafka.outage import is_transient
from streams.kafka.settings import KafkaSettings

log = logging.getLogger("headrace.kafka")
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


class Producers:
    """Starts the producers of one adapter (its queue and state topics) with ``settings``'
    :meth:`~streams.kafka.settings.KafkaSettings.producer_kwargs`.

    Idempotent where the broker supports it: a broker that refuses an idempotent producer
    (its InitProducerId request, e.g. Tansu, or Kafka without the IdempotentWrite ACL before
    3.0) gets a plain one, and one warning says so and names the setting; later producers
    start plain at once. A plain producer that fails too raises: the broker's refusal was
    not about idempotence.

    >>> producers = Producers(KafkaSettings("127.0.0.1:9092", "sensors", idempotent=False))
    >>> producers.idempotent
    False
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.idempotent = settings.idempotent  # False once the broker has refused it

    async def start(self, **options: object) -> AIOKafkaProducer:
        """A started producer; ``options`` are further AIOKafkaProducer arguments. Transient
        failures raise for the caller to retry."""
        kwargs = {**self.settings.producer_kwargs(), **options}
        if self.idempotent:
            try:
                return await _started(AIOKafkaProducer(**kwargs))
            except KafkaError as exc:
                if is_transient(exc):
                    raise
                refusal = exc
            producer = await _started(AIOKafkaProducer(**{**kwargs, "enable_idempotence": False}))
            if self.idempotent:  # another producer may have fallen back meanwhile
                self.idempotent = False
                log.warning(
                    "%s refused an idempotent producer (InitProducerId: %s); producing without "
                    "idempotence, so a retried send may be stored twice: set idempotent=false "
                    "(KafkaSettings, or [provider.kafka] idempotent = false) to start so",
                    self.settings.server,
                    reason_of(refusal),
                )
            return producer
        return await _started(AIOKafkaProducer(**{**kwargs, "enable_idempotence": False}))


async def _started(producer: AIOKafkaProducer) -> AIOKafkaProducer:
    await start_client(producer)
    return producer


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
