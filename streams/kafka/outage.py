"""How headrace's Kafka clients ride out an outage of the cluster: which failures are worth
retrying (:func:`is_transient`), the outage log that also quiets aiokafka's per-attempt
lines (:func:`kafka_outage_log`), and the one retry (:func:`streams.core.retry.retry`) with
the settings' give-up time (:func:`retry_kafka`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError, KafkaTimeoutError

from streams.core.outage import OutageLog
from streams.core.retry import retry
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
