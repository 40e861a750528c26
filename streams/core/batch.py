"""Batch containers: the unit a queue carries, and the event views over them.

One queue message holds several events of one stream, msgpack-encoded, each with its event
time. A container is also how punctuation (an explicit watermark) and stream completion travel,
so that they reach consumers in order with the events around them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgpack

from streams.core.codec import EAGER_DECODE_LIMIT, MAGIC, NIL, array_length, encode_batch, stream_id_of, unpack
from streams.core.errors import DecodeError, EncodeError
from streams.core.ids import QueueId, SequenceToken, StreamId
from streams.core.micros import event_micros, to_micros


class BatchKind(enum.IntEnum):
    DATA = 0
    WATERMARK = 1  # a producer's punctuation (StreamInsight CTI); values = [timestamp]
    COMPLETED = 2  # the producer called on_completed()


_KINDS = {int(k): k for k in BatchKind}  # a dict lookup: BatchKind(n) is slow on a hot path


class Event:
    """One event as a consumer sees it.

    ``event_time`` and ``arrival_time`` are POSIX seconds (floats); with no event time given
    at ``on_next`` the event time is the arrival time. ``token`` is its queue position.
    ``event_us`` and ``arrival_us`` are the same times as integer microseconds, made once
    where the event is made (an event time that is no finite number: NaN), so that the
    event-time core reads them without converting per consumer
    (:func:`streams.core.micros.event_micros`).

    >>> e = Event("v", 0.3, 1.5, SequenceToken(7, 0), StreamId("ns", "k"))
    >>> e.event_us, e.arrival_us
    (300000, 1500000)
    """

    # The token is made on demand: a consumer that never looks at it costs no object.
    __slots__ = ("value", "event_time", "arrival_time", "stream_id", "_sequence", "_index", "event_us", "arrival_us")

    def __init__(
        self,
        value: Any,
        event_time: float,
        arrival_time: float,
        token: SequenceToken,
        stream_id: StreamId,
    ) -> None:
        self.value = value
        self.event_time = event_time
        self.arrival_time = arrival_time
        self.stream_id = stream_id
        self._sequence = token.sequence_number
        self._index = token.event_index
        self.event_us = event_micros(event_time)
        self.arrival_us = to_micros(arrival_time)  # an arrival is always a time: raises if not

    @classmethod
    def _at(
        cls,
        value: Any,
        event_time: float,
        arrival_time: float,
        sequence: int,
        index: int,
        stream_id: StreamId,
        event_us: float | None = None,
        arrival_us: int | None = None,
    ) -> Event:
        """An event of a batch: ``event_us`` and ``arrival_us`` as the batch converted them
        (once: one arrival serves a container's events), or converted here."""
        event = cls.__new__(cls)
        event.value = value
        event.event_time = event_time
        event.arrival_time = arrival_time
        event.stream_id = stream_id
        event._sequence = sequence
        event._index = index
        event.event_us = event_micros(event_time) if event_us is None else event_us
        event.arrival_us = to_micros(arrival_time) if arrival_us is None else arrival_us
        return event

    @property
    def token(self) -> SequenceToken:
        return SequenceToken(self._sequence, self._index)

    @property
    def position(self) -> SequenceToken:
        """Where the event stands on every read of its queue, as a replay finds it: its
        token (an event of a one-event record: its record's offset, which its token is not;
        see :mod:`streams.core.record_batch`)."""
        return SequenceToken(self._sequence, self._index)

    def __repr__(self) -> str:
        return (
            f"Event({self.value!r}, event_time={self.event_time!r}, token={self.token}, stream_id={self.stream_id!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self._sequence, self._index, self.stream_id, self.value, self.event_time) == (
            other._sequence,
            other._index,
            other.stream_id,
            other.value,
            other.event_time,
        )

    __hash__ = None  # type: ignore[assignment]


class EventBatch(Sequence[Event]):
    """The events of one batch container, as a consumer receives them: an immutable
    sequence shared by every consumer of the stream.

    Like Orleans' ``IBatchContainer.GetEvents``, it decodes values and makes :class:`Event`
    objects only when they are looked at: ``len(batch)`` costs nothing, ``batch.values`` and
    ``batch.event_times`` give the columns without event objects.

    >>> batch = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 100.0, ["a", "b"]).events(7)
    >>> len(batch), batch.values, str(batch[1].token)
    (2, ['a', 'b'], '7:1')
    """

    __slots__ = ("container", "sequence_number", "_start", "_events")

    def __init__(self, container: BatchContainer, sequence_number: int, start: int = 0) -> None:
        self.container = container
        self.sequence_number = sequence_number
        self._start = start
        self._events: list[Event] | None = None

    @property
    def stream_id(self) -> StreamId:
        return self.container.stream_id

    @property
    def arrival_time(self) -> float:
        return self.container.arrival_time

    @property
    def clock_before(self) -> float | None:
        """The queue's processing clock just before this batch: the newest arrival time of
        the queue's earlier records (None: not known).

        >>> container = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 100.0, ["a"])
        >>> container.clock_before = 98.5
        >>> container.events(7).clock_before
        98.5
        """
        return self.container.clock_before

    def clock_runs(self) -> list[tuple[float | None, Sequence[Event]]]:
        """The batch as runs of events, each with the queue's clock just before it (None:
        not known): one run here (a record's events arrive together); a batch gathered from
        several records has a run wherever other streams' records moved the clock between
        two of its own (:meth:`streams.core.record_batch.RecordEventBatch.clock_runs`).

        >>> container = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 100.0, ["a", "b"])
        >>> [(clock, len(run)) for clock, run in container.events(7).clock_runs()]
        [(None, 2)]
        """
        return [(self.clock_before, self)]

    def __len__(self) -> int:
        return self.container.count - self._start

    @property
    def values(self) -> list[Any]:
        """The event values, in order (do not modify: other consumers share them)."""
        values = self.container.values
        return values[self._start :] if self._start else values  # type: ignore[return-value]

    @property
    def event_times(self) -> list[float]:
        arrival, times = self.arrival_time, self.container.event_times
        if times is None:
            return [arrival] * len(self)
        return [arrival if t is None else t for t in times[self._start :]]

    def _materialize(self) -> list[Event]:
        events = self._events
        if events is None:
            container, seq, at = self.container, self.sequence_number, Event._at
            sid, arrival, values, times = (
                container.stream_id,
                container.arrival_time,
                container.values,
                container.event_times,
            )
            start, arrival_us = self._start, to_micros(arrival)  # one arrival: converted once
            if times is None:
                events = [
                    at(values[i], arrival, arrival, seq, i, sid, arrival_us, arrival_us)
                    for i in range(start, len(values))
                ]
            else:
                events = [
                    at(values[i], arrival, arrival, seq, i, sid, arrival_us, arrival_us)
                    if (t := times[i]) is None
                    else at(values[i], t, arrival, seq, i, sid, None, arrival_us)
                    for i in range(start, len(values))
                ]
            self._events = events
        return events

    def columns(self) -> tuple[list[Any], list[float], list[float]]:
        """``(values, event times, arrival times)`` of its events, without event objects:
        what the event-time core reads of an in-order run (:meth:`event_at` makes the
        event it needs whole).

        >>> BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 100.0, ["a", "b"], [5.0, None]).events(7).columns()
        (['a', 'b'], [5.0, 100.0], [100.0, 100.0])
        """
        return self.values, self.event_times, [self.arrival_time] * len(self)

    def event_at(self, index: int) -> Event:
        """Its event at ``index`` (from the first it holds), made alone if the batch's events
        are not made yet.

        >>> batch = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 100.0, ["a", "b"]).events(7).from_index(1)
        >>> batch.event_at(0)
        Event('b', event_time=100.0, token=7:1, stream_id=StreamId('ns', 'k'))
        """
        if self._events is not None:
            return self._events[index]
        container, i = self.container, self._start + index
        arrival, times = container.arrival_time, container.event_times
        t = None if times is None else times[i]
        return Event._at(
            container.values[i], arrival if t is None else t, arrival, self.sequence_number, i, container.stream_id
        )

    def token_at(self, index: int) -> SequenceToken:
        """The token of its event at ``index`` (from the first it holds)."""
        return SequenceToken(self.sequence_number, self._start + index)

    def __getitem__(self, index: Any) -> Any:
        return self._materialize()[index]

    def __iter__(self) -> Any:
        return iter(self._materialize())

    def from_index(self, event_index: int) -> EventBatch:
        """The same batch without its first ``event_index`` events (a token inside it)."""
        return EventBatch(self.container, self.sequence_number, max(self._start, event_index))

    def last_position(self) -> SequenceToken:
        """Where the last event stands on every read of the queue: what a saved state says
        it holds (:meth:`after` skips up to there in a replay). Here its token; events of
        one-event records stand at their record (:mod:`streams.core.record_batch`).

        >>> BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 1.0, ["a", "b"]).events(7).last_position()
        SequenceToken(sequence_number=7, event_index=1)
        """
        return SequenceToken(self.sequence_number, self.container.count - 1)

    def after(self, position: SequenceToken) -> EventBatch:
        """The events past ``position`` (a :meth:`last_position` of the same stream).

        >>> batch = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 1.0, ["a", "b"]).events(7)
        >>> batch.after(SequenceToken(7, 0)).values, len(batch.after(SequenceToken(8, 0)))
        (['b'], 0)
        """
        if self.sequence_number > position.sequence_number:
            return self
        if self.sequence_number < position.sequence_number:
            return self.from_index(self.container.count)
        return self.from_index(position.event_index + 1)

    def starting_at(self, token: SequenceToken) -> EventBatch:
        """The events from ``token`` on (a cursor that starts at ``token``).

        >>> batch = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 1.0, ["a", "b"]).events(7)
        >>> batch.starting_at(SequenceToken(7, 1)).values, len(batch.starting_at(SequenceToken(8)))
        (['b'], 0)
        """
        if token.sequence_number < self.sequence_number:
            return self
        if token.sequence_number > self.sequence_number:
            return self.from_index(self.container.count)
        return self.from_index(token.event_index)

    def __repr__(self) -> str:
        return f"EventBatch({self.stream_id!r}, {self.sequence_number}, {len(self)} events)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EventBatch, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class KeptEvents(Sequence[Event]):
    """The events of one batch that a subscription's filter kept (``subscribe(observer,
    filter=...)``), in order: what a filtered observer receives in place of an
    :class:`EventBatch`, with the same columns (``values``, ``event_times``) and
    ``stream_id``. The events keep their tokens, so gaps show where the filter dropped some.

    >>> batch = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 100.0, ["a", "b", "c"]).events(7)
    >>> kept = KeptEvents(batch.stream_id, [e for e in batch if e.value != "b"])
    >>> len(kept), kept.values, [str(e.token) for e in kept]
    (2, ['a', 'c'], ['7:0', '7:2'])
    """

    __slots__ = ("stream_id", "_events")

    def __init__(self, stream_id: StreamId, events: list[Event]) -> None:
        self.stream_id = stream_id
        self._events = events

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, index: Any) -> Any:
        return self._events[index]

    def __iter__(self) -> Any:
        return iter(self._events)

    @property
    def values(self) -> list[Any]:
        return [e.value for e in self._events]

    @property
    def event_times(self) -> list[float]:
        return [e.event_time for e in self._events]

    def __repr__(self) -> str:
        return f"KeptEvents({self.stream_id!r}, {len(self)} events)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EventBatch, KeptEvents, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def to_seconds(t: float | int | datetime | None) -> float | None:
    """Normalise an event time: POSIX seconds or an aware ``datetime``."""
    if t is None:
        return None
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise EncodeError("an event time datetime needs a timezone (e.g. tzinfo=UTC)")
        return t.timestamp()
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    raise EncodeError(f"an event time is POSIX seconds or an aware datetime, not {t!r}")


class BatchContainer:
    """One queue message: events of one stream, or a watermark, or a completion.

    A decoded container reads only its header (stream, kind, arrival time, event count) and
    checks the structure of the rest; values and event times are decoded on first access,
    so routing a batch through the agent and cache costs no per-event work.
    """

    __slots__ = (
        "stream_id",
        "kind",
        "arrival_time",
        "count",
        "_values",
        "_times",
        "_payload",
        "dead_lettered",
        "clock_before",
        "byte_size",
    )

    def __init__(
        self,
        stream_id: StreamId,
        kind: BatchKind,
        arrival_time: float,
        values: Sequence[Any],
        event_times: Sequence[float | None] | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.kind = kind
        self.arrival_time = arrival_time
        self.count = len(values)
        self._values: Sequence[Any] | None = values
        self._times = event_times
        self._payload: bytes | None = None
        self.dead_lettered = False  # set by the first consumer that found the body undecodable
        # The queue's processing clock just before this container's first record: the newest
        # arrival time of the queue's earlier records, set by whoever read it in queue order
        # (None: not known, the first record read). An activation that sees only its own
        # stream catches up with it before the batch (docs/event-time.md, backlogs).
        self.clock_before: float | None = None
        # The bytes of the records it was made of, when a receiver made it (its own payload's
        # length counts otherwise): what a queue cache bounded in bytes counts it as.
        self.byte_size = 0

    @property
    def values(self) -> Sequence[Any]:
        if self._values is None:
            self._decode_body()
        return self._values  # type: ignore[return-value]

    @property
    def event_times(self) -> Sequence[float | None] | None:
        if self._values is None:
            self._decode_body()
        return self._times

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchContainer):
            return NotImplemented
        return (self.stream_id, self.kind, self.arrival_time, list(self.values), self.event_times) == (
            other.stream_id,
            other.kind,
            other.arrival_time,
            list(other.values),
            other.event_times,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BatchContainer({self.stream_id!r}, {self.kind.name}, {self.count} events)"

    def encode(self) -> bytes:
        if self._payload is not None:
            return self._payload
        return encode_batch(self.stream_id, self.kind, self.arrival_time, self.values, self.event_times)

    @staticmethod
    def decode(payload: bytes) -> BatchContainer:
        """Read the header and check the structure; raises :class:`DecodeError` for bytes
        that are not a batch container (foreign, truncated, corrupt).

        A small container is checked by decoding it whole, which for one C call costs less
        than reading its header step by step (0.8 against 1.9 µs for 25 ints); its values are
        dropped all the same and decoded again when read, so that batches waiting in a cache
        stay bytes, not objects. A large one, or one that does not decode cleanly, takes the
        header-only path, which names what is wrong or leaves the values to be decoded (and
        found unreadable) at delivery."""
        if len(payload) <= EAGER_DECODE_LIMIT:
            container = BatchContainer._decode_whole(payload)
            if container is not None:
                return container
        return BatchContainer._decode_header(payload)

    @staticmethod
    def _decode_whole(payload: bytes) -> BatchContainer | None:
        """The container if ``payload`` is a well-formed one, else ``None`` (the header path
        then says why)."""
        try:
            obj = unpack(payload)
            if type(obj) is not list or len(obj) != 7:
                return None
            magic, kind, namespace, key, arrival, values, times = obj
            if (
                magic != MAGIC
                or type(values) is not list
                or (times is not None and (type(times) is not list or len(times) != len(values)))
            ):
                return None
            return BatchContainer._header_only(payload, kind, namespace, key, arrival, len(values))
        except Exception:  # foreign or corrupt bytes: msgpack and the unpacking raise several types
            return None

    @staticmethod
    def _decode_header(payload: bytes) -> BatchContainer:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(payload)
        try:
            if unpacker.read_array_header() != 7 or unpacker.unpack() != MAGIC:
                raise DecodeError("not a headrace batch container (bad header)")
            kind, namespace, key, arrival = (unpacker.unpack() for _ in range(4))
            at = unpacker.tell()
            count = array_length(payload, at)
            unpacker.skip()  # the values, checked for structure in one call, not decoded
            times_at = unpacker.tell()
            unpacker.skip()
            if unpacker.tell() != len(payload):
                raise DecodeError("malformed batch container: trailing bytes")
            if payload[times_at] != NIL and array_length(payload, times_at) != count:
                raise DecodeError("malformed batch container: values and event times disagree")
            return BatchContainer._header_only(payload, kind, namespace, key, arrival, count)
        except DecodeError:
            raise
        except Exception as exc:  # msgpack and the checks raise several types for bad input
            raise DecodeError(f"not a headrace batch container: {exc!r}") from None

    @staticmethod
    def _header_only(payload: bytes, kind: Any, namespace: Any, key: Any, arrival: Any, count: int) -> BatchContainer:
        """A decoded container: its header read, its values left in ``payload`` until asked
        for. Raises (not DecodeError) for header fields of the wrong type."""
        container = BatchContainer(stream_id_of(namespace, key), _KINDS[kind], float(arrival), ())
        container.count = count
        container._values = None
        container._payload = payload
        return container

    @property
    def payload(self) -> bytes | None:
        """The bytes this container was decoded from (None for one built in this process)."""
        return self._payload

    def last_sequence(self, sequence_number: int) -> int:
        """The queue position of the last record this container, read at ``sequence_number``,
        holds: that one (a group of records holds several, :mod:`streams.core.record_batch`)."""
        return sequence_number

    def given_time(self, event: Event) -> float | None:
        """The event time the producer gave ``event`` of this container (None: none given)."""
        times = self.event_times
        return None if times is None else times[event._index]

    def _decode_body(self) -> None:
        try:
            obj = unpack(self._payload)  # type: ignore[arg-type]  # None raises TypeError: caught
        except Exception as exc:  # e.g. a string that is not UTF-8, which skip() does not check
            raise DecodeError(f"malformed batch container: {exc!r}") from None
        self._times = obj[6]
        self._values = obj[5]

    def events(self, sequence_number: int) -> EventBatch:
        """The container's events, with tokens ``sequence_number:i``."""
        return EventBatch(self, sequence_number)


class QueueMessage(NamedTuple):
    """What a receiver returns: one raw record of a queue at its position.

    Decoding happens in the pulling agent, so that a record that is not a batch container is
    dead-lettered in one place, with its raw bytes, queue and offset, whatever the adapter.
    (A named tuple: receivers make one per record, and tuples are the cheapest to make.)
    """

    queue: QueueId
    sequence_number: int
    payload: bytes
    enqueued_time: float | None = None
    # What a receiver that decodes records itself made of them (a batch of foreign records,
    # or why a record does not decode); None: ``payload`` is a batch container's bytes.
    decoded: BatchContainer | DecodeError | None = None

    @property
    def token(self) -> SequenceToken:
        return SequenceToken(self.sequence_number, 0)

    def container(self) -> BatchContainer:
        """The batch container this message carries; raises :class:`DecodeError` for a
        record that is not one."""
        decoded = self.decoded
        if decoded is None:
            return BatchContainer.decode(self.payload)
        if isinstance(decoded, DecodeError):
            raise decoded
        return decoded
