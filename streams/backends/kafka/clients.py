"""What every aiokafka client of headrace does alike: start (and not leak a half-started
client), start producers on any broker (:class:`Producers`), find the offsets a partition
spans, and read one to its end.

Topic administration: creating a topic unless it exists, and checking that the topics
headrace reads have the partitions its queues need.

Whether a Kafka cluster answers at all, asked once before starting anything on it.

A worker that has run rides out an outage for ``give_up_after`` seconds (a minute by
default), keeping its positions. A command that has not started yet has nothing to keep:
when no broker answers within a few seconds, the address is most likely wrong, and saying
so at once is kinder than a minute of retries.

How headrace's Kafka clients ride out an outage of the cluster: which failures are worth
retrying (:func:`is_transient`), the outage log that also quiets aiokafka's per-attempt
lines (:func:`kafka_outage_log`), and the one retry (:func:`streams.core.retry.retry`) with
the settings' give-up time (:func:`retry_kafka`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import ClassVar, TypeVar

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    CorruptRecordException,
    GroupAuthorizationFailedError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedCodecError,
    for_code,
)

from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.ends import offset_bounds
from streams.backends.kafka.refusals import diagnose, refusal
from streams.backends.kafka.settings import KafkaSettings
from streams.core.errors import ConfigurationError, QueueAdapterError
from streams.core.retry import OutageLog, quiet_client_library, reason_of, retry

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
        principal = (
            f"user {settings.sasl_plain_username!r}" if settings.sasl_plain_username else "the client's principal"
        )
        return (
            f"the cluster did not authorize {principal}: grant it Describe, Read and Write on topic(s) {topics} "
            f"and Read on group {settings.group_id!r} (Kafka ACLs; see docs/kafka.md, Connecting to a secured "
            "cluster), or connect as another (sasl_plain_username, ssl_certfile)"
        )
    if isinstance(exc, AuthenticationFailedError):
        return "check sasl_mechanism, sasl_plain_username and sasl_plain_password (or ssl_certfile for mutual TLS)"
    if isinstance(exc, RecordTooLargeError):
        return (
            "a record there is larger than the fetch size: raise consumer_options max_partition_fetch_bytes "
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


log = logging.getLogger("headrace.kafka")
_FETCH_RECORDS = 500


async def start_client(
    client: AIOKafkaProducer | AIOKafkaConsumer | AIOKafkaAdminClient, connection: KafkaConnection
) -> None:
    """Start ``client`` (made with ``connection``'s keyword arguments); if that fails, stop it
    (its connections and tasks) and raise: :class:`~streams.backends.kafka.refusals.KafkaRefusedError`
    when the cluster refused the client's TLS or SASL settings (aiokafka reports those as a
    cluster it could not reach: one connection made to diagnose it says which), else what
    aiokafka raised."""
    try:
        await client.start()
    except BaseException as exc:
        if isinstance(client, AIOKafkaAdminClient):
            await client.close()
        else:
            await stop_client(client)
        if isinstance(exc, Exception) and is_transient(exc):
            refused = refusal(exc, connection) or await diagnose(connection)
            if refused is not None:
                raise refused from None
        raise


async def stop_client(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
    """Stop ``client``. A consumer stopped while a fetch is in flight cancels that fetch and
    awaits it, so aiokafka's ``stop()`` raises the fetch's ``CancelledError`` into a caller
    nobody cancelled; that one is absorbed here, and a cancellation of the caller's own task
    still propagates."""
    try:
        await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise


class Producers:
    """Starts producers with ``settings``'
    :meth:`~streams.backends.kafka.settings.KafkaSettings.producer_kwargs`: every producer of
    headrace (the queues', the state changelog's, the status, dead-letter and subscription
    topics') starts through :meth:`start`.

    Idempotent where the broker supports it: a broker that refuses an idempotent producer
    (its InitProducerId request, e.g. Tansu, or Kafka without the IdempotentWrite ACL before
    3.0) gets a plain one, and one warning says so and names the setting; later producers
    of the same provider (cluster, topic and group), in this process, start plain at once.
    A plain producer that fails too raises: the broker's refusal was not about idempotence.

    >>> producers = Producers(KafkaSettings("127.0.0.1:9092", "sensors", idempotent=False))
    >>> producers.idempotent
    False
    """

    # The providers (cluster, topic, group) whose cluster refused an idempotent producer in
    # this process: their status, dead-letter and state producers share one fallback.
    _refused: ClassVar[set[tuple[str, str, str]]] = set()

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._provider = (settings.server, settings.topic, settings.group_id)

    @property
    def idempotent(self) -> bool:
        """Whether the next producer starts idempotent (False once the cluster refused)."""
        return self.settings.idempotent and self._provider not in Producers._refused

    async def start(self, **options: object) -> AIOKafkaProducer:
        """A started producer; ``options`` are further AIOKafkaProducer arguments. Transient
        failures raise for the caller to retry."""
        kwargs = {**self.settings.producer_kwargs(), **options}
        if self.idempotent:
            try:
                return await _started(AIOKafkaProducer(**kwargs), self.settings)
            except KafkaError as exc:
                if is_transient(exc):
                    raise
                refusal = exc
            producer = await _started(AIOKafkaProducer(**{**kwargs, "enable_idempotence": False}), self.settings)
            if self.idempotent:  # another producer may have fallen back meanwhile
                Producers._refused.add(self._provider)
                log.warning(
                    "%s refused an idempotent producer (InitProducerId: %s); producing without "
                    "idempotence, so a retried send may be stored twice: set idempotent=false "
                    "(KafkaSettings, or [provider.kafka] idempotent = false) to start so",
                    self.settings.server,
                    reason_of(refusal),
                )
            return producer
        return await _started(AIOKafkaProducer(**{**kwargs, "enable_idempotence": False}), self.settings)


async def _started(producer: AIOKafkaProducer, connection: KafkaConnection) -> AIOKafkaProducer:
    await start_client(producer, connection)
    return producer


async def read_partition(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, settings: KafkaSettings
) -> list[ConsumerRecord[bytes, bytes]]:
    """The records of ``tp`` from offset ``start`` (or the oldest retained, if later) to its
    end as it is now (:func:`partition_chunks`, gathered)."""
    return [record async for chunk in partition_chunks(consumer, tp, start, settings) for record in chunk]


async def partition_chunks(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, settings: KafkaSettings
) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
    """The records of ``tp`` from offset ``start`` (or the oldest retained, if later) to its
    end as it is now (:func:`~streams.backends.kafka.ends.partition_ends`: the end a fetch
    answers, not only the broker's listed one), a fetch at a time, read by ``consumer``
    (assigned ``tp``, paused or not). A fetch that brings nothing for
    ``settings.request_timeout`` raises ``TimeoutError`` (an outage: the caller retries).
    Every record fetched counts, also past that end: it is newer still."""
    poll_ms = int(settings.poll_timeout * 1000)
    # A consumer kept between reads keeps ``tp`` paused, so that its fetcher does not wait
    # on the broker meanwhile (which delays the offset requests below by its fetch wait).
    paused = tp in consumer.paused()
    if paused:
        consumer.resume(tp)
    try:
        first, end = await offset_bounds(consumer, tp, settings.request_timeout)
        consumer.seek(tp, max(first, start))
        while await consumer.position(tp) < end:
            with anyio.fail_after(settings.request_timeout):
                fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
                while not fetched and await consumer.position(tp) < end:
                    fetched = await consumer.getmany(tp, timeout_ms=poll_ms, max_records=_FETCH_RECORDS)
            if fetched.get(tp):
                yield fetched[tp]
    finally:
        if paused:
            consumer.pause(tp)


log = logging.getLogger("headrace.kafka")


async def ensure_topic(
    connection: KafkaConnection | str,
    topic: str,
    partitions: int,
    replication_factor: int = 1,
    configs: Mapping[str, str] | None = None,
) -> int:
    """Create ``topic`` with ``partitions`` partitions (and topic ``configs``) unless it
    exists; return the partition count it has (the caller decides what another count means).
    Transient failures raise for the caller to retry.

    Example (with a broker at 127.0.0.1:9092)::

        partitions = await ensure_topic("127.0.0.1:9092", "sensors", 8)
    """
    connection = KafkaConnection.of(connection)
    admin = AIOKafkaAdminClient(**connection.client_kwargs())
    await start_client(admin, connection)
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
        topic: await ensure_topic(settings, topic, settings.queues, settings.replication_factor)
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


async def check_reachable(settings: KafkaSettings, within: float = 5.0) -> None:
    """Return once a broker of ``settings`` answers a metadata request; raise
    :class:`QueueAdapterError` (one line) if none does within ``within`` seconds.

    >>> import anyio
    >>> settings = KafkaSettings("127.0.0.1:1", "sensors", 4)    # nothing listens on port 1
    >>> try:
    ...     anyio.run(check_reachable, settings, 0.2)
    ... except QueueAdapterError as exc:
    ...     print(str(exc).split(" (")[0])
    Kafka at 127.0.0.1:1 did not answer within 0.2 s
    """
    quiet_client_library("aiokafka", AIOKAFKA_CONNECTION_LOGGERS)  # its per-attempt errors: DEBUG
    began = time.monotonic()

    async def bootstrap() -> None:
        client = AIOKafkaClient(**settings.client_kwargs())
        try:
            with anyio.fail_after(max(within - (time.monotonic() - began), 0.01)):
                await client.bootstrap()
        except (KafkaError, OSError) as exc:
            refused = refusal(exc, settings) or await diagnose(settings, min(settings.request_timeout, within))
            if refused is not None:
                raise refused from None
            raise
        finally:
            await client.close()

    def unanswered(exc: BaseException, waited: float) -> Exception:
        return QueueAdapterError(
            f"{settings.server} did not answer within {within:g} s ({str(exc) or type(exc).__name__}); "
            "check the address, and that the broker is running and reachable from here"
        )

    await retry(
        bootstrap,
        what=f"reaching {settings.server}",
        is_transient=lambda exc: isinstance(exc, (KafkaError, OSError)),
        give_up_after=within,
        give_up=unanswered,
    )
