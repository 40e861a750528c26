"""Several inputs of one activation: batches of several streams taking turns in queue order, which
input holds the merged watermark back, and each input's face of the activation.

Batches of several streams taking turns in queue order.

An activation fed by several streams (``agents.keyed``: one per key over several
namespaces) gets each stream's batches from that stream's consumer task; without care they
would reach it in whichever order the tasks run, and a replay after a crash could see
another order than the first run. The agent tells a :class:`QueueOrder` which positions
hold the activation's data as it reads them, and a batch waits until the ones before it are
delivered (the streams of one key share a queue).

Which input holds an activation's merged watermark back (ASA's
``InputPartitionNotProgressing``): one log line when an input starts holding it back, one
when it stops.

An input *holds back* the merged watermark while it is the lowest input and behind another
one. Inputs that take turns at being lowest (both moving) are normal; only an input that
stays behind for :data:`REPORT_AFTER` seconds of processing time is reported.

One input's face of an event-time activation with several inputs (``EventTime(...,
inputs=...)``): the stream of each input delivers to its own :class:`InputView`, which passes
everything on to the one activation under the input's name, its batches taking their turn in
queue order with the other inputs' (:mod:`agents.keyed`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol

import anyio

from streams.core.batch import EventBatch
from streams.core.micros import to_seconds
from streams.eventtime.timetext import instant_text
from streams.eventtime.watermark import MergedWatermark

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

    async def deliver(self, on_next: Callable[[EventBatch], Awaitable[None]], batch: EventBatch) -> None:
        """``on_next(batch)`` in its turn."""
        sequence = batch.sequence_number
        try:  # done even when cancelled while waiting (a delivery past its time limit)
            await self.turn(sequence)
            await on_next(batch)
        finally:
            self.done(sequence)

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


def ordered(
    on_next: Callable[[EventBatch], Awaitable[None]], order: QueueOrder
) -> Callable[[EventBatch], Awaitable[None]]:
    """``on_next`` taking its turn in queue order."""

    async def call(batch: EventBatch) -> None:
        await order.deliver(on_next, batch)

    return call


log = logging.getLogger("headrace.eventtime")

# What a user can do about a silent input, in the hold-back's one line (docs/event-time.md).
HOLDBACK_ADVICE = (
    "what it holds waits: set late_arrival= on the policy (a silent input then follows the clock), "
    "or advance_time on the input's stream"
)

REPORT_AFTER = 5.0  # seconds an input stays behind before it is said to hold the others back


def holding_back(merged: MergedWatermark) -> Hashable | None:
    """The input holding ``merged`` back now (lowest and behind another), or None."""
    values = merged.values()
    holder = merged.holder
    return holder if values[holder] < max(values.values()) else None


class HoldBack:
    """Watches one activation's merge and logs the start and end of each hold-back (the
    merge's watermarks are the core's integer microseconds; ``now`` is seconds).

    >>> from streams.eventtime.watermark import MergedWatermark
    >>> m = MergedWatermark(["tolls", "prices"])
    >>> watch = HoldBack("tolls/b1", after=5.0)
    >>> _ = m.update("prices", 1.0), m.update("tolls", 9.0)
    >>> watch.observe(m, now=100.0), watch.observe(m, now=106.0)   # held since 100: reported
    (None, 'prices')
    >>> _ = m.update("prices", 9.0)
    >>> watch.observe(m, now=107.0), watch.reported                 # caught up: ended
    (None, None)
    """

    __slots__ = ("name", "after", "_candidate", "_since", "reported")

    def __init__(self, name: str, after: float = REPORT_AFTER, late_arrival: float | None = None) -> None:
        self.name = name
        # With late_arrival a silent input follows the clock at most that far behind (its
        # ticks move it): a hold-back up to then is the policy at work, not a stuck input
        # whose user should be told to set late_arrival.
        self.after = after + (late_arrival or 0.0)
        self._candidate: Hashable | None = None
        self._since = 0.0
        self.reported: Hashable | None = None  # the input whose hold-back was logged

    def observe(self, merged: MergedWatermark, now: float) -> Hashable | None:
        """Look at the merge at processing time ``now``; the input just reported, if any."""
        holder = holding_back(merged)
        if holder != self._candidate:
            self._candidate, self._since = holder, now
        if self.reported is not None and holder != self.reported:
            log.info(
                "%s: input %r no longer holds the merged watermark back (now %s)",
                self.name,
                self.reported,
                instant_text(to_seconds(merged.value)),
            )
            self.reported = None
        if holder is not None and self.reported is None and now - self._since >= self.after:
            self.reported = holder
            values = merged.values()
            log.warning(
                "%s: input %r holds the merged watermark back at %s for %.0f s (inputs: %s); %s",
                self.name,
                holder,
                instant_text(to_seconds(values[holder])),
                now - self._since,
                ", ".join(f"{k}={instant_text(to_seconds(v))}" for k, v in values.items()),
                HOLDBACK_ADVICE,
            )
            return holder
        return None


class InputsActivation(Protocol):
    """What an input's view passes on to (an ``agents.event_time_observer.EventTimeObserver``, or an
    ``agents.durable.DurableActivation`` of a plain type fed by several namespaces)."""

    target: object
    redeliverable: bool

    @property
    def has_on_error(self) -> bool: ...

    @property
    def waiting_on_handoff(self) -> bool: ...

    def on_next(self, batch: EventBatch, partition: str | None = None) -> Awaitable[None]: ...

    def on_error(self, error: BaseException) -> Awaitable[None]: ...

    def on_watermark(self, watermark: float, partition: str | None = None) -> Awaitable[None]: ...

    def on_completed(self, partition: str | None = None) -> Awaitable[None]: ...


class InputView:
    """One input's face of an activation with several inputs: the stream of that input
    delivers to it, and it passes everything on to the activation under the input's name,
    its batches in their turn in queue order (``agents.keyed``)."""

    __slots__ = ("activation", "name", "order")

    user_on_next = None  # every batch waits for its turn: never called inline
    take_now = None

    def __init__(self, activation: InputsActivation, name: str, order: QueueOrder) -> None:
        self.activation = activation
        self.name = name
        self.order = order

    @property
    def target(self) -> object:
        return self.activation.target

    @property
    def has_on_error(self) -> bool:
        return self.activation.has_on_error

    @property
    def redeliverable(self) -> bool:
        """As its activation: not an event-time one (its windows keep what it took)."""
        return self.activation.redeliverable

    @property
    def waiting_on_handoff(self) -> bool:
        return self.activation.waiting_on_handoff

    async def on_next(self, batch: EventBatch) -> None:
        await self.order.deliver(self._take, batch)

    def _take(self, batch: EventBatch) -> Awaitable[None]:
        return self.activation.on_next(batch, self.name)

    def on_error(self, error: BaseException) -> Awaitable[None]:
        return self.activation.on_error(error)

    async def on_watermark(self, watermark: float) -> None:
        await self.activation.on_watermark(watermark, self.name)

    async def on_completed(self) -> None:
        await self.activation.on_completed(self.name)
