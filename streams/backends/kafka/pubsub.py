"""Durable explicit subscriptions on Kafka: a compacted topic every worker reads, so a
subscription made through any machine reaches the worker that owns its stream.

The topic is ``<group_id>.pubsub.<topic>`` (one partition, ``cleanup.policy=compact``), one
record per subscription:

- key: the subscription id;
- value: msgpack ``{"format": 1, "namespace", "key", "consumer_type", "start", "state"}``
  (``start``: ``[sequence number, event index]`` or ``None``); no value (a tombstone) once
  it is unsubscribed, so compaction drops it.

A store keeps what it has read and reads only what is newer. A worker asks for a stream's
subscriptions when the stream becomes active on it; the store then reads the topic unless
it did so within ``freshness`` seconds (1 s), so a subscription made elsewhere is seen by
streams activated from at most that long after it was written. Its own writes it sees at
once. A running worker also follows the topic (:meth:`KafkaPubSubStore.follow`, every
``freshness`` seconds), so a subscription made elsewhere to a stream already active on
it is attached there too.

>>> record = SubscriptionRecord("sub-1", StreamId("sensors", "s-1"), "Averager", SequenceToken(4, 1))
>>> decode_subscription(b"sub-1", encode_subscription(record)) == record
True
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

import anyio
import msgpack

from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.topic_log import LogRecord, TopicLog
from streams.core.errors import HeadraceError
from streams.core.ids import SequenceToken, StreamId
from streams.core.pubsub import SubscriptionChanges, SubscriptionRecord, SubscriptionState, by_stream
from streams.core.retry import OutageLog

log = logging.getLogger("headrace.kafka")

FORMAT = 1
COMPACTED: Mapping[str, str] = {"cleanup.policy": "compact", "segment.ms": "600000"}


def pubsub_topic(settings: KafkaSettings) -> str:
    """The subscriptions of the provider reading ``settings.topic`` under ``settings.group_id``.

    >>> pubsub_topic(KafkaSettings("localhost:9092", "sensors"))
    'headrace.pubsub.sensors'
    """
    return f"{settings.group_id}.pubsub.{settings.topic}"


def encode_subscription(record: SubscriptionRecord) -> bytes:
    token = record.start_token
    value: bytes = msgpack.packb(
        {
            "format": FORMAT,
            "namespace": record.stream_id.namespace,
            "key": record.stream_id.key,
            "consumer_type": record.consumer_type,
            "start": None if token is None else [token.sequence_number, token.event_index],
            "state": record.state.value,
        }
    )
    return value


def decode_subscription(subscription_id: bytes, value: bytes) -> SubscriptionRecord:
    data: Any = msgpack.unpackb(value)
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ValueError("not a headrace subscription")
    start = data["start"]
    return SubscriptionRecord(
        subscription_id.decode(),
        StreamId(data["namespace"], data["key"]),
        data["consumer_type"],
        None if start is None else SequenceToken(start[0], start[1]),
        SubscriptionState(data["state"]),
    )


class KafkaPubSubStore:
    """A :class:`~streams.core.pubsub.PubSubStore` in the cluster's compacted subscriptions
    topic (see the module docstring).

    Example (with a broker at 127.0.0.1:9092)::

        pubsub = KafkaPubSubStore(KafkaSettings("127.0.0.1:9092", "sensors"))
        await pubsub.add_subscription(SubscriptionRecord("sub-1", StreamId("sensors", "s-1"), "Averager"))
        records = await other_machines_store.subscriptions(StreamId("sensors", "s-1"))  # [that one]
        await pubsub.remove_subscription("sub-1")  # a tombstone
        await pubsub.close()
    """

    def __init__(self, settings: KafkaSettings, outage: OutageLog | None = None, freshness: float = 1.0) -> None:
        self.log = TopicLog(settings, pubsub_topic(settings), COMPACTED, outage)
        self.freshness = freshness
        self._records: dict[str, SubscriptionRecord] = {}
        self._next = 0  # the offset the next read starts at
        self._read_at = -float("inf")  # when the last read began (monotonic)
        self._reading = anyio.Lock()

    async def add_subscription(self, record: SubscriptionRecord) -> None:
        """Add the record, or replace the one with the same subscription id."""
        await self.log.append([LogRecord(record.subscription_id.encode(), encode_subscription(record))])
        self._records[record.subscription_id] = record

    async def remove_subscription(self, subscription_id: str) -> None:
        await self.log.append([LogRecord(subscription_id.encode(), None)])
        self._records.pop(subscription_id, None)

    async def fault_subscription(self, subscription_id: str) -> None:
        await self.refresh(self.freshness)
        record = self._records.get(subscription_id)
        if record is not None:
            await self.add_subscription(dataclasses.replace(record, state=SubscriptionState.FAULTED))

    async def subscriptions(self, stream_id: StreamId | None = None) -> list[SubscriptionRecord]:
        """The records of one stream, or of every stream, oldest first."""
        await self.refresh(self.freshness)
        return [r for r in self._records.values() if stream_id is None or r.stream_id == stream_id]

    async def subscriptions_of(self, stream_ids: Collection[StreamId]) -> dict[StreamId, list[SubscriptionRecord]]:
        await self.refresh(self.freshness)
        return by_stream(self._records.values(), stream_ids)

    async def follow(self, changed: SubscriptionChanges) -> None:
        """Every ``freshness`` seconds, read the topic and call ``changed(made, removed)``
        with the subscriptions made (or made active again) and removed (or faulted) since
        the last call; until cancelled. A failed read is logged and tried again next time."""
        known: dict[str, SubscriptionRecord] | None = None  # None: no read yet (a baseline, not news)
        while True:
            try:
                await self.refresh(self.freshness)
            except HeadraceError as exc:
                log.warning("following subscriptions topic %r: %s (trying again)", self.log.topic, exc)
            else:
                now = {r.subscription_id: r for r in self._records.values() if r.state is SubscriptionState.ACTIVE}
                if known is not None:
                    made = [r for i, r in now.items() if known.get(i) != r]
                    removed = [r for i, r in known.items() if i not in now]
                    if made or removed:
                        await changed(made, removed)
                known = now
            await anyio.sleep(self.freshness)

    async def refresh(self, freshness: float = 0.0) -> None:
        """Read what was written since the last read, unless a read began within
        ``freshness`` seconds (concurrent callers share one read)."""
        asked = time.monotonic()
        async with self._reading:
            if self._read_at >= asked - freshness:
                return
            self._read_at = time.monotonic()
            for record in await self.log.read(self._next):
                self._next = max(self._next, record.offset + 1)
                self._take(record)

    def _take(self, record: LogRecord) -> None:
        if record.key is None:
            return
        subscription_id = record.key.decode(errors="replace")
        if record.value is None:
            self._records.pop(subscription_id, None)
            return
        try:
            taken = decode_subscription(record.key, record.value)
        except Exception as exc:  # another program's record, or a newer format
            log.warning(
                "subscriptions topic %r: offset %d is not a subscription (%r); skipped",
                self.log.topic,
                record.offset,
                exc,
            )
            return
        self._records.pop(subscription_id, None)  # a renewed subscription counts from now
        self._records[subscription_id] = taken

    async def close(self) -> None:
        await self.log.close()
