"""Topic administration: creating a topic unless it exists, and checking that the topics
headrace reads have the partitions its queues need."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from streams.core.errors import ConfigurationError
from streams.kafka.settings import ClientOptions, KafkaSettings

log = logging.getLogger("headrace.kafka")


async def ensure_topic(
    client_kwargs: ClientOptions,
    topic: str,
    partitions: int,
    replication_factor: int = 1,
    configs: Mapping[str, str] | None = None,
) -> int:
    """Create ``topic`` with ``partitions`` partitions (and topic ``configs``) unless it
    exists; return the partition count it has (the caller decides what another count means).
    Transient failures raise for the caller to retry.

    Example (with a broker at 127.0.0.1:9092)::

        partitions = await ensure_topic({"bootstrap_servers": "127.0.0.1:9092"}, "sensors", 8)
    """
    admin = AIOKafkaAdminClient(**client_kwargs)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            await _create_topic(admin, topic, partitions, replication_factor, configs)
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described["error_code"]:  # raised to the caller's retry, which retries it if transient
        raise for_code(described["error_code"])(f"describing topic {topic!r}")
    return len(described["partitions"])


async def ensure_queue_topics(settings: KafkaSettings) -> None:
    """Create the topic(s) of ``settings`` unless they exist, and refuse topics whose
    partition count is not ``settings.queues`` (the count decides which queue carries each
    stream, so every process must agree on it). Transient failures raise for the caller
    to retry."""
    counts = {
        topic: await ensure_topic(settings.client_kwargs(), topic, settings.queues, settings.replication_factor)
        for topic in settings.namespaces
    }
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{topic!r} has {n}" for topic, n in counts.items())
        raise ConfigurationError(
            f"topics read together must have as many partitions each (queue i reads "
            f"partition i of every topic): {listed}"
        )
    for topic, partitions in counts.items():
        if partitions != settings.queues:
            raise ConfigurationError(
                f"Kafka topic {topic!r} has {partitions} partitions but queues="
                f"{settings.queues}: use queues={partitions}, or another topic (a topic's "
                "partition count fixes which queue carries each stream)"
            )


async def _create_topic(
    admin: AIOKafkaAdminClient,
    topic: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
) -> None:
    new = NewTopic(topic, partitions, replication_factor, topic_configs=dict(configs or {}))
    response = await admin.create_topics([new])
    for _topic, code, message, *_ in response.topic_errors:
        error = for_code(code)
        if code == 0 or error is TopicAlreadyExistsError:  # another process was first
            continue
        if error.retriable:
            raise error(message)
        raise ConfigurationError(
            f"cannot create Kafka topic {topic!r} with {partitions} partitions "
            f"and replication factor {replication_factor}: {message or error.__name__}"
        )
    log.info("created Kafka topic %r with %d partitions", topic, partitions)
