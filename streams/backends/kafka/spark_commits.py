"""Where Spark is in the Kafka handoff log: its commits, as a consumer group's offsets.

The Spark DataSource's stream reader (:mod:`spark_sink.datasource`) commits the offsets its
query has read and committed to the consumer group ``<prefix>.spark.<stream>`` (a group no
consumer ever joins), with the time in each offset's metadata. A consumer group is Kafka's
own place for a reader's position: ``kafka-consumer-groups --describe --group
headrace.spark.averages`` shows Spark's offsets and lag with no headrace at hand, Kafka UIs
list it with the other readers, and retention of committed offsets is the cluster's. A
Python DataSource learns neither its query's name nor its checkpoint, so queries reading one
stream share the group: it holds the latest commit of any of them.

>>> spark_group("headrace", "averages")
'headrace.spark.averages'
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

from streams.backends.kafka.clients import start_client, stop_client
from streams.backends.kafka.connection import KafkaConnection


def spark_group(prefix: str, stream: str) -> str:
    """The consumer group Spark's commits of handoff stream ``stream`` are recorded in."""
    return f"{prefix}.spark.{stream}"


class SparkCommits:
    """Commits of one handoff topic's offsets to ``group``, on one consumer kept until
    :meth:`close` (it never joins the group: it commits as a reader that assigns its own
    partitions, as the queue receivers do)."""

    def __init__(self, connection: KafkaConnection, group: str) -> None:
        self.connection = connection
        self.group = group
        self._consumer: AIOKafkaConsumer | None = None

    async def commit(self, topic: str, partitions: int, offsets: Mapping[int, int], now: float) -> None:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **self.connection.consumer_kwargs(group_id=self.group, enable_auto_commit=False)
            )
            await start_client(consumer, self.connection)
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            self._consumer = consumer
        metadata = json.dumps({"committed_at": now})
        await self._consumer.commit({TopicPartition(topic, p): (o, metadata) for p, o in offsets.items()})

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_client(consumer)


async def committed(
    admin: AIOKafkaAdminClient, group: str, topic: str, partitions: int
) -> tuple[dict[int, int], float | None] | None:
    """The offsets committed to ``group`` for ``topic`` and the latest commit's time; ``None``
    when nothing is committed there."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    found: dict[TopicPartition, OffsetAndMetadata] = await admin.list_consumer_group_offsets(group, partitions=tps)
    offsets = {tp.partition: m.offset for tp, m in found.items() if m.offset >= 0}
    if not offsets:
        return None
    times = [_committed_at(m.metadata) for tp, m in found.items() if m.offset >= 0]
    known = [t for t in times if t is not None]
    return offsets, max(known) if known else None


def _committed_at(metadata: str | None) -> float | None:
    """The time in a commit's metadata; ``None`` where there is none (another program's
    commit, or a broker that keeps no metadata, as Tansu).

    >>> _committed_at('{"committed_at": 12.5}'), _committed_at(""), _committed_at('{"x": 1}')
    (12.5, None, None)
    """
    try:
        value = json.loads(metadata or "")["committed_at"]
    except (ValueError, TypeError, KeyError):
        return None
    return float(value) if isinstance(value, int | float) else None
