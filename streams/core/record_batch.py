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
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, cast

from streams.core.batch import BatchContainer, BatchKind, Event, EventBatch
from streams.core.ids import SequenceToken, StreamId

Headers = Sequence[tuple[str, bytes]]


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

    __slots__ = ("headers", "times", "offsets", "shown_offsets", "clocks")

    def __init__(
        self,
        stream_id: StreamId,
        values: list[Any],
        times: list[float],
        headers: list[Headers],
        offsets: list[int],
        *,
        shown_offsets: list[int] | None = None,
    ) -> None:
        super().__init__(stream_id, BatchKind.DATA, max(times), values, times)
        self.times = times  # every event's own (the base class allows None for "arrival")
        self.headers = headers
        self.offsets = offsets  # where the queue reads each record: positions, replays
        # What each event shows as its offset, when not that: a re-keyed record's source.
        self.shown_offsets = shown_offsets
        # Per record, the queue's clock just before it (the newest arrival time of the
        # partition's earlier records, other streams' included), when the reader knows it.
        self.clocks: list[float] | None = None

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
                event = cast(RecordEvent, at(values[i], times[i], times[i], seq, i, sid))
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
