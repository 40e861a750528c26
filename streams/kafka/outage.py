"""How headrace's Kafka clients ride out an outage of the cluster: which failures are worth
retrying (:func:`is_transient`), the outage log that also quiets aiokafka's per-attempt
lines (:func:`kafka_outage_log`), and the one retry (:func:`streams.core.retry.retry`) with
the settings' give-up time (:func:`retry_kafka`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    CorruptRecordException,
    GroupAuthorizationFailedError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedCodecError,
)

from streams.core.retry import OutageLog, retry
from streams.kafka.settings import KafkaSettings

log = logging.getLogger("headrace.kafka")
T = TypeVar("T")

# aiokafka's loggers that log each failed attempt to reach a broker, at WARNING or ERROR
# (tens a second); the outage log reports the outage once instead. The fetcher's failed
# fetches are retried by its own loop, and come before any call of ours has failed.
AIOKAFKA_CONNECTION_LOGGERS = ("aiokafka", "aiokafka.conn", "aiokafka.consumer.fetcher")


def is_transient(exc: BaseException) -> bool:
    """Whether retrying may help: the broker unreachable, a leader moving, a timeout.

    >>> from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError
    >>> is_transient(KafkaConnectionError()), is_transient(TopicAuthorizationFailedError())
    (True, False)
    """
    if isinstance(exc, KafkaTimeoutError):  # aiokafka marks it final; an outage causes it
        return True
    return isinstance(exc, (KafkaError, OSError)) and getattr(exc, "retriable", True)


def permanent_fix(exc: BaseException, settings: KafkaSettings) -> str:
    """What to do about a failure that retrying cannot fix (one that :func:`is_transient`
    refuses): the end of the one line that reports it.

    >>> from aiokafka.errors import UnsupportedCodecError
    >>> permanent_fix(UnsupportedCodecError(), KafkaSettings("k:9092", "sensors"))
    "install the codecs: pip install 'aiokafka[lz4,snappy,zstd]' (headrace's default install has them)"
    """
    topics = ", ".join(map(repr, settings.namespaces))
    if isinstance(exc, UnsupportedCodecError):
        return "install the codecs: pip install 'aiokafka[lz4,snappy,zstd]' (headrace's default install has them)"
    if isinstance(exc, CorruptRecordException):
        return (
            "the record batch there is corrupt (Kafka's own tools cannot read it either); to skip it, "
            f"reset group {settings.group_id!r}'s offset past it (kafka-consumer-groups --reset-offsets) and restart"
        )
    if isinstance(exc, (TopicAuthorizationFailedError, GroupAuthorizationFailedError, ClusterAuthorizationFailedError)):
        return (
            f"grant the client's principal Describe and Read on topic(s) {topics} and Read on group "
            f"{settings.group_id!r} (see docs/kafka.md, Security)"
        )
    if isinstance(exc, AuthenticationFailedError):
        return "check the credentials in client_options (sasl_plain_username, ssl_context, ...)"
    if isinstance(exc, RecordTooLargeError):
        return (
            "a record there is larger than the fetch size: raise client_options max_partition_fetch_bytes "
            "(aiokafka's default 1 MiB) to the topic's max.message.bytes or more"
        )
    if isinstance(exc, MessageSizeTooLargeError):
        return "the record is larger than the broker takes: raise the topic's max.message.bytes, or send smaller values"
    if isinstance(exc, UnknownTopicOrPartitionError):
        return "the topic no longer exists (deleted?): recreate it, or point the worker at another topic"
    return "retrying cannot fix this; see the broker's log for why it refused"


def kafka_outage_log(settings: KafkaSettings) -> OutageLog:
    """The outage log of the cluster of ``settings``: aiokafka's lines about each failed
    attempt go to DEBUG and are counted in the line that ends the outage."""
    return OutageLog(settings.server, log, "aiokafka", AIOKAFKA_CONNECTION_LOGGERS)


async def retry_kafka(
    operation: Callable[[], Awaitable[T]],
    what: str,
    settings: KafkaSettings,
    outage: OutageLog,
    attempt_timeout: float | None = None,
) -> T:
    """``operation``, retried while the cluster is unreachable, for up to
    ``settings.give_up_after`` seconds; then :class:`~streams.core.errors.QueueAdapterError`
    says ``what`` failed."""
    return await retry(
        operation,
        what=what,
        outage=outage,
        is_transient=is_transient,
        give_up_after=settings.give_up_after,
        attempt_timeout=attempt_timeout,
    )
