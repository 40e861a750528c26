"""Event-time state on Kafka: a compacted changelog topic beside the queues' topic
(:class:`KafkaChangelog`), and each queue's checkpointer on it (:class:`KafkaCheckpointer`).

Each activation's saved state (:mod:`streams.eventtime.snapshot`, collected by the pulling
agent's :class:`~agents.checkpoint.ActivationStates`) is one record of
``<group_id>.state.<topic>``, partition = queue, so whoever reads queue *i* next reads
partition *i* of the changelog:

- key: ``[queue, consumer type, stream id]`` (msgpack);
- value: ``[format, sequence number, event index, state]`` (msgpack): the position of the
  last event the state holds, and the state; no value (a tombstone) once the activation
  has nothing open, so compaction drops the key.

**The order that keeps a restart correct.** A receiver's :class:`KafkaCheckpointer` writes the states
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

**Topics of one event per record** (``records="json"``, ...; :class:`~streams.backends.kafka.record_receiver.KafkaRecordReceiver`)
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
from collections.abc import Mapping
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
from streams.backends.kafka.repartition import BATCH_BYTES
from streams.backends.kafka.settings import KafkaSettings
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


class KafkaCheckpointer:
    """One queue's event-time state in the changelog: what its receiver writes before each
    offset commit, and waits for (a committed offset is never ahead of the states it relies
    on), and what a receiver that takes the queue over loads.

    Example (``adapter.create_receiver`` makes one per queue, for its receiver)::

        checkpointer = KafkaCheckpointer(adapter.changelog, QueueId(0))
        saved = await checkpointer.load_states()  # the pulling agent restores its activations
        checkpointer.state_source = states  # agents.checkpoint.ActivationStates
        await checkpointer.save()  # before the offset commit; False: the commit waits
    """

    def __init__(self, changelog: KafkaChangelog, queue: QueueId) -> None:
        self.changelog = changelog
        self.queue = queue
        self.state_source: StateSource | None = None  # set by the pulling agent
        # One write at a time: a commit can begin while the last one's write still waits
        # on an unreachable cluster, and the source tracks one write in flight.
        self._saving = anyio.Lock()

    async def load_states(self) -> SavedStates:
        """The states saved for this queue, by whichever worker read it before."""
        changelog = self.changelog
        what = f"loading the saved state of {self.queue}"
        return await retry_kafka(lambda: changelog.load(self.queue), what, changelog.settings, changelog.outage)

    def pending(self) -> bool:
        """Saved event-time state waits to be written."""
        return self.state_source is not None and self.state_source.pending()

    async def save(self) -> bool:
        """Write the pending state and wait for Kafka to have it; False: not written."""
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
