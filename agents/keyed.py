"""Activations shared by the streams of one key (Orleans: a grain implicitly subscribed to
several namespaces).

A consumer type registered with ``@provider.implicit("tolls", "prices")`` has one activation
per key on a queue, attached to ``tolls/<key>`` and ``prices/<key>`` alike. The agent keeps
its usual per-stream tables and asks this one for the activation of a (type, key); an
activation is deactivated when the last of its streams closes.

Each stream has its own consumer task: a :class:`~agents.merged_inputs.QueueOrder` per activation
makes their batches take turns in queue order, so a replay after a crash sees the order the
first run saw.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from agents.activation import Activation
from agents.durable import DurableActivation
from agents.event_time_observer import EventTimeObserver
from agents.merged_inputs import QueueOrder, ordered
from streams.core.batch import BatchContainer, BatchKind, EventBatch, QueueMessage
from streams.core.ids import StreamId
from streams.core.observer import as_observer

# make(cls, stream_id) -> (the event-time activation, or None; the user's instance)
MakeActivation = Callable[[type, StreamId], tuple[EventTimeObserver | DurableActivation | None, object]]


class _Shared:
    __slots__ = ("timed", "instance", "streams", "lock", "order")

    def __init__(self, timed: EventTimeObserver | DurableActivation | None, instance: object, stall: float) -> None:
        self.timed = timed  # the event-time or durable activation around the instance, if it has one
        self.instance = instance
        self.streams: set[StreamId] = set()
        self.lock = anyio.Lock()
        self.order = QueueOrder(stall)

    def observer(self, sid: StreamId) -> Activation:
        """What ``sid``'s consumer delivers to: the input's view of an event-time
        activation (which takes one batch at a time itself), or the instance taking one
        batch at a time; either in queue order."""
        if self.timed is not None:
            return self.timed.for_input(sid.namespace, self.order)
        observer = as_observer(self.instance)
        observer.on_next = ordered(one_turn(observer.on_next, self.lock), self.order)
        observer.user_on_next = None  # never inline: every batch takes its turn
        return observer


class KeyedActivations:
    """The activations of multi-namespace consumer types, by (type, key).

    >>> class T:
    ...     def __init__(self, sid): self.sid = sid
    ...     def on_next(self, batch): pass
    >>> table = KeyedActivations()
    >>> make = lambda cls, sid: (None, cls(sid))
    >>> _, made = table.observer_for(T, StreamId("tolls", "k"), "tolls", make)
    >>> _, again = table.observer_for(T, StreamId("prices", "k"), "tolls", make)
    >>> type(made).__name__, again
    ('T', None)
    >>> table.leave(StreamId("tolls", "k")), table.leave(StreamId("prices", "k")) == [made]
    ([], True)
    """

    def __init__(self, stall: float = 60.0) -> None:
        self.by_key: dict[tuple[type, str], _Shared] = {}  # empty: no such activation (read per read)
        self._types_of: dict[StreamId, list[type]] = {}
        self._stall = stall

    def expect(self, decoded: Sequence[tuple[QueueMessage, BatchContainer]]) -> None:
        """Records just read: their activations expect them, in this order."""
        types_of = self._types_of
        for message, container in decoded:
            classes = types_of.get(container.stream_id)
            if classes and container.kind is BatchKind.DATA and container.count:
                for cls in classes:
                    self.by_key[(cls, container.stream_id.key)].order.expect(message.sequence_number)

    def observer_for(
        self, cls: type, sid: StreamId, lead: str, make: MakeActivation
    ) -> tuple[Activation, object | None]:
        """``sid``'s observer of ``cls``'s activation for its key, and the instance when it
        was made now (else None). ``make(cls, StreamId(lead, key))`` builds ``(event-time
        activation or None, instance)``: an activation is built for the first namespace's
        stream id."""
        shared = self.by_key.get((cls, sid.key))
        made: object | None = None
        if shared is None:
            timed, made = make(cls, StreamId(lead, sid.key))
            shared = self.by_key[(cls, sid.key)] = _Shared(timed, made, self._stall)
        if sid not in shared.streams:
            shared.streams.add(sid)
            self._types_of.setdefault(sid, []).append(cls)
        return shared.observer(sid), made

    def leave(self, sid: StreamId) -> list[object]:
        """``sid`` closed: the instances whose last stream it was (to deactivate)."""
        ended: list[object] = []
        for cls in self._types_of.pop(sid, ()):
            shared = self.by_key[(cls, sid.key)]
            shared.streams.discard(sid)
            if not shared.streams:
                del self.by_key[(cls, sid.key)]
                ended.append(shared.instance)
        return ended


def one_turn(
    on_next: Callable[[EventBatch], Awaitable[None]], lock: anyio.Lock
) -> Callable[[EventBatch], Awaitable[None]]:
    """``on_next`` made to take one batch at a time: an activation fed by several streams
    (each delivered by its own task) sees its batches one after another, as a grain does."""

    async def call(batch: EventBatch) -> None:
        async with lock:
            await on_next(batch)

    return call
