"""What a Kafka receiver makes of the records of one read, and which offsets an
acknowledgement lets it commit.

- :class:`ContainerRecords`: headrace's own topic. One record is one batch container; its
  queue position is its offset, and acknowledging position ``n`` commits offset ``n + 1``.

- :class:`GroupedRecords`: a topic of one event per record, written by anyone, in a
  :class:`~streams.core.records.RecordFormat`, perhaps several topics read together
  (queue *i* reads partition *i* of each). The records of one read are decoded and gathered
  by stream into one :class:`~streams.core.record_batch.RecordBatch` per stream, one queue
  message each, so the runtime pays its per-batch costs once per stream and read. A record
  that does not decode is a message of its own that says why, which the pulling agent
  dead-letters with the raw bytes.

Positions of grouped records. A message's position (the sequence number of its events'
tokens ``position:index``) is that of its first record. A record's position is its offset
plus the read positions of the queue's other topics, counted so that positions grow from
read to read; with one topic it is the record's offset. Since a message stands at its first
record, every record before the first record of the oldest unacknowledged message of a
topic belongs to an acknowledged message: that first record's offset is what the topic
commits (the read position when none is left).

These positions depend on how the records were grouped, which a replay from another offset
does not reproduce; each event also keeps its record's offset, which it does
(:class:`~streams.core.record_batch.RecordBatch`): that is the position a saved event-time
state keeps (:mod:`~streams.backends.kafka.changelog`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any, Protocol

from aiokafka import TopicPartition

from streams.backends.kafka.fetched import Fetched, KafkaRecord
from streams.backends.kafka.settings import KeyField
from streams.core.batch import QueueMessage
from streams.core.codec import interned
from streams.core.deadletters import LETTER_PREFIX
from streams.core.errors import DecodeError, RecordTooLargeError
from streams.core.ids import QueueId, StreamId
from streams.core.lazy import LazySequence
from streams.core.record_batch import Headers, RecordBatch
from streams.core.records import RecordAwareFormat, RecordFormat, RecordInfo, first_decoder

_OFFSET = attrgetter("offset")  # of each record of a read, in C

_UNREAD = object()  # a record whose value does not decode

# One stream's records of a read, by what each record's message keeps: values, offsets,
# clocks before each, arrival times, headers; and the stream.
_Group = tuple[list[Any], list[int], list[float], list[float], list[Headers], StreamId]

# The header the re-keying hop adds to each record it sends on (streams.backends.kafka.repartition):
# b"<source partition>:<source offset>", after the producer's own headers.
SOURCE_HEADER = "headrace.source"


def _unwrapped_all(read: list[Headers], offsets: list[int]) -> tuple[list[Headers], list[int]]:
    """The headers of records at ``offsets`` of the repartition topic as their producer
    wrote them (the hop's own header, always the last, removed), in one pass: the headers shown, and the offset shown (its source record's, or its own
    when not sent on by the hop). A :class:`RecordBatch` of the hop's records calls it
    once an event is made.

    >>> _unwrapped_all([(("trace", b"x"), ("headrace.source", b"3:0")), ()], [4, 5])
    ([(('trace', b'x'),), ()], [0, 5])
    """
    headers: list[Headers] = []
    shown: list[int] = []
    header, at = headers.append, shown.append
    for h, offset in zip(read, offsets):
        if h and h[-1][0] == SOURCE_HEADER:  # the hop's header is the last one
            header(h[:-1])
            at(int(bytes(h[-1][1]).split(b":")[1]))
        else:
            header(h)
            at(offset)
    return headers, shown


def key_of(value: Any, key_field: KeyField) -> str | int | None:
    """The key ``key_field`` gives a record's decoded ``value``: its field of that name, or
    what the function returns; ``None`` unless that is a str or an int (a function that
    raises gives none).

    >>> key_of({"device": "d-7"}, "device"), key_of({"id": 3}, lambda v: v["id"]), key_of([1], "device")
    ('d-7', 3, None)
    """
    if isinstance(key_field, str):
        key = value.get(key_field) if type(value) is dict else None
    else:
        try:
            key = key_field(value)
        except Exception:  # the user's function: any error means no key (dead-lettered)
            return None
    if key is None or isinstance(key, bool) or not isinstance(key, (str, int)):
        return None
    return key


def keyed_by(key_field: KeyField) -> str:
    """How a dead letter's detail names ``key_field``."""
    if isinstance(key_field, str):
        return f"its value's field {key_field!r}"
    return f"key function {getattr(key_field, '__qualname__', repr(key_field))}"


class RecordReader(Protocol):
    """Turns the records of a read into queue messages; maps acknowledgements to offsets."""

    def start(self, positions: Mapping[TopicPartition, int]) -> None:
        """Reading begins (again) at these offsets."""

    def messages(self, fetched: Fetched, ends: Mapping[TopicPartition, int] | None = None) -> Sequence[QueueMessage]:
        """The queue messages of one read, in position order; ``ends``: where each partition's
        read ended, when records of it were taken out of ``fetched`` (the re-keying hop's)."""
        ...

    def acknowledged(self, last: int) -> dict[TopicPartition, int]:
        """Every message up to position ``last`` is done with: the offsets to commit."""
        ...


class ContainerMessages(LazySequence[KafkaRecord, QueueMessage]):
    """The queue messages of one read of headrace's own records, each made as it is looked
    at, from the fetched record it stands for.

    A list of them would keep one tracked object a record alive until the pulling agent
    has gathered the read (:func:`~streams.core.record_batch.gathered`), each counted
    towards the garbage collector's next young collection and promoted by it (a third of
    its young collections, reading one-event records); and the pulling agent and
    ``gathered`` read positions and bytes from :attr:`records` without making any.

    >>> from aiokafka import ConsumerRecord
    >>> records = [ConsumerRecord("t", 0, n, 5000, 0, None, b"x", None, 0, 1, ()) for n in (7, 8)]
    >>> read = ContainerMessages(QueueId(0), records)
    >>> len(read), read[-1].sequence_number, [m.enqueued_time for m in read], len(read[:1])
    (2, 8, [5.0, 5.0], 1)
    """

    __slots__ = ()

    def __init__(self, queue: QueueId, records: Sequence[KafkaRecord]) -> None:
        # A record with no value (a tombstone from another writer) is empty bytes, which
        # the pulling agent dead-letters like any other record that does not decode.
        def message(r: KafkaRecord) -> QueueMessage:
            return QueueMessage(queue, r.offset, b"" if r.value is None else r.value, r.timestamp / 1000)

        super().__init__(records, message)

    @property
    def records(self) -> Sequence[KafkaRecord]:
        """The fetched records, which :func:`~streams.core.record_batch.gathered` reads
        without making a message of a record it gathers."""
        return self.source

    def positions(self) -> Iterator[int]:
        """Every message's position (its record's offset), with no message made (read in C)."""
        return map(_OFFSET, self.records)


class ContainerRecords:
    """Headrace's own format: each record is one message at its offset."""

    def __init__(self, queue: QueueId, partition: TopicPartition) -> None:
        self._queue = queue
        self._partition = partition

    def start(self, positions: Mapping[TopicPartition, int]) -> None:
        pass

    def messages(self, fetched: Fetched, ends: Mapping[TopicPartition, int] | None = None) -> Sequence[QueueMessage]:
        return ContainerMessages(self._queue, fetched.get(self._partition, ()))

    def acknowledged(self, last: int) -> dict[TopicPartition, int]:
        return {self._partition: last + 1}


class GroupedRecords:
    """One-event records of one or several topics, gathered by stream.

    The stream of a record is ``StreamId(namespace of its topic, key)``, the key being the
    record's key as UTF-8; for a record with no key, field ``key_field`` of its decoded value
    (when given), else the partition number.
    """

    def __init__(
        self,
        queue: QueueId,
        partitions: Sequence[TopicPartition],
        namespaces: Mapping[str, str],
        record_format: RecordFormat,
        key_field: KeyField | None = None,
        hop: str | None = None,
        max_record_size: int = 1 << 20,
    ) -> None:
        self._queue = queue
        self._max_size = max_record_size  # a larger record is dead-lettered too_large, never decoded
        self._hop = hop  # the re-keying hop's repartition topic, if any
        self._partitions = list(partitions)  # a fixed topic order: positions depend on it
        self._namespaces = dict(namespaces)  # topic -> namespace
        self._format = record_format
        # A format may offer a first decoder to call a record at a time (JSON: msgspec's, with
        # no Python call around it); what that refuses, its own decode has the last word on.
        self._format_decode = record_format.decode
        self._decode = first_decoder(record_format)
        # A format that sees the record (a schema registry's) decodes each with where it stands.
        self._aware = record_format if isinstance(record_format, RecordAwareFormat) else None
        self._key_field = key_field
        self._positions: dict[TopicPartition, int] = {tp: 0 for tp in self._partitions}
        # Per topic: (position, first offset) of each message not yet acknowledged.
        self._pending: dict[TopicPartition, deque[tuple[int, int]]] = {tp: deque() for tp in self._partitions}
        self._stream_ids: dict[tuple[str, Any], StreamId] = {}
        # The newest record timestamp read (seconds): the queue's clock, from which each
        # batch learns the clock just before its first record (``clock_before``).
        self._clock = -math.inf

    def start(self, positions: Mapping[TopicPartition, int]) -> None:
        for tp in self._partitions:
            self._positions[tp] = positions[tp]
            self._pending[tp].clear()
        self._clock = -math.inf  # the records before the start are not read: not known

    def messages(self, fetched: Fetched, ends: Mapping[TopicPartition, int] | None = None) -> list[QueueMessage]:
        out: list[QueueMessage] = []
        base = sum(self._positions.values())
        for tp in self._partitions:
            records = fetched.get(tp) or ()
            start = self._positions[tp]
            end = records[-1].offset + 1 if records else start
            if ends is not None:
                end = max(end, ends.get(tp, end))
            if end == start:
                continue
            if records:
                self._group(tp, records, base - start, out)
            base += end - start
            self._positions[tp] = end
        return out

    def acknowledged(self, last: int) -> dict[TopicPartition, int]:
        commits = {}
        for tp, pending in self._pending.items():
            while pending and pending[0][0] <= last:
                pending.popleft()
            commits[tp] = pending[0][1] if pending else self._positions[tp]
        return commits

    def _group(
        self,
        tp: TopicPartition,
        records: Sequence[KafkaRecord],
        shift: int,
        out: list[QueueMessage],
    ) -> None:
        """Append the messages of one topic's records (positions: offset + ``shift``)."""
        groups: dict[Any, _Group] = {}
        bad: list[tuple[KafkaRecord, str]] = []
        too_large: list[KafkaRecord] = []
        size = self._gather(tp, records, groups, bad, too_large)
        # The records read share their bytes among their groups (what the queue cache counts).
        per_record = size / max(len(records) - len(too_large), 1)
        made = self._batches(tp, groups, shift, per_record)
        if bad or too_large:
            made += self._refused(tp, bad, too_large, shift)
            made.sort(key=lambda m: m.sequence_number)
        self._pending[tp].extend((m.sequence_number, m.sequence_number - shift) for m in made)
        out.extend(made)

    def _gather(
        self,
        tp: TopicPartition,
        records: Sequence[KafkaRecord],
        groups: dict[Any, _Group],
        bad: list[tuple[KafkaRecord, str]],
        too_large: list[KafkaRecord],
    ) -> int:
        """Decode ``records`` into ``groups`` by key, the ones that do not decode into ``bad``
        with why, those over the size limit into ``too_large``; return the bytes decoded."""
        decode, aware, key_field, max_size = self._decode, self._aware, self._key_field, self._max_size
        size = 0
        # A group gathers records that other streams' records stand between: each record
        # keeps the queue's clock just before it (RecordBatch.clocks), so an activation can
        # catch up with it as though the records had come one by one.
        clock = self._clock
        for r in records:
            before, arrival = clock, r.timestamp / 1000
            if arrival > clock:
                clock = arrival
            raw = r.value
            if raw is not None:
                n = len(raw)
                if n > max_size:
                    too_large.append(r)
                    continue
                size += n
            try:
                if aware is None:
                    value = decode(raw)  # type: ignore[arg-type]  # None (a tombstone) raises
                else:
                    value = aware.decode_record(raw, RecordInfo(tp.topic, tp.partition, r.offset, r.headers))  # type: ignore[arg-type]
            except Exception as exc:  # the format's own errors: any type
                value = self._last_word(r, exc, bad)
                if value is _UNREAD:
                    continue
            key: Any = r.key
            if key is None and key_field is not None and (key := key_of(value, key_field)) is None:
                bad.append((r, f"has no key and {keyed_by(key_field)} gives no str or int"))
                continue
            # Five appends a record, each of what the record's message keeps, read while at hand.
            group = groups.get(key)
            if group is None:
                self._open_group(tp, key, groups, r, value, before, arrival, bad)
                continue
            group[0].append(value)
            group[1].append(r.offset)
            group[2].append(before)
            group[3].append(arrival)
            group[4].append(tuple(r.headers))
        self._clock = clock
        return size

    def _open_group(
        self,
        tp: TopicPartition,
        key: Any,
        groups: dict[Any, _Group],
        r: KafkaRecord,
        value: Any,
        before: float,
        arrival: float,
        bad: list[tuple[KafkaRecord, str]],
    ) -> None:
        """Begin the group of ``key``'s stream with record ``r``, or add ``r`` to ``bad``: a
        key that names no stream."""
        sid = self._stream_id(tp, key)
        if sid is None:
            bad.append((r, "has a key that is not UTF-8"))
        else:
            groups[key] = ([value], [r.offset], [before], [arrival], [tuple(r.headers)], sid)

    def _batches(
        self, tp: TopicPartition, groups: dict[Any, _Group], shift: int, per_record: float
    ) -> list[QueueMessage]:
        """One message a group: a :class:`RecordBatch` of its stream's records."""
        queue, made = self._queue, []
        hop = tp.topic == self._hop  # events show their source records, not the hop's copies
        for values, offsets, clocks, times, headers, sid in groups.values():
            batch = RecordBatch(sid, values, times, headers, offsets, unwrap=_unwrapped_all if hop else None)
            batch.byte_size = int(per_record * len(values))
            batch.clocks = clocks
            if clocks[0] > -math.inf:
                batch.clock_before = clocks[0]
            made.append(QueueMessage(queue, offsets[0] + shift, b"", batch.arrival_time, batch))
        return made

    def _refused(
        self, tp: TopicPartition, bad: list[tuple[KafkaRecord, str]], too_large: list[KafkaRecord], shift: int
    ) -> list[QueueMessage]:
        """One message a record that does not decode or is too large, saying why (the pulling
        agent dead-letters it)."""
        queue, made = self._queue, []
        for r, why in bad:
            error = DecodeError(f"{tp.topic} partition {tp.partition} offset {r.offset} {why}", r.offset)
            made.append(QueueMessage(queue, r.offset + shift, r.value or b"", r.timestamp / 1000, error))
        for r in too_large:
            error = RecordTooLargeError(
                f"{tp.topic} partition {tp.partition} offset {r.offset} is {len(r.value or b''):,} bytes, "
                f"over max_event_size ({self._max_size:,} bytes)",
                r.offset,
            )
            prefix = (r.value or b"")[:LETTER_PREFIX]  # the letter keeps a prefix, not the record
            made.append(QueueMessage(queue, r.offset + shift, prefix, r.timestamp / 1000, error))
        return made

    def _last_word(self, r: KafkaRecord, exc: Exception, bad: list[tuple[KafkaRecord, str]]) -> Any:
        """The value of a record the reader's first decoder refused with ``exc``, as the
        format's own ``decode`` reads it (JSON: Python's json, after msgspec); or
        :data:`_UNREAD`, the record added to ``bad`` with why, when that refuses it too."""
        if self._decode != self._format_decode:  # a first decoder refused it: decode reads it again
            try:
                return self._format_decode(r.value)  # type: ignore[arg-type]  # None raises
            except Exception as again:  # the format's own errors: any type
                exc = again
        what = "no value (a tombstone)" if r.value is None else f"{exc!r}"
        bad.append((r, f"does not decode as {self._format.name}: {what}"))
        return _UNREAD

    def _stream_id(self, tp: TopicPartition, key: Any) -> StreamId | None:
        """The stream of ``key`` (bytes, a field's value, or None) in ``tp``'s topic; None
        for a key that is not UTF-8."""
        cache_key = (tp.topic, key if key is not None else tp.partition)
        sid = self._stream_ids.get(cache_key)
        if sid is None:
            if key is None:
                text = str(tp.partition)
            elif isinstance(key, bytes):
                try:
                    text = key.decode()
                except UnicodeDecodeError:
                    return None
            else:
                text = str(key)
            if len(self._stream_ids) >= 100_000:
                self._stream_ids.clear()
            sid = self._stream_ids[cache_key] = interned(StreamId(self._namespaces[tp.topic], text))
        return sid


class Seeks(Protocol):
    """A consumer that can be sent back to an offset (``AIOKafkaConsumer.seek``)."""

    def seek(self, partition: TopicPartition, offset: int) -> None: ...


async def prepared(
    prepare: Callable[[Sequence[tuple[bytes | None, RecordInfo]]], Awaitable[int]], consumer: Seeks, fetched: Fetched
) -> Fetched:
    """The records of a read that a record format is ready to decode, once ``prepare`` (its
    lookups: a schema registry's) is done: each partition's up to the first it cannot have
    yet (the registry away, a schema id it does not know yet), ``consumer`` sent back to read
    the rest again. When none is ready, the lookup's error is raised: the pulling agent reads
    again after a back-off and shows the queue's outage. Records are never dead-lettered for
    what retrying can fix."""
    ready: dict[TopicPartition, Sequence[KafkaRecord]] = {}
    failure: Exception | None = None
    for tp, taken in fetched.items():
        count = 0
        if failure is None and taken:
            try:
                count = await prepare(
                    [(r.value, RecordInfo(tp.topic, tp.partition, r.offset, r.headers)) for r in taken]
                )
            except Exception as exc:  # the format's own errors: any type, all retried
                failure = exc
        if count:
            ready[tp] = taken[:count]
        if count < len(taken):
            consumer.seek(tp, taken[count].offset)  # the rest is read again
    if not ready and failure is not None:
        raise failure
    return ready
