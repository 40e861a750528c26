"""A queue's processing clock, and the ticks it gives the event-time activations.

A tick is an observation of the queue's clock when nothing arrived (docs/event-time.md):
it lets a silent stream's watermark follow the clock (late arrival, idle timeouts) and
fires processing-time timers. The clock never runs ahead of the records: while the queue
has records not yet read (a restart after downtime, a replay, a topic read from its start)
it is the arrival time of the newest record read; only once a read has found the queue
caught up does it move on by itself: from the newest arrival read, by the monotonic time
elapsed since that read. So a backlog gives exactly the results the records alone give,
however it is split into reads, and a step of the worker's own wall clock moves no tick.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol

from agents.activation import TimedActivation
from agents.catalog import Spawn, StreamState, timed_of
from agents.checkpoint import Holds
from agents.context import AgentContext
from streams.core.ids import QueueId, StreamId

log = logging.getLogger("headrace.agent")


class Waking(Protocol):
    """The streams whose saved state has a processing-time timer due (``Catalog.waking``)."""

    def waking(self, now: float) -> Iterable[StreamId]: ...


class QueueTicks:
    """The processing clock of one queue and the ticks of its event-time activations.

    The pulling agent moves the clock as it reads: a read that brings a newer arrival sets
    :attr:`records_clock` and :attr:`read_at` (``agents.pulling_agent._stamp_clock``), and each
    read sets :attr:`caught_up`. It calls :meth:`run` once :attr:`due_at` has come (compared
    in its loop: no call while no tick is due); ``streams.testing`` calls :meth:`tick_due`.
    """

    __slots__ = (
        "_catalog",
        "_context",
        "_holds",
        "_shown",
        "_queue",
        "_spawn",
        "_streams",
        "_wake_stream",
        "caught_up",
        "due_at",
        "read_at",
        "records_clock",
        "ticks",
    )

    def __init__(
        self,
        queue: QueueId,
        context: AgentContext,
        holds: Holds,
        catalog: Waking,
        streams: Mapping[StreamId, StreamState],
        spawn: Spawn,
        wake_stream: Callable[[StreamId], Coroutine[Any, Any, object]],
    ) -> None:
        self._queue = queue
        self._context = context
        self._holds = holds
        self._catalog = catalog
        self._streams = streams  # the agent's active streams (read: are they settled?)
        self._spawn = spawn
        self._wake_stream = wake_stream  # activates a stream whose saved state has a timer due
        self.due_at = 0.0  # the time.monotonic() at which run() is due next
        self.ticks = 0  # ticks given to event-time activations (for tests and diagnostics)
        # The newest arrival time read, and whether the last read found the queue caught up.
        self.records_clock = -math.inf
        self.caught_up = False
        # Where the clock moves on from once caught up: (an arrival time, the monotonic
        # time it was read at, on the context's clock); and the latest time shown, which it
        # never goes back from.
        self.read_at: tuple[float, float] | None = None
        self._shown = -math.inf

    def now(self) -> float:
        """The queue's processing clock, where every tick of its activations falls: the
        newest arrival read, or, once the queue is caught up, that plus the monotonic time
        elapsed since it was read (this is the one place a tick reads the time, through the
        context's clock: ``streams.testing`` moves it by hand). A queue caught up before
        anything arrived starts from the wall clock, read once. Never goes back. -inf
        before anything is read from a queue that is not caught up."""
        if not self.caught_up:
            return self.records_clock
        clock = self._context.clock
        if self.read_at is None:
            self.read_at = (clock.now(), clock.monotonic())
        arrival, read_at = self.read_at
        shown = max(self._shown, self.records_clock, arrival + max(clock.monotonic() - read_at, 0.0))
        self._shown = shown
        return shown

    def run(self) -> None:
        """Tick the event-time activations whose next tick is due at the queue's processing
        clock; due again one timer period later (:attr:`due_at`).

        A tick is an observation that comes after every record read before it: an
        activation with records still on their way to it (its consumers not caught up with
        the cache, or a step in progress) is not ticked now but at a later period, once they
        are in, so no tick ever gets ahead of its own records."""
        self.due_at = time.monotonic() + self._context.options.get_queue_msgs_timer_period
        clock = self.now()
        if clock == -math.inf:
            return
        strict = clock == self.records_clock  # a record's arrival: one more may come at this instant
        for sid in self._catalog.waking(clock):
            self._spawn(self._wake_stream, sid)  # its timers are due: it ticks once active
        for activation in self._holds.due(clock):
            if self._settled(activation):
                self.ticks += 1
                self._spawn(self._tick, activation, clock, strict)
            else:
                self._holds.on_change(activation)  # due again at the next period

    def _settled(self, activation: TimedActivation) -> bool:
        """Every record read of the activation's streams has been delivered to it (other
        subscriptions of those streams go at their own pace)."""
        if activation.stepping():
            return False
        streams = self._streams
        for sid in activation.input_streams():
            state = streams.get(sid)
            if state is not None and not all(
                consumer.idle for consumer in state.consumers if timed_of(consumer.observer) is activation
            ):
                return False
        return True

    async def tick_due(self) -> int:
        """Tick, and wait for, every event-time activation whose tick is due at the
        processing clock's time now: what the timer does, at once. Returns how many were
        ticked."""
        now = self.now()
        if now == -math.inf:
            return 0
        for sid in self._catalog.waking(now):
            await self._wake_stream(sid)
        due = list(self._holds.due(now))
        for activation in due:
            await self._tick(activation, now, now == self.records_clock)
        return len(due)

    async def _tick(self, observer: TimedActivation, now: float, strict: bool) -> None:
        try:
            await observer.on_tick(now, strict=strict)
        except Exception as exc:  # a consumer's bug (in on_window, say) must not stop the agent
            log.exception(
                "%s: a tick of %s on %s raised", self._queue, type(observer.target).__qualname__, observer.stream_id
            )
            try:
                await observer.on_error(exc)
            except Exception:
                log.exception("on_error of %s raised", type(observer.target).__qualname__)
