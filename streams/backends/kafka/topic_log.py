"""A topic of one partition that headrace appends to and reads whole: what the workers of a
cluster share that is not a queue (dead letters, durable subscriptions, worker status).

Appends wait until Kafka has every record (``acks="all"``), so whatever depends on them (an
offset commit after a dead letter) comes after. A read returns every record from an offset
up to the partition's end as it was when the read began; readers keep what they have read
and ask only for what is newer. Both retry while the cluster is unreachable, for up to
``give_up_after`` seconds. The clients start on first use and stop on :meth:`close`; a log
used again after that starts them again.

Example (with a broker at 127.0.0.1:9092)::

    log = TopicLog(KafkaSettings("127.0.0.1:9092", "sensors"), "sensors.dlq")
    [offset] = await log.append([LogRecord(b"key", b"value", (("reason", b"undecodable"),))])
    records = await log.read(offset)  # [LogRecord(key=b'key', ..., offset=offset)]
    await log.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.backends.kafka.clients import (
    Producers,
    ensure_topic,
    kafka_outage_log,
    read_partition,
    retry_kafka,
    start_client,
    stop_client,
)
from streams.backends.kafka.settings import KafkaSettings
from streams.core.errors import ConfigurationError
from streams.core.retry import OutageLog

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a :class:`TopicLog`: ``offset`` is ``-1`` until it is written."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    offset: int = -1
    timestamp: float = 0.0  # seconds; Kafka's timestamp of a record read back


class TopicLog:
    """Partition 0 of ``topic`` (created with one partition and ``configs`` unless it
    exists), appended to and read whole (see the module docstring)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        configs: Mapping[str, str] | None = None,
        outage: OutageLog | None = None,
        producers: Producers | None = None,
    ) -> None:
        self.settings = settings
        self.producers = producers if producers is not None else Producers(settings)
        self.topic = topic
        self.configs = dict(configs or {})
        self.outage = outage if outage is not None else kafka_outage_log(settings)
        self._tp = TopicPartition(topic, 0)
        self._checked = False
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = anyio.Lock()  # one start, and one read, at a time

    async def ensure(self) -> None:
        """Create the topic unless it exists (once per log)."""
        if self._checked:
            return

        async def check() -> int:
            settings = self.settings
            return await ensure_topic(settings, self.topic, 1, settings.replication_factor, self.configs or None)

        found = await retry_kafka(check, f"checking Kafka topic {self.topic!r}", self.settings, self.outage)
        if found != 1:  # only partition 0 is read: what others wrote elsewhere would be missed
            raise ConfigurationError(
                f"Kafka topic {self.topic!r} has {found} partitions: headrace keeps its records in one "
                "(delete it, or name another topic)"
            )
        self._checked = True

    async def append(self, records: Sequence[LogRecord]) -> list[int]:
        """Write ``records`` in order; return their offsets once Kafka has all of them. A
        write retried after an outage may store a record twice (readers tell by content)."""
        if not records:
            return []
        await self.ensure()
        return await retry_kafka(
            lambda: self._send(records), f"writing to Kafka topic {self.topic!r}", self.settings, self.outage
        )

    async def _send(self, records: Sequence[LogRecord]) -> list[int]:
        producer = await self._started_producer()
        sending: list[asyncio.Future[Any]] = []
        for record in records:
            headers = list(record.headers)
            sending.append(await producer.send(self.topic, record.value, key=record.key, partition=0, headers=headers))
        return [int(metadata.offset) for metadata in await asyncio.gather(*sending)]

    async def read(self, start: int = 0) -> list[LogRecord]:
        """Every record from offset ``start`` (or the oldest retained) to the end."""
        await self.ensure()
        return await retry_kafka(
            lambda: self._read(start), f"reading Kafka topic {self.topic!r}", self.settings, self.outage
        )

    async def _read(self, start: int) -> list[LogRecord]:
        async with self._lock:
            consumer = await self._started_consumer()
            try:
                fetched = await read_partition(consumer, self._tp, start, self.settings)
            except BaseException:
                await self._stop_consumer()  # an outage: a fresh one next time
                raise
        return [
            LogRecord(r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers), r.offset, r.timestamp / 1000)
            for r in fetched
        ]

    async def _started_producer(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                # Uncompressed: its records are few and small.
                self._producer = await self.producers.start(compression_type=None)
            return self._producer

    async def _started_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **self.settings.consumer_kwargs(
                    group_id=None,
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",  # what retention or compaction left
                    fetch_max_wait_ms=int(self.settings.poll_timeout * 1000),
                )
            )
            await start_client(consumer, self.settings)
            consumer.assign([self._tp])
            consumer.pause(self._tp)  # between reads (see read_partition)
            self._consumer = consumer
        return self._consumer

    async def _stop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with anyio.CancelScope(shield=True):
                await stop_client(consumer)

    async def close(self) -> None:
        """Stop the clients (a later use starts them again)."""
        producer, self._producer = self._producer, None
        await self._stop_consumer()
        if producer is not None:
            with anyio.CancelScope(shield=True):
                await producer.stop()
