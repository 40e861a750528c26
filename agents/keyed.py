"""Activations shared by the streams of one key (Orleans: a grain implicitly subscribed to
several namespaces).

A consumer type registered with ``@provider.implicit("tolls", "prices")`` has one activation
per key on a queue, attached to ``tolls/<key>`` and ``prices/<key>`` alike. The agent keeps
its usual per-stream tables and asks this one for the activation of a (type, key); an
activation is deactivated when the last of its streams closes.

Each stream has its own consumer task, so without care the batches of ``tolls/k`` and
``prices/k`` would reach the activation in whichever order the tasks run, and a replay after
a crash could see another order than the first run. A :class:`QueueOrder` makes them take
turns in queue order (the streams of one key share a queue): the agent tells it which
positions hold the activation's data as it reads them, and a batch waits until the ones
before it are delivered.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from streams.core.batch import BatchContainer, BatchKind, QueueMessage
from streams.core.ids import StreamId
from streams.core.observer import as_observer

from .timed import EventTimeObserver

log = logging.getLogger("headrace.agent")


class QueueOrder:
    """Lets the batches of an activation's streams through in queue order.

    ``stall`` bounds a wait with no progress at all (a consumer that will never deliver
    the batch ahead: one faulted by its errors, or a record whose values turn out not to
    decode and are dead-lettered instead): then the batch goes on out of order, with a
    warning, rather than blocking the activation.

    >>> order = QueueOrder(stall=1.0)
    >>> order.expect(3); order.expect(5)
    >>> async def deliver(seq, seen):
    ...     await order.turn(seq); seen.append(seq); order.done(seq)
    >>> async def main():
    ...     seen = []
    ...     async with anyio.create_task_group() as tg:
    ...         tg.start_soon(deliver, 5, seen); await anyio.sleep(0.01)
    ...         tg.start_soon(deliver, 3, seen)
    ...     return seen
    >>> anyio.run(main)
    [3, 5]
    """

    def __init__(self, stall: float) -> None:
        self._expected: deque[int] = deque()  # positions read and not yet delivered, in order
        self._moved = anyio.Event()
        self._stall = stall

    def expect(self, sequence_number: int) -> None:
        self._expected.append(sequence_number)

    async def turn(self, sequence_number: int) -> None:
        """Wait until every expected position before ``sequence_number`` is delivered."""
        expected = self._expected
        while expected and expected[0] < sequence_number:
            moved = self._moved
            with anyio.move_on_after(self._stall) as scope:
                await moved.wait()
            if scope.cancelled_caught:
                log.warning(
                    "batch at %d waited %.0fs for the one at %d of another stream of its "
                    "activation; delivering it out of queue order",
                    sequence_number,
                    self._stall,
                    expected[0],
                )
                expected.popleft()

    def done(self, sequence_number: int) -> None:
        expected = self._expected
        if expected and expected[0] == sequence_number:
            expected.popleft()
        else:
            try:
                expected.remove(sequence_number)
            except ValueError:
                pass  # delivered again (a retry, a rewind): nothing was waiting on it
        self._moved.set()
        self._moved = anyio.Event()


def ordered(on_next: Callable[[Any], Awaitable[None]], order: QueueOrder) -> Callable[[Any], Awaitable[None]]:
    """``on_next`` taking its turn in queue order."""

    async def call(batch: Any) -> None:
        sequence = batch.sequence_number
        try:  # done even when cancelled while waiting (a delivery past its time limit)
            await order.turn(sequence)
            await on_next(batch)
        finally:
            order.done(sequence)

    return call


class _Shared:
    __slots__ = ("target", "instance", "streams", "lock", "order")

    def __init__(self, target: Any, instance: Any, stall: float) -> None:
        self.target = target  # the instance, or the EventTimeObserver around it
        self.instance = instance
        self.streams: set[StreamId] = set()
        self.lock = anyio.Lock()
        self.order = QueueOrder(stall)

    def observer(self, sid: StreamId) -> Any:
        """What ``sid``'s consumer delivers to: the input's view of an event-time
        activation, or the instance itself taking one batch at a time."""
        if isinstance(self.target, EventTimeObserver):  # it takes one batch at a time itself
            observer = as_observer(self.target.for_input(sid.namespace))
        else:
            observer = as_observer(self.target)
            assert observer.on_next is not None  # as_observer found one
            observer.on_next = one_turn(observer.on_next, self.lock)
            observer.user_on_next = None  # type: ignore[assignment]  # never inline: every batch takes its turn
        assert observer.on_next is not None
        observer.on_next = ordered(observer.on_next, self.order)
        return observer


class KeyedActivations:
    """The activations of multi-namespace consumer types, by (type, key).

    >>> class T:
    ...     def __init__(self, sid): self.sid = sid
    ...     def on_next(self, batch): pass
    >>> table = KeyedActivations()
    >>> make = lambda cls, sid: (cls(sid), "made")
    >>> _, made = table.observer_for(T, StreamId("tolls", "k"), "tolls", make)
    >>> _, again = table.observer_for(T, StreamId("prices", "k"), "tolls", make)
    >>> made, again
    ('made', None)
    >>> table.leave(StreamId("tolls", "k")), table.leave(StreamId("prices", "k"))
    ([], ['made'])
    """

    def __init__(self, stall: float = 60.0) -> None:
        self._by_key: dict[tuple[type, str], _Shared] = {}
        self._types_of: dict[StreamId, list[type]] = {}
        self._stall = stall

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def expect(self, decoded: Sequence[tuple[QueueMessage, BatchContainer]]) -> None:
        """Records just read: their activations expect them, in this order."""
        types_of = self._types_of
        for message, container in decoded:
            classes = types_of.get(container.stream_id)
            if classes and container.kind is BatchKind.DATA and container.count:
                for cls in classes:
                    self._by_key[(cls, container.stream_id.key)].order.expect(message.sequence_number)

    def observer_for(
        self, cls: type, sid: StreamId, lead: str, make: Callable[[type, StreamId], tuple[Any, Any]]
    ) -> tuple[Any, Any]:
        """``sid``'s observer of ``cls``'s activation for its key, and the instance when it
        was made now (else None). ``make(cls, StreamId(lead, key))`` builds ``(target,
        instance)``: an activation is built for the first namespace's stream id."""
        shared = self._by_key.get((cls, sid.key))
        made = None
        if shared is None:
            target, made = make(cls, StreamId(lead, sid.key))
            shared = self._by_key[(cls, sid.key)] = _Shared(target, made, self._stall)
        if sid not in shared.streams:
            shared.streams.add(sid)
            self._types_of.setdefault(sid, []).append(cls)
        return shared.observer(sid), made

    def leave(self, sid: StreamId) -> list[Any]:
        """``sid`` closed: the instances whose last stream it was (to deactivate)."""
        ended = []
        for cls in self._types_of.pop(sid, ()):
            shared = self._by_key[(cls, sid.key)]
            shared.streams.discard(sid)
            if not shared.streams:
                del self._by_key[(cls, sid.key)]
                ended.append(shared.instance)
        return ended


def one_turn(on_next: Callable[[Any], Awaitable[None]], lock: anyio.Lock) -> Callable[[Any], Awaitable[None]]:
    """``on_next`` made to take one batch at a time: an activation fed by several streams
    (each delivered by its own task) sees its batches one after another, as a grain does."""

    async def call(batch: Any) -> None:
        async with lock:
            await on_next(batch)

    return call
