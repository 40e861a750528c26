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

**The local state store.** A worker keeps its queues' states on its own disk too (the
embedded store's SQLite, one file per worker: :mod:`streams.backends.embedded.changelog_copy`,
under ``state_dir``), each queue's with the changelog offset it reflects. Once Kafka has a
write, the same rows and the offset after them go into the local store in one transaction,
before the queue's offset is committed. A parked durable state is then on disk and in the
changelog only, read by key when its stream has data again (the receiver is a
:class:`~streams.adapters.protocols.StateLookup`, as on the embedded store): the worker's
memory does not grow with parked streams.

**Loading.** A receiver that takes a queue over reads the changelog partition into its local
store and restores the states a worker must hold (window states, durable ones with a timer):

- a local offset within the partition's retained range: only the records after it (a worker
  restarted on the same machine reads the changelog's tail);
- no local copy (a new owner), a damaged file, or an offset past the changelog's end (never
  trusted past it) or before its oldest retained record: the copy is rebuilt from the oldest
  retained record to the end, keeping the newest record of each key (a tombstone removes it).

**Damage found in use** (SQLite reads a page of the local store as malformed) sets the file
aside and starts an empty one (:mod:`streams.backends.embedded.changelog_copy`); every own
queue's copy is then rebuilt from the changelog in its turn: by the write that found it (its
records are in the changelog already), or before the queue's next read
(:meth:`KafkaChangelog.mend`). A lookup of a parked state before that is answered from the
partition as the changelog gives it (:meth:`KafkaChangelog.saved_states`).

A worker that kept a standby copy of the queue (``standby_replicas``:
:mod:`~streams.backends.kafka.standby`) has a local offset near the end: it reads the tail.
Each load logs which, with the records read (:attr:`KafkaChangelog.records_read` counts
them). Kafka's compaction keeps a rebuild proportional to the open state; a broker that never
compacts (Tansu, which accepts ``cleanup.policy=compact`` but keeps every record) gives the
same answer after a longer read. A provider without a local store (a bare
:class:`KafkaChangelog`) reads the whole partition into memory at each load.

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
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgpack
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import MessageSizeTooLargeError

from streams.adapters.protocols import LocalStates, StateKey, StateRows, StateSource
from streams.backends.kafka.batches import BATCH_BYTES, filled, record_count
from streams.backends.kafka.clients import (
    Producers,
    ensure_topic,
    is_transient,
    log,
    partition_chunks,
    read_partition,
    retry_kafka,
    start_client,
    stop_client,
)
from streams.backends.kafka.ends import offset_bounds
from streams.backends.kafka.own_copies import OwnCopies, SavedStates
from streams.backends.kafka.settings import KafkaSettings
from streams.core.clock import wall_time
from streams.core.errors import ConfigurationError, LocalStoreDamagedError, QueueFailedError
from streams.core.ids import QueueId, SequenceToken
from streams.core.retry import OutageLog, reason_of

FORMAT = 1
# The topic's configs. Kafka compacts only closed segments: closing one every 10 minutes
# (not every week) keeps what a takeover reads near the open state plus recent writes.
# How long compaction keeps a tombstone (Kafka's default, set so that it is known): a local
# copy last brought up to date longer ago than that may miss a deletion, and is rebuilt.
DELETE_RETENTION = 86_400.0
CHANGELOG: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "delete.retention.ms": str(int(DELETE_RETENTION * 1000)),
}

# Opens a worker's local state store in a directory (the embedded store's changelog_copy).
OpenLocalStates = Callable[[Path], LocalStates]


class StandbyCopies(Protocol):
    """The standby copies a worker keeps (:mod:`streams.backends.kafka.standby`), as a load
    sees them: a queue that becomes this worker's is no longer followed."""

    def stop_following(self, queue: QueueId) -> None: ...


def changelog_topic(settings: KafkaSettings) -> str:
    """The changelog of the provider reading ``settings.topic`` under ``settings.group_id``.

    >>> changelog_topic(KafkaSettings("localhost:9092", "sensors"))
    'headrace.state.sensors'
    """
    return f"{settings.group_id}.state.{settings.topic}"


def local_state_dir(settings: KafkaSettings) -> Path:
    """Where the workers of ``settings``' changelog keep their local state stores.

    >>> local_state_dir(KafkaSettings("localhost:9092", "sensors", state_dir="/var/lib/hr")).as_posix()
    '/var/lib/hr/headrace.state.sensors'
    """
    base = settings.state_dir if settings.state_dir is not None else Path(tempfile.gettempdir()) / "headrace-state"
    return Path(base) / changelog_topic(settings)


def rebuild_reason(stored: int | None, first: int, end: int, age: float = 0.0) -> str | None:
    """Why a local copy of a changelog partition at offset ``stored``, brought there ``age``
    seconds ago, cannot be read on from, the partition holding offsets ``first`` to ``end``;
    ``None``: it can (only its tail is read).

    >>> rebuild_reason(7, 0, 10) is None, rebuild_reason(None, 0, 10)
    (True, 'no local copy of the partition')
    >>> rebuild_reason(12, 0, 10), rebuild_reason(3, 5, 10)
    ("its offset 12 is past the changelog's end 10", "its offset 3 is before the changelog's oldest record 5")
    >>> rebuild_reason(7, 0, 10, age=2 * 86_400.0)
    'its copy is 48.0 h old: compaction may have dropped deletions since (delete.retention.ms 24.0 h)'
    """
    if stored is None:
        return "no local copy of the partition"
    if age >= DELETE_RETENTION:
        return (
            f"its copy is {age / 3600:.1f} h old: compaction may have dropped deletions since "
            f"(delete.retention.ms {DELETE_RETENTION / 3600:.1f} h)"
        )
    if stored > end:
        return f"its offset {stored} is past the changelog's end {end}"
    if stored < first:
        return f"its offset {stored} is before the changelog's oldest record {first}"
    return None


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

    With ``open_local`` (the runtime gives the embedded store's), the worker's local state
    store is opened at its first load, kept in step with each write, and loads read only what
    it lacks (see the module).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        outage: OutageLog,
        producers: Producers | None = None,
        open_local: OpenLocalStates | None = None,
    ) -> None:
        self.settings = settings
        self.open_local = open_local
        self.local: LocalStates | None = None  # opened by the first load
        self._opening = anyio.Lock()
        self.records_read = 0  # changelog records the loads read
        self._writing: dict[int, anyio.Lock] = {}  # one write at a time per queue (offsets in order)
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
        self.standby: StandbyCopies | None = None  # the standby copies this worker keeps, if any
        self.copies = OwnCopies()  # own queues' ends, "synced" times, copies lost to damage

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
        async with self.turn(queue):
            return await self._written(queue, rows)

    async def _written(self, queue: QueueId, rows: StateRows) -> bool:
        """:meth:`write`, in the queue's write turn."""
        upserts, deletes = rows
        if not upserts and not deletes:
            return True
        records: list[tuple[bytes, bytes | None]] = [(state_key(queue.number, c, s), None) for c, s in deletes]
        records += [(state_key(queue.number, c, s), encode_state(seq, idx, state)) for c, s, seq, idx, state in upserts]
        self.copies.writing(queue.number)  # records may land: the end is unsure until they have
        offsets = await self._sent(queue, records)
        if offsets is None:
            return False
        if offsets:
            self.copies.written(queue.number, max(offsets) + 1)
        return await self._kept_locally(queue, rows, offsets)

    async def _sent(self, queue: QueueId, records: list[tuple[bytes, bytes | None]]) -> list[int] | None:
        """Send ``records``; their offsets once Kafka has every one, ``None`` if not."""
        began = time.monotonic()
        try:
            with anyio.fail_after(self.settings.request_timeout):
                offsets = await self._send(queue, records)
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
            return None
        if queue in self._refused:
            self._refused.discard(queue)
            log.warning("%s: its event-time state is saved again; its offset commits go on", queue)
        return offsets

    async def _kept_locally(self, queue: QueueId, rows: StateRows, offsets: list[int]) -> bool:
        """Put the rows Kafka has (at ``offsets``) into the local state store, with the offset
        after them; ``False`` if it cannot be written (the states stay pending: the commit
        waits, and the next one writes them to both again)."""
        local = self.local
        if local is None or not offsets:
            return True
        if self.lost(queue):  # the rows are in the changelog: the rebuild has them
            return await self._rebuilt(queue, local)
        first, last = min(offsets), max(offsets)
        # Records of others between them (a retried send's copy): the store's offset stays.
        after = first if last - first + 1 == len(offsets) else -1
        try:
            await local.apply(queue.number, rows, next_offset=last + 1, after=after)
            self.copies.synced_at[queue.number] = wall_time()
        except LocalStoreDamagedError:  # set aside: this queue's copy is rebuilt now
            self.lost(queue)
            return await self._rebuilt(queue, local, mark=True)
        except Exception as exc:  # the disk: full, removed
            log.warning(
                "%s: the local state store under %s cannot be written (%r); the queue's committed "
                "offset stays where it is until it can",
                queue,
                local_state_dir(self.settings),
                exc,
            )
            return False
        return True

    async def _send(self, queue: QueueId, records: list[tuple[bytes, bytes | None]]) -> list[int]:
        """Send ``records`` in order and wait for all; their offsets. Raise the first failure
        (a record larger than :attr:`max_record_bytes` before any is sent)."""
        producer = await self._producer_started()
        limit = self.max_record_bytes
        for key, value in records:
            if len(key) + len(value or b"") > limit:
                raise MessageSizeTooLargeError(
                    f"a saved state of {len(key) + len(value or b'')} bytes is larger than the "
                    f"changelog's record limit ({limit} bytes)"
                )
        no_headers: list[tuple[str, bytes]] = []
        batches = filled(producer, ((None, key, value, no_headers) for key, value in records))
        sending: list[tuple[asyncio.Future[Any], int]] = []
        refused: Exception | None = None  # the producer refused a batch: the rest wait
        for batch in batches:
            try:
                sending.append(
                    (await producer.send_batch(batch, self.topic, partition=queue.number), record_count(batch))
                )
            except Exception as exc:  # raised below, after what was sent has landed or failed
                refused = exc
                break
        offsets: list[int] = []
        results = await asyncio.gather(*(sent for sent, _ in sending), return_exceptions=True)
        for (_, count), result in zip(sending, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            offsets += range(result.offset, result.offset + count)
        if refused is not None:
            raise refused
        return offsets

    async def load(self, queue: QueueId) -> SavedStates:
        """The newest saved state of each activation of ``queue`` (with a local state store:
        those a worker holds, the others left there to be read by key)."""
        local = await self.local_states()
        if local is not None:
            return await self._restore(queue, local)
        return await self._read_whole(queue)

    async def _read_whole(self, queue: QueueId) -> SavedStates:
        """``queue``'s states as its whole changelog partition gives them, read into memory."""
        tp = TopicPartition(self.topic, queue.number)
        consumer = self.reader()
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

    def lost(self, queue: QueueId) -> bool:
        """Whether ``queue``'s copy went with a local store file set aside as damaged, and
        is not rebuilt yet."""
        return self.copies.is_lost(queue.number, self.local)

    async def mend(self, queue: QueueId) -> None:
        """Rebuild ``queue``'s copy from the changelog if it went with a damaged file (its
        receiver calls this before each read, so the read's lookups find it whole)."""
        local = self.local
        if local is not None and self.lost(queue):
            async with self.turn(queue):
                if self.lost(queue):
                    await self._rebuilt(queue, local)

    async def _rebuilt(self, queue: QueueId, local: LocalStates, mark: bool = False) -> bool:
        """In ``queue``'s turn: its copy rebuilt from the changelog (logged); ``False`` if it
        cannot be now (logged; its next read or commit tries again). ``mark``: lost even if
        not this worker's own queue."""
        if mark:
            self.copies.lost.add(queue.number)
        try:
            start, why, read, reached = await self._brought_up(queue, local)
        except Exception as exc:  # the cluster away, the disk failing again
            log.warning(
                "%s: its copy in the local state store cannot be rebuilt from the changelog now (%s); "
                "its next read or commit tries again",
                queue,
                reason_of(exc),
            )
            return False
        self.copies.mended(queue.number)
        self.records_read += read
        log.info(
            "%s: local state store rebuilt from the changelog (its file was set aside as damaged); "
            "read %d changelog record(s) (offsets %d to %d)",
            queue,
            read,
            start,
            reached,
        )
        return True

    def saved_states(self, queue: QueueId, keys: Collection[StateKey]) -> SavedStates:
        """The states of ``keys`` of ``queue`` (a key without one left out), read now from the
        local store; a copy that went with a damaged file answers from its states as the
        changelog gives them until it is rebuilt."""
        local = self.local
        if local is None:  # the agent loads before it looks up
            raise QueueFailedError(f"{queue}: no local state store is open (its states are not loaded)")
        return self.copies.looked_up(local, queue, keys, self._read_whole)

    async def local_states(self) -> LocalStates | None:
        """The worker's local state store, opened now if it is not yet; ``None``: none."""
        if self.open_local is None:
            return None
        where = local_state_dir(self.settings)
        async with self._opening:
            if self.local is None:
                try:
                    self.local = await anyio.to_thread.run_sync(self.open_local, where)
                except OSError as exc:  # not a directory, not writable: retrying will not mend it
                    raise QueueFailedError(
                        f"the local state store under {str(where)!r} cannot be opened ({exc}): "
                        "give state_dir a directory this worker may write"
                    ) from exc
        return self.local

    async def _restore(self, queue: QueueId, local: LocalStates) -> SavedStates:
        """Bring ``queue``'s copy in the local store up to the changelog's end (its tail, or
        all of it: see the module), logged; the states a worker holds. A write of the queue's
        states still going on (a receiver before this one, the standby copy's) ends first,
        and a standby copy of the queue here is no longer followed: the queue is this
        worker's now, and its receiver the one writer of its rows."""
        if self.standby is not None:
            self.standby.stop_following(queue)
        async with self.turn(queue):
            try:
                start, why, read, reached, states = await self._loaded(queue, local)
            except LocalStoreDamagedError:  # set aside: once more, into the empty file
                self.lost(queue)
                start, why, read, reached, states = await self._loaded(queue, local)
            self.copies.taken(queue.number)  # its receiver is the partition's one writer from now
        self.records_read += read
        log.info(
            "%s: local state store %s; read %d changelog record(s) (offsets %d to %d); %d state(s) held",
            queue,
            f"at changelog offset {start}: read its tail" if why is None else f"rebuilt from the changelog ({why})",
            read,
            start,
            reached,
            len(states),
        )
        return states

    async def _loaded(self, queue: QueueId, local: LocalStates) -> tuple[int, str | None, int, int, SavedStates]:
        """In ``queue``'s turn: :meth:`_brought_up`, and the states a worker holds, read from
        the same file (:class:`LocalStoreDamagedError` if it was set aside meanwhile)."""
        seen = local.set_aside
        start, why, read, reached = await self._brought_up(queue, local)
        # Only the states a worker holds are read (an index of them): a load costs the same
        # however many parked states the queue has on disk.
        states = await local.read_states(queue.number)
        _same_file(local, seen, queue)
        return start, why, read, reached, states

    async def keep_synced(
        self, queue: QueueId, at: int, asked: float, still: Callable[[], bool], every: float | None = None
    ) -> None:
        """Move the "synced" time of ``queue``'s copy on
        (:meth:`~streams.backends.kafka.own_copies.OwnCopies.keep_synced`), in its turn."""
        if self.local is not None:
            await self.copies.keep_synced(self.local, queue, self.turn(queue), (at, asked), still, every)

    async def keep_own_synced(self, queue: QueueId, every: float | None = None) -> None:
        """:meth:`keep_synced` for a queue of this worker's own, at the end its last load or
        write left: its receiver is the partition's one writer, so no write since means the
        copy is still at the changelog's end. Its receiver calls it as it reads."""
        number = queue.number
        end = self.copies.end_of(number)
        if end is not None:
            await self.keep_synced(queue, end, wall_time(), lambda: self.copies.end_of(number) == end, every)

    async def let_go(self, queue: QueueId) -> None:
        """``queue`` is no longer this worker's (its receiver has shut down): its copy's
        "synced" time is moved on a last time, if it is at the changelog's end."""
        await self.keep_own_synced(queue, every=0.0)
        self.copies.let_go(queue.number)

    async def _brought_up(self, queue: QueueId, local: LocalStates) -> tuple[int, str | None, int, int]:
        """In ``queue``'s turn: its copy in ``local`` brought to the changelog's end (its tail
        read, or all of it); where the read began, why it was rebuilt (``None``: the tail),
        the records read and the offset reached. :class:`LocalStoreDamagedError` if the file
        was set aside meanwhile (by any call): the copy in the new one is not whole."""
        seen = local.set_aside
        tp = TopicPartition(self.topic, queue.number)
        consumer = self.reader()
        await start_client(consumer, self.settings)
        try:
            consumer.assign([tp])
            start, end, why = await self.start_of(consumer, tp, local, queue)
            read, reached = await _copy(consumer, tp, (start, end), local, (queue, seen), self.settings)
        finally:
            await stop_client(consumer)
        self.copies.caught_up(queue.number, reached)
        return start, why, read, reached

    def turn(self, queue: QueueId) -> anyio.Lock:
        """The lock of ``queue``'s rows in the local store: one writer at a time (a receiver's
        writes, a load, a standby copy's), and its changelog offsets in order."""
        return self._writing.setdefault(queue.number, anyio.Lock())

    async def start_of(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, local: LocalStates, queue: QueueId
    ) -> tuple[int, int, str | None]:
        """Where ``queue``'s copy in ``local`` reads the changelog on from (``consumer`` is
        assigned ``tp``), in the queue's turn: its local offset, or, its rows forgotten now,
        the oldest retained record; the changelog's end; and why it is rebuilt (``None``:
        only its tail is read)."""
        first, end = await offset_bounds(consumer, tp, self.settings.request_timeout)
        synced = local.synced(queue.number)
        stored = None if synced is None else synced[0]
        why = rebuild_reason(stored, first, end, 0.0 if synced is None else wall_time() - synced[1])
        if why is not None or stored is None:
            self.copies.synced_at.pop(queue.number, None)
            await local.forget(queue.number)
            return first, end, why
        return stored, end, None

    async def expire(self, queue: QueueId, consumer: str, before: float) -> int:
        """Delete ``consumer``'s durable states of ``queue`` in the local store last written
        before ``before``: a tombstone each in the changelog, then from the local store; how
        many (0 while the changelog cannot be written: the next sweep tries again). The keys
        are chosen inside the queue's write turn, so no state being written is taken for idle."""
        local = await self.local_states()
        if local is None:
            return 0
        async with self.turn(queue):
            if self.lost(queue) and not await self._rebuilt(queue, local):
                return 0
            try:
                keys = await local.idle_keys(queue.number, consumer, before)
            except LocalStoreDamagedError:  # set aside: rebuilt at the queue's next read
                return 0
            return len(keys) if keys and await self._written(queue, ([], keys)) else 0

    def reader(self, fetch_wait: float | None = None) -> AIOKafkaConsumer:
        """A consumer of the changelog, of no group (nothing committed); a fetch at the end
        waits ``fetch_wait`` seconds for records (by default ``poll_timeout``)."""
        wait = self.settings.poll_timeout if fetch_wait is None else fetch_wait
        return AIOKafkaConsumer(
            **self.settings.consumer_kwargs(
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",  # what compaction or retention left
                fetch_max_wait_ms=int(wait * 1000),
            )
        )

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
        local, self.local = self.local, None
        if local is not None:
            local.close()


async def _copy(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    span: tuple[int, int],
    local: LocalStates,
    of: tuple[QueueId, int],
    settings: KafkaSettings,
) -> tuple[int, int]:
    """Apply the records of ``tp`` from ``span``'s start to its end to the local store, a
    fetch at a time (each with the offset after it: a load cut short goes on from there);
    how many were read, and the offset reached. ``of``: the queue, and the local store's
    count of files set aside as the copy began: a fetch is never applied to a file started
    since (it would record the end with the earlier fetches' states missing)."""
    (queue, seen), (start, end) = of, span
    read, reached = 0, start
    async for chunk in partition_chunks(consumer, tp, start, settings):
        read += len(chunk)
        _same_file(local, seen, queue)
        reached = await apply_records(local, queue, chunk)
    reached = max(reached, end)
    _same_file(local, seen, queue)
    await local.apply(queue.number, ([], []), next_offset=reached)
    _same_file(local, seen, queue)
    return read, reached


def _same_file(local: LocalStates, seen: int, queue: QueueId) -> None:
    """Raise :class:`LocalStoreDamagedError` if ``local`` set a file aside since its count
    was ``seen``: what ``queue``'s copy wrote to the old file is gone."""
    if local.set_aside != seen:
        raise LocalStoreDamagedError(
            f"{queue}: the local state store was set aside as damaged while its copy was read in; "
            "it is read in again from the changelog"
        )


async def apply_records(local: LocalStates, queue: QueueId, records: Sequence[ConsumerRecord[bytes, bytes]]) -> int:
    """Apply ``records`` (a fetch of ``queue``'s changelog partition, in order) to its copy in
    ``local``, the newest of each key, with the offset after them, in one transaction; that
    offset. What a load and a standby copy both apply."""
    newest = {record.key: record.value for record in records if record.key is not None}
    reached: int = records[-1].offset + 1
    # Written when the last record was, at the latest: a copy's time to live runs from the
    # changelog's writes, not from this read.
    stamp = records[-1].timestamp
    written_at = stamp / 1000 if stamp is not None and stamp > 0 else None
    await local.apply(queue.number, _rows_of(queue, newest), next_offset=reached, written_at=written_at)
    return reached


def _states_of(queue: QueueId, newest: Mapping[bytes, bytes | None]) -> SavedStates:
    upserts, _ = _rows_of(queue, newest)
    return {(consumer, stream): (SequenceToken(seq, idx), state) for consumer, stream, seq, idx, state in upserts}


def _rows_of(queue: QueueId, newest: Mapping[bytes, bytes | None]) -> StateRows:
    """The newest changelog record of each key of ``queue`` as rows: a state, or a deletion."""
    upserts: list[tuple[str, str, int, int, bytes]] = []
    deletes: list[StateKey] = []
    for key, value in newest.items():
        try:
            number, consumer, stream = decode_key(key)
            if number != queue.number:
                continue
            if value is None:
                deletes.append((consumer, stream))
                continue
            token, state = decode_state(value)
        except Exception as exc:  # a record another program wrote: not ours to restore
            log.warning("%s: changelog record %r is not a saved state (%r); ignored", queue, key[:80], exc)
            continue
        upserts.append((consumer, stream, token.sequence_number, token.event_index, state))
    return upserts, deletes


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
