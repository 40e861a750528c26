"""The Kafka receiver: reads queue *i* (partition *i* of the topic, or of each of several
topics) for the pulling agent that owns it, and commits what is acknowledged."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CorruptRecordException, KafkaError, UnknownTopicOrPartitionError, UnsupportedCodecError

from streams.adapters.protocols import ReceiverDefaults
from streams.backends.kafka.clients import is_transient, log, permanent_fix, retry_kafka, start_client, stop_client
from streams.backends.kafka.ends import ends_at, fetched_end, listed_bounds, missing_topic, offset_bounds, offsets_text
from streams.backends.kafka.fetched import BatchTaker, Fetched
from streams.backends.kafka.records import ContainerMessages, ContainerRecords, GroupedRecords, RecordReader, prepared
from streams.backends.kafka.refusals import KafkaRefusedError, diagnose
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import QueueMessage
from streams.core.clock import wall_time
from streams.core.errors import QueueAdapterError, QueueFailedError
from streams.core.ids import QueueId, SequenceToken
from streams.core.records import RecordAwareFormat
from streams.core.retry import OutageLog, PacedRetry, reason_of

T = TypeVar("T")


class SavedBeforeCommit(Protocol):
    """What an offset commit relies on and writes first: the saved event-time state
    (:class:`~streams.backends.kafka.changelog.KafkaCheckpointer`)."""

    def pending(self) -> bool: ...
    async def save(self) -> bool: ...  # False: not written, and the offsets wait


class Intake(Protocol):
    """How a fetch's records become messages when some go elsewhere first (the re-keying hop,
    :class:`~streams.backends.kafka.record_receiver.RekeyingHop`)."""

    async def take(self, fetched: Fetched) -> Sequence[QueueMessage]: ...
    def held(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]: ...


# A record batch that cannot be unpacked: what came before it in the same fetch is lost too.
UNREADABLE_BATCH = (UnsupportedCodecError, CorruptRecordException)
NARROW_RECORDS = 10_000  # at most this many read one at a time before such a batch


class KafkaQueueReceiver(ReceiverDefaults):
    """Reads one partition for the pulling agent that owns the queue.

    ``initialize`` places the read position after the group's committed offset, or at the
    configured start. ``get_queue_messages`` returns ``[]`` only once a fetch asked after the
    call began shows nothing more to read (so an empty answer means "caught up", not "a
    fetch is still on its way", nor "nothing was there before the call"), or while the
    broker is unreachable, after a back-off.
    Acknowledged positions are committed to Kafka at most every ``commit_interval`` seconds
    (also from ``get_queue_messages``, so an idle queue's last acknowledgement is not left
    behind) and on :meth:`shutdown`; after a crash, the records acknowledged since the last
    commit are read again (at least once). ``read_range`` reads history with a separate
    consumer, leaving the read position where it is.

    :attr:`caught_up` (the receiver protocol's) says whether the last read left the read
    position at every partition's high-water mark, as the fetch answers reported it.

    :attr:`gathers_containers`: a topic of headrace's own format often holds one event a
    record (a producer's ``send`` of one event); the pulling agent gathers those of one read
    by stream into one batch (:func:`streams.core.record_batch.gathered`).
    """

    def __init__(
        self, settings: KafkaSettings, queue: QueueId, outage: OutageLog, max_record_size: int = 1 << 20
    ) -> None:
        self.queue, self.settings, self.outage = queue, settings, outage
        self._partitions = settings.partitions_of(queue)  # one per topic
        self._partition = self._partitions[0]
        fmt = settings.record_format
        self.gathers_containers = fmt is None  # records of headrace's own format
        # A format that looks things up before it decodes (a schema registry's), once a read.
        self._prepare = fmt.prepare if isinstance(fmt, RecordAwareFormat) else None
        self.reader: RecordReader = (
            ContainerRecords(queue, self._partition)
            if fmt is None
            else GroupedRecords(
                queue,
                self._partitions,
                settings.namespaces,
                fmt,
                settings.key_field,
                settings.repartition_topic,
                max_record_size,
            )
        )
        self._consumer: AIOKafkaConsumer | None = None
        self._taker: BatchTaker | None = None  # takes the consumer's fetched records
        self._rewinder: AIOKafkaConsumer | None = None  # for read_range, made when first needed
        # Per partition: the offset after what is acknowledged, and the same as committed.
        self._acknowledged: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._last_commit = float("-inf")
        # When an empty read began waiting: monotonic seconds, and the wall clock then (ms,
        # aiokafka stamps its fetch answers with the wall clock).
        self._waiting_since: tuple[float, float] | None = None
        self.retries = PacedRetry(outage)  # reads that fail are retried by the agent's next call
        self._diagnosed = False  # this outage's cause asked after (refusals.diagnose)
        self.caught_up = False
        self._topics_checked = time.monotonic()  # when a deleted topic was last looked for
        self._narrowing = 0  # records still to read one at a time (up to an unreadable batch)
        self.saved: SavedBeforeCommit | None = None  # written before each commit
        self.intake: Intake | None = None  # takes each fetch instead of the reader alone

    async def initialize(self) -> None:
        """Connect, and place the read position after the committed offset (or at the
        configured start when the group has none for this partition)."""
        consumer = await self._retry(lambda: self._open_consumer(self.settings.group_id), f"reading {self.queue}")
        self._consumer = consumer
        self._taker = BatchTaker(consumer)
        positions = {tp: await self._start_position(consumer, tp) for tp in self._partitions}
        self.reader.start(positions)
        # A worker's queues commit in turn: while one waits on Kafka, the others' reads go on.
        turn = self.queue.number % self.settings.queues / self.settings.queues
        self._last_commit = time.monotonic() - self.settings.commit_interval * (1 - turn)

    async def _start_position(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
        """Seek ``tp`` to where reading resumes, and note its committed offset."""
        committed = await self._retry(lambda: consumer.committed(tp), f"reading {self.queue}'s committed offset")
        first, reported = await self._retry(lambda: listed_bounds(consumer, tp), f"reading the bounds of {self.queue}")
        if committed is None:
            # The re-keying hop's topic holds only what this group's readers sent on:
            # all of it is to be read, whatever ``start`` says of the source.
            hop = tp.topic == self.settings.repartition_topic
            position = first if self.settings.start == "earliest" or hop else (await self._bounds(consumer, tp))[1]
        elif committed < first:
            log.warning(
                "%s: committed offset %d is older than the oldest retained record %d; records "
                "%d..%d were removed by the topic's retention before they were read",
                self.queue,
                committed,
                first,
                committed,
                first - 1,
            )
            position = first
        elif committed > reported and not await self._reaches(consumer, tp, committed):
            end = (await self._bounds(consumer, tp))[1]
            log.warning(
                "%s: committed offset %d is past the end of the partition (%d): the topic was "
                "recreated? reading from the oldest retained record %d",
                self.queue,
                committed,
                end,
                first,
            )
            position = first
        else:
            position = committed
        consumer.seek(tp, position)
        if committed is not None:
            self._committed[tp] = self._acknowledged[tp] = committed
        return position

    def positions(self, messages: Sequence[QueueMessage]) -> Iterable[int]:
        # A read of headrace's own records makes its messages as they are looked at: their
        # positions come from the records, with no message made.
        if isinstance(messages, ContainerMessages):
            return messages.positions()
        return super().positions(messages)

    async def _reaches(self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> bool:
        """Whether ``offset`` is within ``tp`` (at most its end), as a fetch there answers:
        a broker's listed end can be short of the records (:mod:`~streams.backends.kafka.ends`)."""
        timeout = self.settings.request_timeout
        ends = await self._retry(lambda: ends_at(consumer, {tp: offset}, timeout), f"reading {self.queue}")
        return ends[tp] is not None

    async def get_queue_messages(self, max_count: int) -> Sequence[QueueMessage]:
        self.caught_up = False  # until a read shows it (an outage, a failure: not known)
        asked_since = (time.monotonic(), wall_time() * 1000)  # (the read began)
        if max_count <= 0:
            return []
        consumer = self.require_consumer()
        taker = self._taker
        assert taker is not None  # made with the consumer
        await self._commit_if_due()
        tps = self._partitions
        if self._waiting_since is None:
            self._waiting_since = (time.monotonic(), wall_time() * 1000)
        # "Caught up" rests only on answers to fetches asked after the read began. One asked
        # before may be answered after it (a broker's long poll holds it; a loaded worker
        # takes it in late) with the high-water mark of before: records written meanwhile
        # (sent on through the re-keying hop by another queue, and acknowledged, before this
        # read) would be missed. The consumer asks a partition's next fetch once its last was
        # answered, so the answers that count come after the first ones since the read began.
        asked_after = False
        began = time.monotonic()
        while time.monotonic() - began < self.settings.outage_after:
            try:
                batch = await taker.getmany(
                    *tps,
                    timeout_ms=int(self.settings.poll_timeout * 1000),
                    max_records=1 if self._narrowing > 0 else max_count,
                )
            except KafkaError as exc:
                await self._fetch_failed(consumer, exc, since=began)
                return []
            if batch:
                return await self._took(consumer, batch)
            since = answered_since(asked_since)
            answered = [consumer.last_poll_timestamp(tp) for tp in tps]
            silent = time.monotonic() - self._waiting_since[0]
            if all(a is not None and a >= since for a in answered):
                self._answered()
                if asked_after and await at_highwater(consumer, self._partitions, unknown=True):
                    self.caught_up = True
                    await self._check_topics(consumer)
                    return []  # caught up with what the partitions held when those fetches were asked
                asked_after = True  # the next answers: to fetches asked after these came
                asked_since = self._waiting_since = (time.monotonic(), wall_time() * 1000)
            elif silent >= self.settings.outage_after:
                reason = f"no fetch answer for {self.queue} in {silent:.1f} s"
                await self._back_off(reason, since=time.monotonic() - silent)
                return []
        return []  # answers keep coming, records not yet: the agent asks again

    async def _fetch_failed(self, consumer: AIOKafkaConsumer, exc: KafkaError, since: float) -> None:
        """A fetch raised: narrow down to an unreadable batch, back off through an outage, or
        fail the queue on what no retry mends."""
        if isinstance(exc, UNREADABLE_BATCH) and not self._narrowing:
            # The records of the fetch before the unreadable batch were lost with
            # it: read them again one at a time (from the fetched buffer: cheap), up
            # to the batch's exact offset. A batch that reads the second time (a
            # checksum broken on the way) ends it after NARROW_RECORDS records.
            self._narrowing = NARROW_RECORDS
            for tp in self._partitions:
                consumer.seek(tp, await consumer.position(tp))
            return
        if not is_transient(exc):
            raise await self.failed(exc) from exc
        await self._back_off(reason_of(exc), since=since)

    async def _took(self, consumer: AIOKafkaConsumer, batch: Fetched) -> Sequence[QueueMessage]:
        """The messages of a fetch that brought records."""
        self._answered()
        if self._narrowing:
            self._narrowing -= 1
        fetched = batch
        if self._prepare is not None:
            fetched = await prepared(self._prepare, consumer, batch)
        messages = self.reader.messages(fetched) if self.intake is None else await self.intake.take(fetched)
        # A fetch brings what it brings: the high-water marks say whether more waits.
        self.caught_up = await at_highwater(consumer, self._partitions, unknown=False)
        return messages

    async def _check_topics(self, consumer: AIOKafkaConsumer) -> None:
        """Raise :class:`QueueFailedError` if a topic of this queue has been deleted (asked at
        most every ``outage_after`` seconds while idle: see :func:`~.ends.missing_topic`)."""
        now = time.monotonic()
        if now - self._topics_checked < self.settings.outage_after:
            return
        self._topics_checked = now
        gone = await missing_topic(consumer, self._partitions, self.settings.request_timeout)
        if gone is not None:
            raise await self.failed(UnknownTopicOrPartitionError(f"topic {gone!r} is not on the cluster"))

    async def failed(self, exc: BaseException, what: str = "cannot read") -> QueueFailedError:
        """The one line that says this queue cannot go on: where, why and the fix."""
        where = []
        for tp in self._partitions:
            offset: object = self._acknowledged.get(tp)
            if self._consumer is not None:
                with anyio.move_on_after(1):
                    offset = await self._consumer.position(tp)
            where.append(f"{tp.topic} partition {tp.partition} at offset {offset}")
        reason = str(exc) if type(exc).__name__ in str(exc) else reason_of(exc)  # aiokafka's name themselves
        return QueueFailedError(
            f"{self.queue}: {what} {', '.join(where)}: {reason}; {permanent_fix(exc, self.settings)}"
        )

    def _answered(self) -> None:
        """A fetch answered: the broker is reachable."""
        self._waiting_since = None
        self._diagnosed = False
        self.retries.succeeded()

    async def _back_off(self, reason: str, since: float) -> None:
        """The broker did not answer: report it, and wait before the agent asks again. Once
        an outage, ask a broker why: one that refuses this client's TLS or SASL settings now
        (a certificate renewed wrong, a password rotated) fails the queue with the reason."""
        if not self._diagnosed:
            self._diagnosed = True
            refused = await diagnose(self.settings)
            if refused is not None:
                raise QueueFailedError(f"{self.queue}: {refused}") from None
        await self.retries.failed(reason, since=since)

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        if not tokens:
            return
        # The pulling agent's tokens are in queue order (agents.checkpoint.Tokens.ascending).
        ascending = getattr(tokens, "ascending", False)
        last = tokens[-1].sequence_number if ascending else max(t.sequence_number for t in tokens)
        self.acknowledge(self.reader.acknowledged(last))
        await self._commit_if_due()

    def acknowledge(self, offsets: Mapping[TopicPartition, int]) -> None:
        """These offsets may be committed (never moving one back; an intake may hold them back)."""
        if self.intake is not None:
            offsets = self.intake.held(offsets)
        acknowledged = self._acknowledged
        for tp, offset in offsets.items():
            if offset > acknowledged.get(tp, -1):
                acknowledged[tp] = offset

    async def _commit_if_due(self) -> None:
        if time.monotonic() - self._last_commit >= self.settings.commit_interval:
            await self._commit()

    async def _commit(self) -> bool:
        """Commit the acknowledged position; ``False`` if the broker could not be reached
        (the position stays pending and is committed on a later try)."""
        committed = self._committed
        offsets = {tp: o for tp, o in self._acknowledged.items() if committed.get(tp) != o}
        saved = self.saved
        if self._consumer is None or not (offsets or (saved is not None and saved.pending())):
            return True
        self._last_commit = began = time.monotonic()
        if saved is not None and not await saved.save():
            return False  # the offsets wait for the states they rely on
        if not offsets:
            return True
        try:
            with anyio.fail_after(self.settings.request_timeout):
                await self._consumer.commit(offsets)
        except Exception as exc:  # sorted into transient and not just below
            if not (isinstance(exc, TimeoutError) or is_transient(exc)):
                raise QueueFailedError(
                    f"Kafka refused the offset commit of {self.queue} for group "
                    f"{self.settings.group_id!r} ({type(exc).__name__}); headrace assigns "
                    "partitions itself, so its group id must not be used by consumers that "
                    "join the group: give headrace a group_id of its own"
                ) from exc
            reason = f"offset commit: {reason_of(exc)}"
            self.outage.failed(reason, since=began)
            return False
        committed.update(offsets)
        self.outage.recovered()
        return True

    def acknowledged_offset(self, tp: TopicPartition) -> int | None:
        """The offset after what is acknowledged of ``tp`` (None: nothing yet)."""
        return self._acknowledged.get(tp)

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        """Up to ``max_count`` records from offset ``start_sequence`` (or the oldest retained
        one after it), without moving the read position: rewinds and cursor catch-up."""
        if max_count <= 0:
            return []
        if self._rewinder is None:
            self._rewinder = await self._retry(lambda: self._open_consumer(None), f"rewinding {self.queue}")
        rewinder: AIOKafkaConsumer = self._rewinder
        tp = self._partition
        first, end = await self._bounds(rewinder, tp)
        offset = max(start_sequence, first)
        if offset >= end:
            return []
        rewinder.seek(tp, offset)
        out: list[QueueMessage] = []
        with anyio.move_on_after(self.settings.give_up_after) as scope:
            while len(out) < max_count and (not out or out[-1].sequence_number < end - 1):
                batch = await rewinder.getmany(
                    tp,
                    timeout_ms=int(self.settings.poll_timeout * 1000),
                    max_records=max_count - len(out),
                )
                # A registry format's schemas are looked up first, as reading does.
                fetched: Fetched = batch if self._prepare is None else await prepared(self._prepare, rewinder, batch)
                out.extend(self.reader.messages(fetched))
                if not batch and await rewinder.position(tp) >= end:
                    break  # the last offsets before the end hold no records (compaction)
        if scope.cancelled_caught:
            raise QueueAdapterError(
                f"rewinding {self.queue} to offset {offset} failed: no answer from "
                f"{self.settings.server} within {self.settings.give_up_after:.0f} s"
            )
        return out

    async def shutdown(self) -> None:
        """Commit the last acknowledged position and disconnect.

        A commit that fails here is logged, not raised: the queue is being let go either
        way, and the records after the last committed offset will be read again.
        """
        try:
            if self._consumer is not None and not await self._commit():
                log.warning(
                    "%s: offset %s (after the last acknowledged record) was not committed: "
                    "%s is unreachable; records from offset %s on will be read again",
                    self.queue,
                    offsets_text(self._partitions, self._acknowledged),
                    self.settings.server,
                    offsets_text(self._partitions, self._committed),
                )
        except QueueAdapterError as exc:
            log.error(
                "%s: %s; records from offset %s on will be read again",
                self.queue,
                exc,
                offsets_text(self._partitions, self._committed),
            )
        finally:
            consumers = [c for c in (self._consumer, self._rewinder) if c is not None]
            self._consumer = self._rewinder = self._taker = None
            for consumer in consumers:
                with anyio.move_on_after(self.settings.request_timeout):
                    await stop_client(consumer)

    async def _open_consumer(self, group_id: str | None) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self.settings.consumer_kwargs(
                group_id=group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",  # an offset lost to retention: the oldest retained
                fetch_max_wait_ms=int(self.settings.poll_timeout * 1000),
            )
        )
        try:
            await start_client(consumer, self.settings)
        except KafkaRefusedError as exc:  # not an outage: the agent must not retry it for ever
            raise QueueFailedError(f"{self.queue}: {exc}") from None
        consumer.assign(self._partitions)
        return consumer

    async def _bounds(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int]:
        """The oldest retained offset of ``tp`` and the offset its next record will get."""
        timeout = self.settings.request_timeout
        return await self._retry(lambda: offset_bounds(consumer, tp, timeout), f"reading the bounds of {self.queue}")

    def require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise QueueAdapterError(f"the receiver of {self.queue} is not initialized (call initialize())")
        return self._consumer

    async def _retry(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        try:
            return await retry_kafka(operation, what, self.settings, self.outage, self.settings.request_timeout)
        except KafkaError as exc:  # retry_kafka lets through only what retrying cannot fix
            raise await self.failed(exc, f"{what} failed for") from exc


async def at_highwater(consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition], *, unknown: bool) -> bool:
    """Whether the read position is at every partition's high-water mark as the last fetch
    answers gave it (``unknown``: what a partition with no answer yet counts as)."""
    for tp in partitions:
        highwater = fetched_end(consumer, tp)
        if highwater is None:
            if not unknown:
                return False
        elif await consumer.position(tp) < highwater:
            return False
    return True


def answered_since(waiting_since: tuple[float, float]) -> float:
    """The wall-clock ms from which a fetch answer counts as come since the wait began
    (``(monotonic s, wall ms)`` then): that wall time, or, if the wall clock has stepped back
    since, the same moment read on the clock as it is now, so an answer is not missed.

    >>> answered_since((time.monotonic(), wall_time() * 1000 + 600_000)) < wall_time() * 1000
    True
    """
    began, wall_ms = waiting_since
    return min(wall_ms, (wall_time() - (time.monotonic() - began)) * 1000)
