"""Batches of one-event records: what a receiver makes of foreign records of one stream.

A topic written by other programs holds one event per record. The receiver gathers the
records of one read by stream into one :class:`RecordBatch`, so the runtime's per-batch work
(agent, cache, cursor, delivery, acknowledgement) is paid once per stream and read, not once
per record. Each event keeps what its record said: the record's timestamp is its arrival
time (and its event time, unless the consumer declares ``timestamp_by``), and the record's
headers come with it.

>>> sid = StreamId("sensors", "s-1")
>>> batch = RecordBatch(sid, [{"t": 1}, {"t": 2}], [10.0, 11.0], [(), (("trace", b"x"),)])
>>> [(e.value, e.arrival_time, e.headers) for e in batch.events(100)]
[({'t': 1}, 10.0, ()), ({'t': 2}, 11.0, (('trace', b'x'),))]
>>> str(batch.events(100)[1].token)
'100:1'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from streams.core.batch import BatchContainer, BatchKind, Event, EventBatch
from streams.core.ids import StreamId

Headers = Sequence[tuple[str, bytes]]


class RecordEvent(Event):
    """An event read from a foreign record: also its record's ``headers``
    (``(name, bytes)`` pairs, in the record's order; ``()`` for none)."""

    __slots__ = ("headers",)
    headers: Headers

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, headers={self.headers!r})"


class RecordBatch(BatchContainer):
    """The events of one stream from several one-event records: values, and per event the
    record's timestamp and headers. The batch's own arrival time is its newest record's."""

    __slots__ = ("headers", "times")

    def __init__(self, stream_id: StreamId, values: list[Any], times: list[float], headers: list[Headers]) -> None:
        super().__init__(stream_id, BatchKind.DATA, max(times), values, times)
        self.times = times  # every event's own (the base class allows None for "arrival")
        self.headers = headers

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
            values, times, headers = container.values, container.times, container.headers
            events = []
            for i in range(self._start, len(values)):
                event = cast(RecordEvent, at(values[i], times[i], times[i], seq, i, sid))
                event.headers = headers[i]
                events.append(event)
            self._events = events
        return events

    def from_index(self, event_index: int) -> EventBatch:
        return RecordEventBatch(self.container, self.sequence_number, max(self._start, event_index))
