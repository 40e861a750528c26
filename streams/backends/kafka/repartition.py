"""The re-keying hop: one activation per key of a topic whose producers did not key it.

A topic of one event per record read with ``key_field=`` may hold a key's records in every
partition (a producer without a key spreads them), and each queue would make its own
activation of the key, each with a part of its windows. As Kafka Streams does, the
receiver of queue *i* re-keys the records of partition *i* it reads that have no key:

1. it sends each, keyed by its stream key, to the partition of the **repartition topic**
   ``<group_id>.repartition.<topic>`` that Kafka's partitioner gives that key (the queue
   that owns the key), with a header ``headrace.source`` = ``b"<partition>:<offset>"``
   naming its source record;
2. it acknowledges the source offset no further than the oldest record Kafka does not have
   yet (``acks=all``), so the offset it commits later never passes a record not yet durable
   there; meanwhile it takes the next reads (:class:`Sends`), whose records go on once the
   earlier ones are acknowledged;
3. queue *j* reads partition *j* of the repartition topic beside partition *j* of the source
   (a second topic read together), whose records are keyed: one activation per key. Its
   consumers see each such record as its source: ``event.offset`` is the source record's
   offset and ``event.headers`` are the producer's, without ``headrace.source``
   (:func:`~streams.backends.kafka.records._unwrapped_all`); the event's ``position``, where a replay of
   the queue finds it, stays the repartition record's.

Records that have a key (the stream id already) skip the hop.

**Exactly once across the hop.** A crash after step 1 and before the source offset is
committed sends those records again when the source is read again: duplicates, later in the
repartition partition than their originals. A source partition's records reach a
repartition partition in offset order (one reader at a time, in order), so the reader of
repartition partition *j* keeps, per source partition, the highest source offset it has
taken, and skips a record at or below it. That memory is saved with the queue's event-time
state in the changelog (:mod:`~streams.backends.kafka.changelog`) before each offset commit, as
it stood at the offset committed, and loaded by whoever reads the queue next.

>>> seen = SeenSources()
>>> [seen.take(10, b"2:7"), seen.take(11, b"2:8"), seen.take(12, b"2:7")]
[True, True, False]
>>> rows = seen.committed_rows(12)  # what the changelog keeps for a commit at offset 12
>>> rows
[('headrace.repartition', 'partition 2', 12, 0, b'\\x08')]
>>> seen.saved(rows); seen.committed_rows(12)  # saved: nothing new to write
[]
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import anyio
import msgpack
import msgspec
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder

from streams.adapters.mapper import KafkaPartitionMapper
from streams.backends.kafka.batches import Outgoing, filled
from streams.backends.kafka.fetched import Fetched, KafkaRecord
from streams.backends.kafka.records import SOURCE_HEADER, key_of
from streams.backends.kafka.settings import KafkaSettings, KeyField
from streams.core.records import JsonRecords, RecordFormat

# The changelog rows of the hop: consumer name, and one "stream" per source partition.
SEEN = "headrace.repartition"

_Upsert = tuple[str, str, int, int, bytes]  # consumer, stream, sequence, index, state
Forward = tuple[KafkaRecord, bytes]  # a source record and its stream key


class SeenSources:
    """Per source partition, the highest source offset taken from one repartition
    partition; and the same as of the offset last committed (what the changelog keeps)."""

    def __init__(self) -> None:
        self.highest: dict[int, int] = {}
        self.duplicates = 0  # records skipped as copies of ones taken before
        self._taken: list[tuple[int, int, int]] = []  # (offset, source partition, offset), ascending
        self._committed: dict[int, int] = {}
        self._written: dict[int, int] = {}

    def restore(self, committed: Mapping[int, int]) -> None:
        self.highest = dict(committed)
        self._committed = dict(committed)
        self._written = dict(committed)
        self._taken.clear()

    def take(self, offset: int, source: bytes | None) -> bool:
        """Whether the repartition record at ``offset`` (its source header ``source``) is
        new; a duplicate is counted and to be skipped."""
        if source is None:
            return True  # not written by the hop: nothing to compare
        partition, source_offset = map(int, source.split(b":"))
        if source_offset <= self.highest.get(partition, -1):
            self.duplicates += 1
            return False
        self.highest[partition] = source_offset
        self._taken.append((offset, partition, source_offset))
        return True

    def kept(self, records: Sequence[KafkaRecord]) -> list[KafkaRecord]:
        """The repartition records of a read that are new (:meth:`take` of each, in order),
        its header read in line: where the hop put it (last) unless another writer's
        record has it elsewhere.

        >>> from aiokafka import ConsumerRecord
        >>> def record(offset, *headers):
        ...     return ConsumerRecord("r", 0, offset, 0, 0, b"k", b"{}", None, 1, 2, headers)
        >>> seen = SeenSources()
        >>> kept = seen.kept([record(0, ("headrace.source", b"1:5")), record(1, ("headrace.source", b"1:5")),
        ...                   record(2), record(3, ("headrace.source", b"1:6"), ("trace", b"x"))])
        >>> [r.offset for r in kept], seen.highest, seen.duplicates
        ([0, 2, 3], {1: 6}, 1)
        """
        out: list[KafkaRecord] = []
        highest, append, remember = self.highest, out.append, self._taken.append
        partitions: dict[bytes, int] = {}  # a header's partition number, read once a read
        # A hop's batch holds one source partition's records: while the partition stays the
        # same, its highest offset is kept here, and written back when another comes.
        number: bytes | None = None
        partition, high = -1, -1
        try:
            for r in records:
                headers = r.headers
                if headers and headers[-1][0] == SOURCE_HEADER:
                    source = headers[-1][1]
                else:
                    found = _source_of(r)
                    if found is None:  # not written by the hop: nothing to compare
                        append(r)
                        continue
                    source = found
                at, colon, offset_text = (source if type(source) is bytes else bytes(source)).partition(b":")
                if at != number:
                    if number is not None:
                        highest[partition] = high
                    partition = partitions.get(at, -1)
                    if partition < 0:
                        partition = partitions[at] = int(at)
                    number, high = at, highest.get(partition, -1)
                source_offset = int(offset_text if colon else b"")  # no colon: refused as take() does
                if source_offset <= high:
                    self.duplicates += 1
                    continue
                high = source_offset
                remember((r.offset, partition, source_offset))
                append(r)
        finally:
            if number is not None:
                highest[partition] = high
        return out

    def committed_rows(self, offset: int) -> list[_Upsert]:
        """The changelog rows for a commit at repartition ``offset``: the highest source
        offsets of the records before it, those that changed since the last rows saved
        (:meth:`saved`)."""
        taken = self._taken
        end = bisect_left(taken, (offset,))  # the records before the offset
        # Each partition's newest of them, found from the end: once every partition taken
        # from is found, the older ones change nothing.
        committed, found, partitions = self._committed, set(), len(self.highest)
        for n in range(end - 1, -1, -1):
            _, partition, source_offset = taken[n]
            if partition not in found:
                found.add(partition)
                committed[partition] = source_offset
                if len(found) == partitions:
                    break
        del taken[:end]
        return [
            (SEEN, f"partition {p}", offset, 0, msgpack.packb(o))
            for p, o in sorted(self._committed.items())
            if self._written.get(p) != o
        ]

    def saved(self, rows: Sequence[_Upsert]) -> None:
        """``rows`` are in the changelog."""
        for _, stream, _, _, state in rows:
            self._written[int(stream.split()[1])] = msgpack.unpackb(state)

    def restore_rows(self, rows: Mapping[str, bytes]) -> None:
        """Restore what the changelog kept (stream -> state of the rows of :data:`SEEN`)."""
        self.restore({int(stream.split()[1]): int(msgpack.unpackb(state)) for stream, state in rows.items()})


class Rekeying:
    """The hop of one queue: which records of a read to send on, sending them, and which
    records of the repartition partition to take.

    ``source`` and ``repartition`` are the queue's partitions of the two topics.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        source: TopicPartition,
        repartition: TopicPartition,
        record_format: RecordFormat,
        key_field: KeyField,
    ) -> None:
        self.settings = settings
        self.source = source
        self.repartition = repartition
        self._decode = record_format.decode
        self._key_field = key_field
        # JSON keyed by a field: the key read alone (_quick_key), the rest of the value skipped.
        self._quick_key = _field_reader(key_field) if type(record_format) is JsonRecords else None
        self._partition_of: dict[bytes, int] = {}  # key -> repartition partition
        self._encoded: dict[str | int, bytes] = {}  # a key field's value -> the record key
        self.seen = SeenSources()
        self.forwarded = 0
        self._placing = KafkaPartitionMapper(settings.queues)  # as Kafka's partitioner, each key once

    def to_forward(self, fetched: Fetched) -> list[Forward]:
        """The source records of a read that go through the hop, with their keys: no
        record key, and a decoded value with a str or int ``key_field`` (the others stay,
        dead-lettered as without the hop)."""
        out: list[Forward] = []
        append, quick, encoded = out.append, self._quick_key, self._encoded
        for r in fetched.get(self.source, ()):
            if r.key is not None:
                continue
            data = r.value
            # ASCII only: what the field reader skips, it does not check is UTF-8, where the
            # whole value's decoding refuses it (and the record is dead-lettered, not sent on).
            if quick is not None and type(data) is bytes and data.isascii():
                try:
                    field = quick(data).k
                except msgspec.MsgspecError:
                    key = self._key_of(r)  # not an object, or the field is no str or int: decoded whole
                else:
                    if field is None:
                        continue
                    key = encoded.get(field)
                    if key is None:
                        if len(encoded) >= 100_000:
                            encoded.clear()
                        key = encoded[field] = (field if type(field) is str else str(field)).encode()
            else:
                key = self._key_of(r)
            if key is not None:
                append((r, key))
        return out

    async def forward(
        self, producer: AIOKafkaProducer, records: Sequence[Forward], enqueueing: anyio.Lock | None = None
    ) -> None:
        """Send ``records`` to their keys' repartition partitions; return once Kafka has all
        of them (raise the first failure: the caller sends them again, :class:`Sends`).

        Record batches filled here (:func:`_filled`), rather than a ``send`` per record:
        the producer's per-record future and partition lookup cost more than the
        record itself. A partition's records must land in source offset order (what
        :class:`SeenSources` relies on), so its second batch is handed to the producer only
        once its first is acknowledged: were a later batch to land after an earlier one
        failed for good (a record too large, say), the failed records, sent again on the
        next read, would sit behind it and be skipped as copies.

        ``enqueueing``, shared by the hops of one producer, lets one hop at a time enqueue:
        the producer holds one batch a partition, and hops that wait for the same
        partition's turn together run out of aiokafka's wait (its ``add_batch`` takes the time
        waited off its timeout again on every turn) and fail with ``KafkaTimeoutError``, as
        a worker's agents, started side by side, did. A read's one batch a partition is
        acknowledged outside it; a partition's further batches, rare, are sent within it."""
        topic = self.repartition.topic
        source = self.source.partition
        batches = {p: _filled(producer, items, source) for p, items in self._by_partition(records).items()}
        outcomes: list[Any] = []
        async with enqueueing if enqueueing is not None else nullcontext():
            firsts = {
                partition: await producer.send_batch(b[0], topic, partition=partition)
                for partition, b in batches.items()
            }
            later = [(partition, b[1:]) for partition, b in batches.items() if len(b) > 1]
            if later:
                sends = (_after(producer, topic, partition, firsts.pop(partition), rest) for partition, rest in later)
                outcomes = await asyncio.gather(*sends, return_exceptions=True)
        outcomes += await asyncio.gather(*firsts.values(), return_exceptions=True)
        for result in outcomes:
            if isinstance(result, BaseException):
                raise result
        self.forwarded += len(records)

    def _by_partition(self, records: Sequence[Forward]) -> dict[int, list[Forward]]:
        """``records`` by the repartition partition of their keys, in order."""
        partition_of = self._partition_of
        out: dict[int, list[Forward]] = {}
        for item in records:
            key = item[1]
            partition = partition_of.get(key)
            if partition is None:
                if len(partition_of) >= 100_000:
                    partition_of.clear()
                partition = partition_of[key] = self._placing.queue_of_key(key.decode()).number
            group = out.get(partition)
            if group is None:
                out[partition] = [item]
            else:
                group.append(item)
        return out

    def kept(self, fetched: Fetched, forwarded: Sequence[Forward]) -> dict[TopicPartition, Any]:
        """What the queue reads of ``fetched``: the source records not ``forwarded`` (what
        :meth:`to_forward` gave of this read), and the repartition records that are not
        duplicates."""
        out: dict[TopicPartition, Any] = {}
        for tp, records in fetched.items():
            if tp == self.source:
                if not forwarded:
                    out[tp] = records
                elif len(forwarded) == len(records):  # every one sent on (forwarded: some of them)
                    out[tp] = []
                else:
                    gone = {r.offset for r, _ in forwarded}
                    out[tp] = [r for r in records if r.offset not in gone]
            elif tp == self.repartition:
                out[tp] = self.seen.kept(records)
            else:
                out[tp] = records
        return out

    def _key_of(self, r: KafkaRecord) -> bytes | None:
        """The key of a record whose value is decoded whole."""
        try:
            value = self._decode(r.value)  # type: ignore[arg-type]  # None (a tombstone) raises
        except Exception:  # the format's own errors: any type; dead-lettered when read
            return None
        key = key_of(value, self._key_field)
        return None if key is None else str(key).encode()


# Reads of one queue whose records sent on may wait for Kafka's acknowledgement together:
# the agent takes and delivers the next read meanwhile, instead of waiting for each.
SENDS_IN_FLIGHT = 2


class Sends:
    """A queue's reads whose records went on through the hop, oldest first, until Kafka has
    all of each (``send``, :meth:`Rekeying.forward` with its time limit).

    Each read's records are handed to the producer once the read before them is
    acknowledged (within one read, :meth:`Rekeying.forward` keeps the order): a read's
    records never land before an earlier read's that failed, which are sent again, in
    order, before anything else. Should the caller's wait be cancelled, the sends go on.

    >>> async def demo():
    ...     sent = []
    ...     async def send(records):
    ...         sent.append(records)
    ...     sends = Sends(send)
    ...     sends.add([("r1", b"k")]); sends.add([("r2", b"k")])
    ...     handed_on = sends.handed_on, sends.arrived
    ...     await sends.settle(keep=0)
    ...     return sent, len(sends), handed_on, sends.arrived
    >>> asyncio.run(demo())
    ([[('r1', b'k')], [('r2', b'k')]], 0, (2, 0), 2)
    """

    def __init__(self, send: Callable[[Sequence[Forward]], Awaitable[None]]) -> None:
        self._send = send
        # (the send under way, or None once it failed: to send again; its records)
        self._pending: deque[tuple[asyncio.Future[None] | None, Sequence[Forward]]] = deque()
        self.handed_on = 0  # records handed to a send, since made
        self.arrived = 0  # of those, the records whose send was acknowledged and taken in

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def oldest(self) -> int | None:
        """The source offset of the oldest record not yet acknowledged."""
        return self._pending[0][1][0][0].offset if self._pending else None

    def add(self, records: Sequence[Forward]) -> None:
        """Send ``records`` on once the reads before them are acknowledged."""
        before = self._pending[-1][0] if self._pending else None
        task = asyncio.ensure_future(self._in_turn(before, records))
        task.add_done_callback(_retrieved)
        self._pending.append((task, records))
        self.handed_on += len(records)

    async def _in_turn(self, before: asyncio.Future[None] | None, records: Sequence[Forward]) -> None:
        if before is not None:
            await before  # failed: raises, and these are not sent (they are sent again after it)
        await self._send(records)

    async def settle(self, keep: int) -> None:
        """Take in the acknowledged reads, waiting until at most ``keep`` are not; send again
        what failed first. Raise a send's failure: that read and every later one are sent
        again, in order, by the next call."""
        pending = self._pending
        while pending and (len(pending) > keep or pending[0][0] is None or pending[0][0].done()):
            task, records = pending[0]
            if task is None:
                await self._send(records)  # raises: it stays first, to send again
            else:
                try:
                    await asyncio.shield(task)  # a cancelled wait leaves the send going on
                except Exception:
                    # The later ones waited for it: none of them was sent.
                    for n, (_, later) in enumerate(pending):
                        pending[n] = (None, later)
                    raise
            pending.popleft()
            self.arrived += len(records)


def _retrieved(task: asyncio.Future[None]) -> None:
    """A send's failure is raised by :meth:`Sends.settle`, or not at all once the queue is
    let go (its records are read again by whoever reads it next)."""
    if not task.cancelled():
        task.exception()


async def _after(
    producer: AIOKafkaProducer, topic: str, partition: int, sent: asyncio.Future[Any], rest: Sequence[BatchBuilder]
) -> None:
    """Send ``rest`` to ``partition`` one batch at a time, each once the one before it,
    ``sent`` first, is acknowledged: a failure stops the partition's sends there."""
    await sent
    for batch in rest:
        await (await producer.send_batch(batch, topic, partition=partition))


def _filled(producer: AIOKafkaProducer, records: Sequence[Forward], partition: int) -> list[BatchBuilder]:
    """The producer's record batches holding ``records`` of source ``partition`` (in order;
    each closed), each record with a header naming its source record."""
    return filled(producer, _outgoing(records, partition))


def _outgoing(records: Sequence[Forward], partition: int) -> Iterator[Outgoing]:
    """``records`` as sent on: keyed by their streams, their source named in a header."""
    source = b"%d:%%d" % partition  # the header's value, b"<partition>:<offset>"
    single: list[tuple[str, bytes]] = [(SOURCE_HEADER, b"")]  # the batch copies a record's headers in
    for r, key in records:
        extra = r.headers
        if extra:
            headers = [*extra, (SOURCE_HEADER, source % r.offset)]
        else:
            single[0] = (SOURCE_HEADER, source % r.offset)
            headers = single
        yield r.timestamp, key, r.value, headers


def _field_reader(key_field: KeyField) -> Callable[[bytes], Any] | None:
    """A JSON decoder of field ``key_field`` alone (its value as ``.k``: a str, an int or
    None), for a field name; None for a key function. It refuses what :func:`key_of` gives
    no key for, except a value that is an object without the field (``.k`` is None), and
    what msgspec does not read (Python's json may): those are decoded whole.

    >>> read = _field_reader("device")
    >>> read(b'{"t": [1, {"x": 2}], "device": "d-7"}').k, read(b'{"device": 3}').k, read(b'{}').k
    ('d-7', 3, None)
    >>> read(b'{"device": true}')
    Traceback (most recent call last):
    msgspec.ValidationError: Expected `int | str | null`, got `bool` - at `$.device`
    """
    if not isinstance(key_field, str):
        return None
    field = msgspec.defstruct(
        "KeyField", [("k", str | int | None, None)], rename={"k": key_field}, forbid_unknown_fields=False, gc=False
    )
    return msgspec.json.Decoder(field).decode


def _source_of(r: KafkaRecord) -> bytes | None:
    for name, value in reversed(r.headers):  # the hop's header is the last one
        if name == SOURCE_HEADER:
            return bytes(value)
    return None
