"""Event-time state on Kafka: a compacted changelog topic beside the queues' topic.

Each activation's saved state (:mod:`streams.eventtime.snapshot`, collected by the pulling
agent's :class:`~agents.checkpoint.ActivationStates`) is one record of
``<group_id>.state.<topic>``, partition = queue, so whoever reads queue *i* next reads
partition *i* of the changelog:

- key: ``[queue, consumer type, stream id]`` (msgpack);
- value: ``[format, sequence number, event index, state]`` (msgpack): the position of the
  last event the state holds, and the state; no value (a tombstone) once the activation
  has nothing open, so compaction drops the key.

**The order that keeps a restart correct.** :class:`KafkaStateReceiver` writes the states
that changed since its last commit, waits until Kafka has every one of them (``acks=all``),
and only then commits the queue's offset. A committed offset is thus never ahead of the
states it relies on: after a SIGKILL, the next owner restores each activation from its
newest record and replays from the committed offset, skipping the events a state already
holds. A write that fails commits nothing; the states stay pending (and their events keep
holding the offset) until a later commit writes them: after an outage, or, for a state Kafka
refuses (larger than the topic takes), once its window has closed and the state is small
again (logged once).

**Loading.** A receiver that takes a queue over reads the changelog partition from its
oldest retained record up to its end, and keeps the newest record of each key (a tombstone
removes it). Kafka's compaction keeps that read proportional to the open state; a broker
that never compacts (Tansu, which accepts ``cleanup.policy=compact`` but keeps every
record) gives the same answer after a longer read.

**Topics of one event per record** (``records="json"``, ...; :class:`KafkaRecordReceiver`)
save states too. Their queue positions depend on how the reads were grouped
(:mod:`~streams.backends.kafka.records`), so a state's position there is the offset of the
last record it holds (``offset:0``), which every read gives that record: a replay, grouped
otherwise and from an older offset, skips exactly those records (a stream's records are in
one partition of one topic, in order).

>>> decode_state(encode_state(7, 2, b"s"))
(SequenceToken(sequence_number=7, event_index=2), b's')
>>> decode_key(state_key(3, "Counts", "meters/m1"))
(3, 'Counts', 'meters/m1')
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import msgpack
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.adapters.protocols import StateKey, StateRows, StateSource
from streams.backends.kafka.clients import (
    Producers,
    ensure_topic,
    is_transient,
    log,
    read_partition,
    retry_kafka,
    start_client,
    stop_client,
)
from streams.backends.kafka.fetched import Fetched
from streams.backends.kafka.receiver import KafkaQueueReceiver
from streams.backends.kafka.repartition import BATCH_BYTES, SEEN, SENDS_IN_FLIGHT, Forward, Rekeying, Sends
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import QueueMessage
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, SequenceToken
from streams.core.retry import OutageLog, reason_of

FORMAT = 1
# The topic's configs. Kafka compacts only closed segments: closing one every 10 minutes
# (not every week) keeps what a takeover reads near the open state plus recent writes.
CHANGELOG: Mapping[str, str] = {"cleanup.policy": "compact", "segment.ms": "600000"}

SavedStates = dict[StateKey, tuple[SequenceToken, bytes]]


def changelog_topic(settings: KafkaSettings) -> str:
    """The changelog of the provider reading ``settings.topic`` under ``settings.group_id``.

    >>> changelog_topic(KafkaSettings("localhost:9092", "sensors"))
    'headrace.state.sensors'
    """
    return f"{settings.group_id}.state.{settings.topic}"


def state_key(queue: int, consumer: str, stream: str) -> bytes:
    key: bytes = msgpack.packb([queue, consumer, stream])
    return key


def decode_key(key: bytes) -> tuple[int, str, str]:
    queue, consumer, stream = msgpack.unpackb(key)
    return int(queue), str(consumer), str(stream)


def encode_state(sequence_number: int, event_index: int, state: bytes) -> bytes:
    value: bytes = msgpack.packb([FORMAT, sequence_number, event_index, state])
    return value


def decode_state(value: bytes) -> tuple[SequenceToken, bytes]:
    fmt, seq, idx, state = msgpack.unpackb(value)
    if fmt != FORMAT:
        raise ValueError(f"changelog record of format {fmt!r}, not {FORMAT}")
    return SequenceToken(seq, idx), bytes(state)


class KafkaChangelog:
    """Writes and reads one provider's changelog topic (shared by its receivers).

    Example (the Kafka adapter makes one; its receivers write before each commit)::

        changelog = KafkaChangelog(settings, outage)
        await changelog.write(QueueId(0), ([("Counts", "meters/m1", 41, 0, state)], []))
        saved = await changelog.load(QueueId(0))  # {("Counts", "meters/m1"): (41:0, state)}
        await changelog.close()
    """

    def __init__(self, settings: KafkaSettings, outage: OutageLog, producers: Producers | None = None) -> None:
        self.settings = settings
        self.outage = outage
        self.producers = producers if producers is not None else Producers(settings)  # the adapter's: one fallback
        self.topic = changelog_topic(settings)
        self.max_record_bytes = 16 << 20  # the producer's limit (a Collect's state can be large)
        self._producer: AIOKafkaProducer | None = None
        self._starting = anyio.Lock()
        # The re-keying hops of one worker's receivers enqueue their batches on the shared
        # producer one at a time (see Rekeying.forward).
        self.enqueueing = anyio.Lock()
        self._refused: set[QueueId] = set()  # queues whose last write Kafka refused (logged)

    async def ensure_topic(self) -> None:
        """Create the topic unless it exists; refuse one without a partition per queue (the
        states would land elsewhere). Transient failures raise for the caller to retry."""
        settings = self.settings
        found = await ensure_topic(settings, self.topic, settings.queues, settings.replication_factor, CHANGELOG)
        if found != self.settings.queues:
            raise ConfigurationError(
                f"Kafka topic {self.topic!r} (the saved event-time state) has {found} partitions "
                f"but queues={self.settings.queues}: use queues={found}, or another group_id"
            )

    async def write(self, queue: QueueId, rows: StateRows) -> bool:
        """Write ``rows`` to ``queue``'s partition and wait until Kafka has all of them.
        ``False`` if any did not land (nothing may be relied on then): the cluster could not
        be reached, or it refused a record (too large, not authorized: logged once, and
        the queue's offset stays where it is until a write succeeds)."""
        upserts, deletes = rows
        if not upserts and not deletes:
            return True
        records: list[tuple[bytes, bytes | None]] = [(state_key(queue.number, c, s), None) for c, s in deletes]
        records += [(state_key(queue.number, c, s), encode_state(seq, idx, state)) for c, s, seq, idx, state in upserts]
        began = time.monotonic()
        try:
            with anyio.fail_after(self.settings.request_timeout):
                await self._send(queue, records)
        except Exception as exc:  # sorted into transient and not just below
            if isinstance(exc, TimeoutError) or is_transient(exc):
                reason = f"saving event-time state: {reason_of(exc)}"
                self.outage.failed(reason, since=began)
            elif queue not in self._refused:
                self._refused.add(queue)
                log.warning(
                    "%s: Kafka refused its saved event-time state (topic %r): %r; the queue's "
                    "committed offset stays where it is until the state can be saved (it is "
                    "tried again at every commit)",
                    queue,
                    self.topic,
                    exc,
                )
            return False
        if queue in self._refused:
            self._refused.discard(queue)
            log.warning("%s: its event-time state is saved again; its offset commits go on", queue)
        return True

    async def _send(self, queue: QueueId, records: list[tuple[bytes, bytes | None]]) -> None:
        """Send ``records`` in order and wait for all; raise the first failure."""
        producer = await self._producer_started()
        sending: list[asyncio.Future[Any]] = []
        refused: Exception | None = None  # send() itself refused one: the rest wait
        for key, value in records:
            try:
                sending.append(await producer.send(self.topic, value, key=key, partition=queue.number))
            except Exception as exc:  # raised below, after what was sent has landed or failed
                refused = exc
                break
        for result in await asyncio.gather(*sending, return_exceptions=True):
            if isinstance(result, Exception):
                raise result
        if refused is not None:
            raise refused

    async def load(self, queue: QueueId) -> SavedStates:
        """The newest saved state of each activation of ``queue``."""
        tp = TopicPartition(self.topic, queue.number)
        poll_ms = int(self.settings.poll_timeout * 1000)
        consumer = AIOKafkaConsumer(
            **self.settings.consumer_kwargs(
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",  # what compaction or retention left
                fetch_max_wait_ms=poll_ms,
            )
        )
        await start_client(consumer, self.settings)
        try:
            consumer.assign([tp])
            newest: dict[bytes, bytes | None] = {}
            for record in await read_partition(consumer, tp, 0, self.settings):
                if record.key is not None:
                    newest[record.key] = record.value
        finally:
            await stop_client(consumer)
        return _states_of(queue, newest)

    async def _producer_started(self) -> AIOKafkaProducer:
        if self._producer is None:
            async with self._starting:  # the receivers of one worker share one producer
                if self._producer is None:
                    self._producer = await self.producers.start(
                        max_request_size=self.max_record_bytes, max_batch_size=BATCH_BYTES
                    )
        return self._producer

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()


def _states_of(queue: QueueId, newest: Mapping[bytes, bytes | None]) -> SavedStates:
    states: SavedStates = {}
    for key, value in newest.items():
        try:
            number, consumer, stream = decode_key(key)
            if number != queue.number or value is None:
                continue
            states[(consumer, stream)] = decode_state(value)
        except Exception as exc:  # a record another program wrote: not ours to restore
            log.warning("%s: changelog record %r is not a saved state (%r); ignored", queue, key[:80], exc)
    return states


class KafkaStateReceiver(KafkaQueueReceiver):
    """A Kafka receiver that saves its activations' event-time state in the changelog, before
    each offset commit (a :class:`~streams.adapters.protocols.StatefulReceiver`).

    Example (``adapter.create_receiver`` makes it for a topic of headrace's records)::

        receiver = KafkaStateReceiver(settings, QueueId(0), outage, adapter.changelog)
        await receiver.initialize()
        saved = await receiver.load_states()  # the pulling agent restores its activations
        receiver.state_source = states  # agents.checkpoint.ActivationStates: written at each commit
    """

    def __init__(
        self,
        settings: KafkaSettings,
        queue: QueueId,
        outage: OutageLog,
        changelog: KafkaChangelog,
        max_record_size: int = 1 << 20,
    ) -> None:
        super().__init__(settings, queue, outage, max_record_size)
        self.changelog = changelog
        self.state_source: StateSource | None = None  # set by the pulling agent
        # One write at a time: a commit can begin while the last one's write still waits
        # on an unreachable cluster, and the source tracks one write in flight.
        self._saving = anyio.Lock()

    async def load_states(self) -> SavedStates:
        """The states saved for this queue, by whichever worker read it before."""
        what = f"loading the saved state of {self.queue}"
        return await retry_kafka(lambda: self.changelog.load(self.queue), what, self.settings, self.outage)

    def _states_pending(self) -> bool:
        return self.state_source is not None and self.state_source.pending()

    async def _save_states(self) -> bool:
        async with self._saving:
            source = self.state_source
            if source is None or not source.pending():
                return True
            rows = source.collect()
            try:
                ok = await self.changelog.write(self.queue, rows)
            except BaseException:
                source.written(False)
                raise
            source.written(ok)
            return ok


class KafkaRecordReceiver(KafkaStateReceiver):
    """The receiver of topics of one event per record: it hands the pulling agent one batch
    per stream and read (see :mod:`~streams.backends.kafka.records`), and saves states like
    :class:`KafkaStateReceiver`. Its queue positions are those of its reads' groupings,
    which a re-read would not reproduce: it does not rewind (so it is no
    :class:`~streams.adapters.protocols.RewindableReceiver`). A saved state's position is a
    record's offset, which every read gives its event
    (:meth:`~streams.core.record_batch.RecordEventBatch.last_position`)."""

    read_range = None  # type: ignore[assignment]

    def __init__(
        self,
        settings: KafkaSettings,
        queue: QueueId,
        outage: OutageLog,
        changelog: KafkaChangelog,
        max_record_size: int = 1 << 20,
    ) -> None:
        super().__init__(settings, queue, outage, changelog, max_record_size)
        hop = settings.repartition_topic
        fmt, key_field = settings.record_format, settings.key_field
        self.rekeying: Rekeying | None = None  # records without a key re-keyed through the hop
        if hop is not None and fmt is not None and key_field is not None:
            source, repartition = self._partitions  # partition i of the topic and of the hop's
            self.rekeying = Rekeying(settings, source, repartition, fmt, key_field)
        self._sends = Sends(self._send_on)  # reads sent on through the hop, until acknowledged

    @property
    def forwarded(self) -> int:
        """Records sent on through the re-keying hop (the agent counts them as read:
        :class:`~streams.adapters.protocols.ForwardingReceiver`); :attr:`caught_up` stays
        false until Kafka has them."""
        return self._sends.handed_on

    async def get_queue_messages(self, max_count: int) -> Sequence[QueueMessage]:
        handed_on = self._sends.handed_on
        messages = await super().get_queue_messages(max_count)
        if self._sends:
            if not messages and self._sends.handed_on == handed_on:  # nothing read: wait for them here
                await self._settled(keep=0)
            self.caught_up = self.caught_up and not self._sends
        return messages

    async def _take(self, fetched: Fetched) -> Sequence[QueueMessage]:
        """Send the records to re-key through the hop, and make the messages of the rest
        (the hop's duplicates left out). Kafka acknowledges the records sent on while the
        agent delivers (:class:`~streams.backends.kafka.repartition.Sends`); the source's
        offset is acknowledged up to the oldest record sent on that Kafka does not have yet.
        Should a send fail, nothing of the next read is taken (the consumer goes back to its
        first records) until the failed records are sent again, after a back-off."""
        rekeying = self.rekeying
        if rekeying is None:
            return self._reader.messages(fetched)
        if not await self._settled(keep=SENDS_IN_FLIGHT - 1):
            consumer = self._require_consumer()
            for tp, records in fetched.items():
                if records:
                    consumer.seek(tp, records[0].offset)
            return []
        forwards = rekeying.to_forward(fetched)
        if forwards:
            self._sends.add(forwards)
        ends = {tp: records[-1].offset + 1 for tp, records in fetched.items() if records}
        messages = self._reader.messages(rekeying.kept(fetched, forwards), ends)
        # No message stands for the records sent on or skipped as copies: what they leave
        # behind (up to the oldest message not yet acknowledged) is done with now.
        self._acknowledge(self._reader.acknowledged(-1))
        return messages

    async def _send_on(self, forwards: Sequence[Forward]) -> None:
        assert self.rekeying is not None
        with anyio.fail_after(self.settings.request_timeout):
            producer = await self.changelog._producer_started()
            await self.rekeying.forward(producer, forwards, self.changelog.enqueueing)

    async def _settled(self, keep: int) -> bool:
        """Take in Kafka's acknowledgements of the reads sent on, waiting until at most
        ``keep`` are pending; ``False`` once a send failed (and the receiver backed off:
        the failed records are sent again first by the next call)."""
        began = time.monotonic()
        try:
            await self._sends.settle(keep)
        except Exception as exc:  # sorted into transient and not just below
            if not (isinstance(exc, TimeoutError) or is_transient(exc)):
                raise await self._failed(exc, "cannot re-key (send to the repartition topic)") from exc
            await self._retries.failed(f"re-keying {self.queue}: {reason_of(exc)}", since=began)
            return False
        finally:
            self._acknowledge(self._reader.acknowledged(-1))  # what the acknowledged sends held back
        return True

    def _acknowledge(self, offsets: Mapping[TopicPartition, int]) -> None:
        """As the receiver's, the source's offset never past a record Kafka does not have
        through the hop yet."""
        oldest = self._sends.oldest
        if oldest is not None and self.rekeying is not None:
            source = self.rekeying.source
            if offsets.get(source, -1) > oldest:
                offsets = {**offsets, source: oldest}
        super()._acknowledge(offsets)

    async def shutdown(self) -> None:
        """Wait for the reads sent on (within ``request_timeout``), then as the receiver's:
        a source offset they still hold back is read again by whoever reads the queue next."""
        try:
            with anyio.move_on_after(self.settings.request_timeout):
                await self._sends.settle(keep=0)
        except Exception as exc:  # logged: the queue is let go either way
            log.warning("%s: records sent on through the re-keying hop not acknowledged: %r", self.queue, exc)
        await super().shutdown()

    async def load_states(self) -> SavedStates:
        """The saved states, and the hop's memory of the source records it took."""
        saved = await super().load_states()
        if self.rekeying is not None:
            seen = {stream: state for (consumer, stream), (_, state) in saved.items() if consumer == SEEN}
            self.rekeying.seen.restore_rows(seen)
            saved = {key: value for key, value in saved.items() if key[0] != SEEN}
        return saved

    async def _save_states(self) -> bool:
        """Save the hop's memory as of the offset about to be committed, then the states."""
        rekeying = self.rekeying
        if rekeying is not None:
            offset = self._acknowledged.get(rekeying.repartition)
            rows = [] if offset is None else rekeying.seen.committed_rows(offset)
            if rows:
                if not await self.changelog.write(self.queue, (rows, [])):
                    return False
                rekeying.seen.saved(rows)
        return await super()._save_states()
