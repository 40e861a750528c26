"""Releasing the events of several inputs in one event-time order.

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

from collections.abc import Hashable, Iterable, Sequence

from streams.eventtime.release import Position, TimestampOrder, position_of, replay_position_of
from streams.eventtime.results import EventOutcome


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

    def oldest(self) -> Position | None:
        """The lowest position still needed: held, or a reference event in force."""
        found = [p for p in (o.oldest() for o in self._orders.values()) if p is not None]
        found.extend(position for _, position in self._in_force.values())
        return min(found) if found else None

    def below(self, name: Hashable) -> Position | None:
        """The replay position of input ``name`` under which nothing of it is held (see
        :meth:`TimestampOrder.below`)."""
        return self._orders[name].below()


def _timestamp(outcome: EventOutcome) -> float:
    # Only a dropped event has no timestamp, and dropped events are never held.
    assert outcome.timestamp is not None
    return outcome.timestamp
