"""Releasing events in timestamp order once the watermark has passed them.

A windowless consumer that hands its events to Spark hands over what the watermark has
finalized: an event leaves when the watermark reaches its timestamp (ASA's
``System.Timestamp``, after the ordering policy), and events leave in timestamp order, ties in
arrival order. Every event that arrives later is at or above the watermark (the ordering
policy adjusts or drops the others; ``accept`` keeps them, and they leave at once, out of
order, as accepted), so the released stream never goes back in time.

Each event also has a queue position (its sequence token): :meth:`TimestampOrder.oldest` is
the lowest one still held, which is where a replay after a crash must start. And it has a
position where every read finds it (``record.position``: the token itself, except for an
event of a one-event record, whose token depends on how the reads were grouped and whose
position is its record's offset): :meth:`TimestampOrder.below` is the one under which
nothing is still held, what makes a replayed event recognisable as handed off already.

Releasing the events of several inputs in one event-time order.

An activation fed by several inputs (``EventTime(..., inputs=("tolls", "prices"))``) sees
their events once the merged watermark (the minimum of the inputs' watermarks) has passed
them, all inputs interleaved by timestamp, ties in queue order, so a replay releases them in
the same order. Each input keeps its own :class:`~streams.eventtime.release.TimestampOrder`:
its stream is delivered in queue order, so its positions tell what of it was seen, while two
inputs' deliveries may interleave in any order.

An input that *imports* its watermark is a reference stream (prices, read as of each toll):
its newest released event stays in force after its release, and the checkpoint is held at it,
so a restart replays it before the events that need it.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from sortedcontainers import SortedList

from streams.eventtime.results import EventOutcome

Position = tuple[int, int]  # a queue position: (sequence number, event index)
E = TypeVar("E")


_NOTHING: SortedList = SortedList()  # never added to: TimestampOrder.add makes its own first
_NO_ARRIVALS = itertools.count()


def position_of(outcome: EventOutcome) -> Position:
    """An event outcome's queue position, ``(sequence number, event index)``."""
    token = outcome.record.token
    return (token.sequence_number, token.event_index)


def replay_position_of(outcome: EventOutcome) -> Position:
    """Where every read of the queue finds the event: its record's ``position`` (its
    token, when the record has no other)."""
    record = outcome.record
    token = getattr(record, "position", None) or record.token
    return (token.sequence_number, token.event_index)


class TimestampOrder(Generic[E]):
    """Holds events until the watermark reaches their timestamp.

    >>> order: TimestampOrder[str] = TimestampOrder()
    >>> order.saw((1, 2))                      # positions 1:0..1:2 arrived
    >>> order.add(12.0, (1, 0), "b"); order.add(10.0, (1, 1), "a"); order.add(15.0, (1, 2), "c")
    >>> order.release(12.0), order.oldest(), order.below()
    (['a', 'b'], (1, 2), (1, 2))
    >>> order.release(float("inf")), order.below()
    (['c'], (1, 3))

    With ``replay`` positions (one-event records at offsets 7 and 9, read in one batch at 7):

    >>> order.saw((9, 0)); order.add(20.0, (7, 0), "d", (7, 0)); order.add(21.0, (7, 1), "e", (9, 0))
    >>> order.release(20.0), order.oldest(), order.below()
    (['d'], (7, 1), (9, 0))
    """

    # One per windowless activation that hands off, so per stream id: its sorted lists are
    # made when it first holds an event (a quiet one shares the empty _NOTHING).
    __slots__ = ("_held", "_positions", "_arrivals", "_newest")

    def __init__(self) -> None:
        self._held: SortedList = _NOTHING  # (timestamp, arrival number, positions, event)
        # (queue position, replay position) of the held events: in the same order either
        # way (one stream's records, read in order), so the first holds both lowest.
        self._positions: SortedList = _NOTHING
        self._arrivals = _NO_ARRIVALS
        self._newest: Position | None = None  # the newest replay position seen (held, released or refused)

    def __len__(self) -> int:
        return len(self._held)

    def saw(self, position: Position) -> None:
        """Events up to replay position ``position`` have arrived (whatever became of them)."""
        if self._newest is None or position > self._newest:
            self._newest = position

    def add(self, timestamp: float, position: Position, event: E, replay: Position | None = None) -> None:
        """Hold ``event`` (at queue ``position``; at ``replay`` on every read, when that is
        not ``position``) until the watermark reaches ``timestamp``."""
        if self._held is _NOTHING:
            self._held, self._positions, self._arrivals = SortedList(), SortedList(), itertools.count()
        positions = (position, position if replay is None else replay)
        self._held.add((timestamp, next(self._arrivals), positions, event))
        self._positions.add(positions)
        self.saw(positions[1])

    def release(self, watermark: float) -> list[E]:
        """The held events with a timestamp at most ``watermark``, in timestamp order."""
        cut = self._held.bisect_left((watermark, float("inf")))
        if not cut:
            return []
        released = self._held[:cut]
        del self._held[:cut]
        for _, _, positions, _ in released:
            self._positions.remove(positions)
        return [event for _, _, _, event in released]

    def state(self) -> list[Any]:
        """What :meth:`set_state` puts back: the held events with their timestamps and
        positions, and the newest position seen."""
        return [[[ts, list(positions), event] for ts, _, positions, event in self._held], self._newest]

    def set_state(self, state: list[Any]) -> None:
        held, newest = state
        self._held, self._positions, self._arrivals = _NOTHING, _NOTHING, _NO_ARRIVALS
        for ts, (position, replay), event in held:  # in (timestamp, arrival) order: arrivals renumbered alike
            self.add(ts, tuple(position), event, tuple(replay))
        self._newest = None if newest is None else tuple(newest)

    def earliest(self) -> float | None:
        """The smallest timestamp still held (the watermark that releases something next)."""
        return self._held[0][0] if self._held else None

    def oldest(self) -> Position | None:
        """The lowest queue position still held (the checkpoint must not pass it), or None."""
        return self._positions[0][0] if self._positions else None

    def below(self) -> Position | None:
        """The replay position under which no event is held: the oldest held one's, or just
        past the newest seen when none is held (None before any event)."""
        if self._positions:
            oldest: Position = self._positions[0][1]
            return oldest
        if self._newest is None:
            return None
        sequence, index = self._newest
        return (sequence, index + 1)


class MergedRelease:
    """Holds the events of several inputs until the merged watermark reaches them.

    >>> from types import SimpleNamespace as NS
    >>> def ev(ts, seq): return NS(timestamp=ts, record=NS(token=NS(sequence_number=seq, event_index=0)))
    >>> m = MergedRelease(["tolls", "prices"], in_force=["prices"])
    >>> for name, e in [("tolls", ev(12, 3)), ("prices", ev(10, 1)), ("tolls", ev(11, 2))]:
    ...     m.add(name, e)
    >>> [(name, e.timestamp) for name, e in m.release(11.5)]
    [('prices', 10), ('tolls', 11)]
    >>> m.oldest(), m.below("tolls"), m.below("prices")
    ((1, 0), (3, 0), (1, 1))
    """

    def __init__(self, inputs: Sequence[Hashable], in_force: Iterable[Hashable] = ()) -> None:
        self._orders: dict[Hashable, TimestampOrder[EventOutcome]] = {name: TimestampOrder() for name in inputs}
        self._references = frozenset(in_force)
        # A reference input's event in force: the released one latest in (timestamp, position).
        self._in_force: dict[Hashable, tuple[float, Position]] = {}

    def __len__(self) -> int:
        return sum(len(order) for order in self._orders.values())

    def saw(self, name: Hashable, position: Position) -> None:
        """Events of input ``name`` up to replay position ``position`` have arrived."""
        self._orders[name].saw(position)

    def add(self, name: Hashable, outcome: EventOutcome) -> None:
        """Hold an event outcome (``.timestamp``, ``.record.token``) of input ``name``."""
        self._orders[name].add(_timestamp(outcome), position_of(outcome), outcome, replay_position_of(outcome))

    def release(self, watermark: float) -> list[tuple[Hashable, EventOutcome]]:
        """``(input, event)`` for every held event at or below ``watermark``, in timestamp
        order across inputs, ties in queue order."""
        released: list[tuple[tuple[float, Position], Hashable, EventOutcome]] = []
        for name, order in self._orders.items():
            events = order.release(watermark)
            if events:
                keyed = [((_timestamp(e), position_of(e)), name, e) for e in events]
                if name in self._references:
                    last = max(k for k, _, _ in keyed)
                    if name not in self._in_force or last > self._in_force[name]:
                        self._in_force[name] = last
                released.extend(keyed)
        released.sort(key=lambda r: r[0])  # (timestamp, position): the same on every replay
        return [(name, e) for _, name, e in released]

    @property
    def references(self) -> bool:
        """Some input is imported: its event in force is kept (and replayed) for the others."""
        return bool(self._references)

    def state(self) -> list[Any]:
        """What :meth:`set_state` puts back: each input's held events (a merge without
        references: one with them is not saved, its event in force must be replayed)."""
        return [[name, order.state()] for name, order in self._orders.items()]

    def set_state(self, state: list[Any]) -> None:
        for name, order_state in state:
            self._orders[name].set_state(order_state)

    def oldest(self) -> Position | None:
        """The lowest position still needed: held, or a reference event in force."""
        found = [p for p in (o.oldest() for o in self._orders.values()) if p is not None]
        found.extend(position for _, position in self._in_force.values())
        return min(found) if found else None

    def oldest_input(self) -> tuple[Hashable, Position, str] | None:
        """The input holding :meth:`oldest`, the position and what of it: ``held events``
        (waiting for the merged watermark) or ``its input's event in force`` (an imported
        input's, kept for a replay); None with nothing held.

        >>> from types import SimpleNamespace as NS
        >>> m = MergedRelease(["tolls", "prices"])
        >>> m.add("prices", NS(timestamp=10, record=NS(token=NS(sequence_number=4, event_index=0))))
        >>> m.oldest_input()
        ('prices', (4, 0), 'held events')
        """
        found = [(p, name, "held events") for name, o in self._orders.items() if (p := o.oldest()) is not None]
        found += [(p, name, "its input's event in force") for name, (_, p) in self._in_force.items()]
        if not found:
            return None
        position, name, why = min(found, key=lambda f: f[0])
        return name, position, why

    def below(self, name: Hashable) -> Position | None:
        """The replay position of input ``name`` under which nothing of it is held (see
        :meth:`TimestampOrder.below`)."""
        return self._orders[name].below()


def _timestamp(outcome: EventOutcome) -> float:
    # Only a dropped event has no timestamp, and dropped events are never held.
    assert outcome.timestamp is not None
    return outcome.timestamp
