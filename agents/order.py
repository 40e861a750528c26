"""Batches of several streams taking turns in queue order.

An activation fed by several streams (``agents.keyed``: one per key over several
namespaces) gets each stream's batches from that stream's consumer task; without care they
would reach it in whichever order the tasks run, and a replay after a crash could see
another order than the first run. The agent tells a :class:`QueueOrder` which positions
hold the activation's data as it reads them, and a batch waits until the ones before it are
delivered (the streams of one key share a queue).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

import anyio

from streams.core.batch import EventBatch

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
