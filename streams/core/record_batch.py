"""Batches of one-event records: what a receiver makes of foreign records of one stream.

A topic written by other programs holds one event per record. The receiver gathers the
records of one read by stream into one :class:`RecordBatch`, so the runtime's per-batch work
(agent, cache, cursor, delivery, acknowledgement) is paid once per stream and read, not once
per record. Each event keeps what its record said: the record's timestamp is its arrival
time (and its event time, unless the consumer declares ``timestamp_by``), its headers, and
its offset.

An event's token is its queue position, which depends on how the reads were grouped (the
batch stands at its first record); its record's offset does not. So its ``position`` (where
a replay finds it) is ``offset:0``: what a saved state keeps of the last event it took
(:meth:`RecordEventBatch.last_position`; a replay, grouped otherwise, skips exactly the
records at or below it, :meth:`RecordEventBatch.after`), and what a handoff's mark keeps of
the events it handed off.

>>> sid = StreamId("sensors", "s-1")
>>> batch = RecordBatch(sid, [{"t": 1}, {"t": 2}], [10.0, 11.0], [(), (("trace", b"x"),)], [100, 104])
>>> [(e.value, e.arrival_time, e.headers, e.offset) for e in batch.events(100)]
[({'t': 1}, 10.0, (), 100), ({'t': 2}, 11.0, (('trace', b'x'),), 104)]
>>> str(batch.events(100)[1].token), str(batch.events(100)[1].position), str(batch.events(100).last_position())
('100:1', '104:0', '104:0')
>>> batch.events(100).after(SequenceToken(102)).values
[{'t': 2}]
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import msgspec

from streams.core.batch import BatchContainer, BatchKind, Event, EventBatch, QueueMessage
from streams.core.codec import MAGIC, as_ext_type, stream_id_of
from streams.core.errors import DecodeError
from streams.core.ids import QueueId, SequenceToken, StreamId
from streams.core.micros import to_micros

Headers = Sequence[tuple[str, bytes]]
# A reader's records' headers and offsets -> the headers and offsets their events show.
Unwrap = Callable[[list[Headers], list[int]], tuple[list[Headers], list[int]]]


class RecordEvent(Event):
    """An event read from a foreign record: also its record's ``headers``
    (``(name, bytes)`` pairs, in the record's order; ``()`` for none) and ``offset`` (its
    position in its topic's partition: the same on every read). A record the re-keying hop
    sent on shows its source record's offset and headers, as the user's topic holds it;
    its ``position`` is where the queue reads it (the hop's copy)."""

    __slots__ = ("headers", "offset", "_read_at")
    headers: Headers
    offset: int
    _read_at: int  # the offset the queue reads it at (its position)

    @property
    def position(self) -> SequenceToken:
        return SequenceToken(self._read_at)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, headers={self.headers!r}, offset={self.offset})"


class RecordBatch(BatchContainer):
    """The events of one stream from several one-event records: values, and per event the
    record's timestamp, headers and offset (growing: one partition's records, in order).
    The batch's own arrival time is its newest record's."""

    __slots__ = ("_headers", "times", "offsets", "_shown_offsets", "clocks", "_unwrap")

    def __init__(
        self,
        stream_id: StreamId,
        values: list[Any],
        times: list[float],
        headers: list[Headers],
        offsets: list[int],
        *,
        shown_offsets: list[int] | None = None,
        unwrap: Unwrap | None = None,
    ) -> None:
        super().__init__(stream_id, BatchKind.DATA, max(times), values, times)
        self.times = times  # every event's own (the base class allows None for "arrival")
        self._headers = headers
        self.offsets = offsets  # where the queue reads each record: positions, replays
        # What each event shows as its offset, when not that: a re-keyed record's source.
        self._shown_offsets = shown_offsets
        # The records' headers as read, to be unwrapped into what the events show (their
        # headers and offsets) once an event is made: a consumer that takes the batch as
        # columns, or its values, never pays for it.
        self._unwrap = unwrap
        # Per record, the queue's clock just before it (the newest arrival time of the
        # partition's earlier records, other streams' included), when the reader knows it.
        self.clocks: list[float] | None = None

    @property
    def headers(self) -> list[Headers]:
        """Each event's headers, as it shows them."""
        if self._unwrap is not None:
            self._unwrapped()
        return self._headers

    @property
    def shown_offsets(self) -> list[int] | None:
        """What each event shows as its offset, when not its record's (None: those)."""
        if self._unwrap is not None:
            self._unwrapped()
        return self._shown_offsets

    def _unwrapped(self) -> None:
        unwrap, self._unwrap = self._unwrap, None
        assert unwrap is not None
        self._headers, self._shown_offsets = unwrap(self._headers, self.offsets)

    def events(self, sequence_number: int) -> EventBatch:
        return RecordEventBatch(self, sequence_number)


class RecordEventBatch(EventBatch):
    """An :class:`EventBatch` whose events carry their own arrival times and headers."""

    __slots__ = ()

    def _materialize(self) -> list[Event]:
        events = self._events
        if events is None:
            container = self.container
            assert isinstance(container, RecordBatch)
            seq, sid, at = self.sequence_number, container.stream_id, RecordEvent._at
            values, times, headers, offsets = container.values, container.times, container.headers, container.offsets
            shown = container.shown_offsets or offsets
            events = []
            for i in range(self._start, len(values)):
                t, us = times[i], to_micros(times[i])  # its record's timestamp: event time and arrival
                event = cast(RecordEvent, at(values[i], t, t, seq, i, sid, us, us))
                event.headers = headers[i]
                event.offset = shown[i]
                event._read_at = offsets[i]
                events.append(event)
            self._events = events
        return events

    def columns(self) -> tuple[list[Any], list[float], list[float]]:
        """Values, and each record's timestamp as both its event time and its arrival."""
        container = self.container
        assert isinstance(container, RecordBatch)
        times = container.times[self._start :] if self._start else container.times
        return self.values, times, times

    def event_at(self, index: int) -> Event:
        if self._events is not None:
            return self._events[index]
        container, i = self.container, self._start + index
        assert isinstance(container, RecordBatch)
        t = container.times[i]
        event = cast(
            RecordEvent, RecordEvent._at(container.values[i], t, t, self.sequence_number, i, container.stream_id)
        )
        event.headers = container.headers[i]
        event.offset = (container.shown_offsets or container.offsets)[i]
        event._read_at = container.offsets[i]
        return event

    def from_index(self, event_index: int) -> EventBatch:
        return RecordEventBatch(self.container, self.sequence_number, max(self._start, event_index))

    def clock_runs(self) -> list[tuple[float | None, Sequence[Event]]]:
        """Runs of events, a new one wherever the queue's clock before a record is past the
        arrival of this stream's previous record (other streams' records came between), each
        with that clock: an activation catches up with it before the run, as it would have
        had each record come alone.

        >>> sid = StreamId("sensors", "s-1")
        >>> batch = RecordBatch(sid, ["a", "b", "c"], [10.0, 11.0, 15.0], [(), (), ()], [0, 1, 4])
        >>> batch.clocks = [9.0, 10.0, 14.0]  # offsets 2 and 3, another stream's, came at 14
        >>> [(clock, [e.value for e in run]) for clock, run in batch.events(0).clock_runs()]
        [(9.0, ['a', 'b']), (14.0, ['c'])]
        """
        container = self.container
        assert isinstance(container, RecordBatch)
        clocks, times, start = container.clocks, container.times, self._start
        if clocks is None:
            return [(self.clock_before, self)]
        events = self._materialize()
        runs: list[tuple[float | None, Sequence[Event]]] = []
        first = start
        for i in range(start + 1, len(times)):
            if clocks[i] > times[i - 1]:
                runs.append((_known(clocks[first]), events[first - start : i - start]))
                first = i
        runs.append((_known(clocks[first]), events[first - start :]))
        return runs

    def last_position(self) -> SequenceToken:
        """The last event's record: ``offset:0``."""
        container = self.container
        assert isinstance(container, RecordBatch)
        return SequenceToken(container.offsets[-1])

    def after(self, position: SequenceToken) -> EventBatch:
        """The events of the records past offset ``position.sequence_number``."""
        container = self.container
        assert isinstance(container, RecordBatch)
        return self.from_index(bisect_right(container.offsets, position.sequence_number))


def _known(clock: float) -> float | None:
    return None if clock == -math.inf else clock


class ContainerGroup(BatchContainer):
    """One-event batch containers of one stream, from several records of one read: what a
    receiver of headrace's own format makes of a read whose records hold one event each, so
    that the runtime's per-batch work is paid once per stream and read (as for foreign
    records, :class:`RecordBatch`).

    Unlike a :class:`RecordBatch`'s, its events are exactly what their records give one by
    one: each event's token (and position) is its record's, ``offset:0``, and its event and
    arrival times are its container's. So a token means the same on every read, grouped or
    not: a rewind, which reads the records one by one, and a cursor that starts inside a
    group (:meth:`ContainerGroupEvents.starting_at`) find the same events.

    >>> sid = StreamId("sensors", "s-1")
    >>> group = ContainerGroup(sid, ["a", "b", "c"], [None, 5.0, None], [10.0, 11.0, 12.0], [100, 104, 107])
    >>> batch = group.events(100)
    >>> [(e.value, e.event_time, e.arrival_time, str(e.token)) for e in batch]
    [('a', 10.0, 10.0, '100:0'), ('b', 5.0, 11.0, '104:0'), ('c', 12.0, 12.0, '107:0')]
    >>> str(batch.last_position()), batch.after(SequenceToken(104)).values, group.last_sequence(100)
    ('107:0', ['c'], 107)
    >>> batch.starting_at(SequenceToken(104)).values, batch.starting_at(SequenceToken(104, 1)).values
    (['b', 'c'], ['c'])
    """

    __slots__ = ("given", "times", "arrivals", "offsets", "clocks")

    def __init__(
        self,
        stream_id: StreamId,
        values: list[Any],
        given: list[float | None],
        arrivals: list[float],
        offsets: list[int],
    ) -> None:
        super().__init__(stream_id, BatchKind.DATA, max(arrivals), values, given)
        self.given = given  # the event time each container gave (None: its arrival)
        # The event times as delivered: the arrivals themselves when none was given.
        self.times = (
            arrivals if given.count(None) == len(given) else [a if t is None else t for t, a in zip(given, arrivals)]
        )
        self.arrivals = arrivals
        self.offsets = offsets  # each record's offset: its event's token and position
        # Per record, the queue's clock just before it (the newest arrival time of the
        # partition's earlier records, other streams' included), when the reader knows it.
        self.clocks: list[float] | None = None

    def events(self, sequence_number: int) -> EventBatch:
        return ContainerGroupEvents(self, sequence_number)

    def last_sequence(self, sequence_number: int) -> int:
        return self.offsets[-1]

    def given_time(self, event: Event) -> float | None:
        return self.given[bisect_left(self.offsets, event._sequence)]


class ContainerGroupEvents(EventBatch):
    """The events of a :class:`ContainerGroup`: each with its own record's token."""

    __slots__ = ()

    def _group(self) -> ContainerGroup:
        container = self.container
        assert isinstance(container, ContainerGroup)
        return container

    def _materialize(self) -> list[Event]:
        events = self._events
        if events is None:
            group = self._group()
            sid, at = group.stream_id, Event._at
            values, times, arrivals, offsets = group.values, group.times, group.arrivals, group.offsets
            events = [at(values[i], times[i], arrivals[i], offsets[i], 0, sid) for i in range(self._start, len(values))]
            self._events = events
        return events

    @property
    def event_times(self) -> list[float]:
        times = self._group().times
        return times[self._start :] if self._start else times

    def columns(self) -> tuple[list[Any], list[float], list[float]]:
        group, start = self._group(), self._start
        if start:
            return self.values, group.times[start:], group.arrivals[start:]
        return self.values, group.times, group.arrivals

    def event_at(self, index: int) -> Event:
        if self._events is not None:
            return self._events[index]
        group, i = self._group(), self._start + index
        return Event._at(group.values[i], group.times[i], group.arrivals[i], group.offsets[i], 0, group.stream_id)

    def token_at(self, index: int) -> SequenceToken:
        return SequenceToken(self._group().offsets[self._start + index])

    def from_index(self, event_index: int) -> EventBatch:
        return ContainerGroupEvents(self.container, self.sequence_number, max(self._start, event_index))

    def clock_runs(self) -> list[tuple[float | None, Sequence[Event]]]:
        """Runs of events, a new one wherever other streams' records moved the queue's
        clock past this stream's previous record (as :meth:`RecordEventBatch.clock_runs`)."""
        group, start = self._group(), self._start
        clocks, arrivals = group.clocks, group.arrivals
        if clocks is None:
            return [(self.clock_before, self)]
        events = self._materialize()
        runs: list[tuple[float | None, Sequence[Event]]] = []
        first = start
        for i in range(start + 1, len(arrivals)):
            if clocks[i] > arrivals[i - 1]:
                runs.append((_known(clocks[first]), events[first - start : i - start]))
                first = i
        runs.append((_known(clocks[first]), events[first - start :]))
        return runs

    def last_position(self) -> SequenceToken:
        return SequenceToken(self._group().offsets[-1])

    def after(self, position: SequenceToken) -> EventBatch:
        """The events of the records past ``position`` (one-event records: its offset)."""
        return self.from_index(bisect_right(self._group().offsets, position.sequence_number))

    def starting_at(self, token: SequenceToken) -> EventBatch:
        """The events from ``token`` on (a token at one of its records: from that record)."""
        offsets, seq = self._group().offsets, token.sequence_number
        return self.from_index(bisect_right(offsets, seq) if token.event_index else bisect_left(offsets, seq))


class _OneEvent(msgspec.Struct, array_like=True, gc=False):
    """A batch container of one event, as :func:`~streams.core.codec.encode_batch` writes it:
    msgspec checks the fields' types as it reads them (a float field takes an int too), and
    refuses a container of several events before reading their values. Not tracked by the
    garbage collector (it is read and dropped at once, and refers to nothing that refers
    back): one allocation a record fewer towards the next collection."""

    magic: str
    kind: int
    namespace: str
    key: str
    arrival: float
    values: tuple[Any]
    times: tuple[float | None] | None


_decode_one = msgspec.msgpack.Decoder(_OneEvent, ext_hook=as_ext_type).decode


class RawRecord(Protocol):
    """A record of a read as a receiver fetched it (a Kafka consumer record): its position
    and its bytes (None: a record with no value)."""

    @property
    def offset(self) -> int: ...

    @property
    def value(self) -> bytes | None: ...


_Gathering = tuple[list[Any], list[float | None], list[float], list[int], list[float]]


def gathered(messages: Sequence[QueueMessage], clock: float, max_size: int = 1 << 20) -> list[QueueMessage]:
    """``messages`` (one read of a queue, in position order) with the batch containers of
    one event gathered by stream into one :class:`ContainerGroup` each, a message at its
    first record's position: the runtime's per-batch work is then paid once per stream and
    read, as for foreign records. Every other message (a container of several events, a
    watermark, a completion, a record that does not decode, a batch a receiver made) stays
    as it is and ends its stream's group, so that a stream's messages keep their order.
    ``clock`` is the queue's processing clock before the read (the newest arrival time read
    before it, -inf: not known): each record learns the clock just before it. A record over
    ``max_size`` bytes is left as it is, never decoded (the pulling agent letters it ``too_large``).

    >>> from streams.core.codec import encode_batch
    >>> from streams.core.ids import QueueId
    >>> a, b = StreamId("ns", "a"), StreamId("ns", "b")
    >>> read = [encode_batch(a, 0, 1.0, [1]), encode_batch(b, 0, 2.0, [2]), encode_batch(a, 0, 3.0, [3]),
    ...         encode_batch(a, 2, 4.0, []), encode_batch(a, 0, 5.0, [5])]
    >>> out = gathered([QueueMessage(QueueId(0), n, p) for n, p in enumerate(read)], -math.inf)
    >>> [(m.sequence_number, m.container().kind.name, list(m.container().values)) for m in out]
    [(0, 'DATA', [1, 3]), (1, 'DATA', [2]), (3, 'COMPLETED', []), (4, 'DATA', [5])]
    >>> [str(e.token) for e in out[0].container().events(0)]
    ['0:0', '2:0']
    """
    # In position order as made: a group's place is its first record's (it is made there).
    out: list[QueueMessage | _Gathering] = []
    names: dict[int, tuple[str, str]] = {}  # id of a group -> its namespace and key
    open_groups: dict[str, dict[str, _Gathering]] = {}  # namespace -> key -> its open group
    namespace: str | None = None
    keyed: dict[str, _Gathering] = {}
    decode, gathered_bytes = _decode_one, 0  # of the records gathered: their groups share the bytes
    payloads, positions = _payloads(messages)
    for i, payload in enumerate(payloads):
        before = clock
        if payload is not None:
            if len(payload) > max_size:
                out.append(messages[i])
                continue
            try:
                c: _OneEvent | None = decode(payload)
            except Exception:  # several events, or not a container: read below
                c = None
            if c is not None and c.kind == 0 and c.magic == MAGIC:  # one event of data
                gathered_bytes += len(payload)
                if c.arrival > clock:
                    clock = c.arrival
                if c.namespace != namespace:
                    namespace = c.namespace
                    keyed = open_groups.setdefault(namespace, {})
                group = keyed.get(c.key) or _opened(keyed, c.key, namespace, names, out)
                times = c.times
                group[0].append(c.values[0])
                group[1].append(None if times is None else times[0])
                group[2].append(c.arrival)
                group[3].append(positions[i])
                group[4].append(before)
                continue
        message, clock = _alone(messages[i], before, clock, open_groups)
        out.append(message)
    return _made(messages, out, names, gathered_bytes)


def _payloads(messages: Sequence[QueueMessage]) -> tuple[Sequence[bytes | None], Sequence[int]]:
    """The bytes to try decoding as one event (None: a message decoded already) and the
    position of each message of a read. A read that holds its raw records
    (streams.backends.kafka.records.ContainerMessages) makes a record's message only when
    the record is a message of its own: a record gathered costs no message object."""
    raw: Sequence[RawRecord] | None = getattr(messages, "records", None)
    if raw is not None:
        return [r.value or b"" for r in raw], [r.offset for r in raw]
    return [m.payload if m.decoded is None else None for m in messages], [m.sequence_number for m in messages]


def _opened(
    keyed: dict[str, _Gathering],
    key: str,
    namespace: str,
    names: dict[int, tuple[str, str]],
    out: list[QueueMessage | _Gathering],
) -> _Gathering:
    """A new open group for stream ``namespace``/``key``, in place in ``out``."""
    group: _Gathering = ([], [], [], [], [])
    keyed[key] = group
    names[id(group)] = (namespace, key)
    out.append(group)
    return group


def _alone(
    message: QueueMessage, before: float, clock: float, open_groups: dict[str, dict[str, _Gathering]]
) -> tuple[QueueMessage, float]:
    """A message of its own (decoded, with the clock before it) and the queue's clock after
    it: it ends its stream's open group (made before it, so that group goes first)."""
    try:
        container = message.container()
    except DecodeError:
        return message, clock  # the pulling agent dead-letters it
    sid = container.stream_id
    open_groups.get(sid.namespace, {}).pop(sid.key, None)
    if container.clock_before is None and before > -math.inf:
        container.clock_before = before
    if message.decoded is None:
        message = message._replace(decoded=container)
    return message, max(clock, container.arrival_time)


def _made(
    messages: Sequence[QueueMessage], out: list[QueueMessage | _Gathering], names: dict[int, tuple[str, str]], size: int
) -> list[QueueMessage]:
    """``out`` with each group made a message (``size``: the bytes of the records gathered)."""
    if not names:  # no group made: every entry is a message
        return cast(list[QueueMessage], out)
    queue = messages[0].queue
    per_record = size / sum(len(m[0]) for m in out if not isinstance(m, QueueMessage))
    return [
        m if isinstance(m, QueueMessage) else _group_message(queue, stream_id_of(*names[id(m)]), m, per_record)
        for m in out
    ]


def _group_message(queue: QueueId, sid: StreamId, group: _Gathering, per_record: float) -> QueueMessage:
    values, given, arrivals, positions, clocks = group
    batch = ContainerGroup(sid, values, given, arrivals, positions)
    batch.byte_size = int(per_record * len(values))
    batch.clocks = clocks
    if clocks[0] > -math.inf:
        batch.clock_before = clocks[0]
    return QueueMessage(queue, positions[0], b"", batch.arrival_time, batch)
