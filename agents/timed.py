"""Driving the event-time core for one consumer activation.

An activation whose type declares ``event_time = EventTime(...)`` is wrapped in an
:class:`EventTimeObserver`: batches go through its processor (ordering policy, watermark,
windows); closed windows go to the type's ``on_window``, refused events to the dead-letter
store, and the checkpoint is held at the oldest event still in an open window, so a crash
loses no window (the queue replays it).

A type that hands off to Spark has its closed windows written to the handoff sink first; a
windowless one has its events held until the watermark passes them and handed off in
timestamp order (the checkpoint is held at the oldest event still held). A failed append is
retried, what the sink refuses is dead-lettered (:mod:`agents.handoff`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from streams.batch import EventBatch
from streams.deadletters import DeadLetterStore
from streams.eventtime.policy import Action
from streams.eventtime.processor import Output
from streams.eventtime.release import TimestampOrder, position_of
from streams.eventtime.spec import EventTime
from streams.ids import StreamId
from streams.observer import _nothing
from streams.tokens import SequenceToken

from .handoff import HandoffTarget, HandoffWrites
from .hooks import ConsumerHooks
from .turns import Turns

__all__ = ["EventTimeDelivery", "EventTimeObserver", "HandoffTarget", "event_time_of"]


def event_time_of(instance: Any) -> EventTime | None:
    spec = getattr(instance, "event_time", None)
    return spec if isinstance(spec, EventTime) else None


class EventTimeObserver:
    """The observer the runtime delivers to, for an event-time consumer activation."""

    # A batch it took is in its processor's windows: the runtime must not deliver it again
    # after a failure (it would be counted twice).
    redeliverable = False

    def __init__(
        self,
        target: Any,
        spec: EventTime,
        stream_id: StreamId,
        dead_letters: DeadLetterStore,
        handoff: HandoffTarget | None = None,
    ) -> None:
        self.target = target
        self._handoff = HandoffWrites(handoff, dead_letters) if handoff is not None else None
        # A windowless consumer's events wait here for the watermark, then go in order.
        self._release: TimestampOrder | None = (
            TimestampOrder() if handoff is not None and spec.window is None else None
        )
        self.stream_id = stream_id
        self.processor = spec.processor(str(stream_id))
        self._partition = str(stream_id)
        self._dead_letters = dead_letters
        self._lock = Turns()  # an activation may have several subscriptions
        # Looked up once per type (registration checked that the type can take the results).
        self._hooks = ConsumerHooks.of(target)
        self._last_watermark = self.processor.watermark
        # What the processor held before a step that is still being emitted: the processor
        # forgets a window as it closes it, but its events stay needed until the window is
        # handed off (and on_window has returned), or a crash in between would lose them.
        self._emitting: SequenceToken | None = None
        # The hold of an emit that never finished (cancelled, or failed past its retries):
        # kept until the activation ends, so a restart replays and rebuilds what it lost.
        self._unfinished: SequenceToken | None = None
        # Told after each step (its hold and next tick may have moved): the agent keeps
        # them in heaps rather than asking every activation at every ack and tick.
        self.on_change: Callable[[EventTimeObserver], None] | None = None

    # The target's optional methods, bound when called (none kept per activation).
    @property
    def _on_window(self) -> Callable[..., Awaitable[None]] | None:
        return self._hooks.bind("on_window", self.target)

    @property
    def _on_events(self) -> Callable[..., Awaitable[None]] | None:
        return self._hooks.bind("on_events", self.target)

    @property
    def _user_watermark(self) -> Callable[..., Awaitable[None]] | None:
        return self._hooks.bind("on_watermark", self.target)

    @property
    def _user_completed(self) -> Callable[[], Awaitable[None]]:
        return self._hooks.bind("on_completed", self.target) or _nothing

    @property
    def has_on_error(self) -> bool:
        return self._hooks.has("on_error")

    async def on_error(self, error: BaseException) -> None:
        hook = self._hooks.bind("on_error", self.target)
        if hook is not None:
            await hook(error)

    async def on_next(self, batch: EventBatch) -> None:
        async with self._lock:
            if self._release is not None and len(batch):
                last = batch[-1].token
                self._release.saw((last.sequence_number, last.event_index))
            if len(batch) and _follows_clock_for_accepted(self.processor):
                # The agent does not tick a quiet activation; under `accept` a late event's
                # fate depends on the clock's watermark, so catch up with it first (as a
                # timer tick just before the batch arrived would have).
                arrival = batch[0].arrival_time
                await self._step(lambda: self.processor.on_tick(arrival))
            await self._step(lambda: self.processor.on_events(batch, self._partition))

    async def on_watermark(self, watermark: float) -> None:
        async with self._lock:
            await self._step(lambda: self.processor.advance_time(watermark, time.time(), self._partition))

    async def on_completed(self) -> None:
        async with self._lock:
            await self._step(lambda: self.processor.on_completed(self._partition, time.time()))
        await self._user_completed()

    async def on_tick(self, now: float) -> None:
        """The processing clock moved and nothing arrived (a silent stream)."""
        if self._lock.locked():
            return
        async with self._lock:
            await self._step(lambda: self.processor.on_tick(now))

    async def _step(self, step: Callable[[], Output]) -> None:
        """Run one processor step and emit its output, holding the checkpoint where it stood
        before the step until everything the step closed or released is emitted."""
        before = self._held()
        self._emitting = before
        try:
            out = step()
            self._changed()  # the new windows' hold counts before the emit can suspend
            await self._emit(out)
        except BaseException:
            self._unfinished = _lowest(self._unfinished, before)
            raise
        finally:
            self._emitting = None
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def next_tick(self) -> float | None:
        """When (wall-clock seconds) a tick would next change something for this
        activation: close a window, fire an idle timeout, release held events, or move the
        watermark its type watches (``on_watermark``); None when no tick ever would."""
        processor = self.processor
        due = processor.next_tick()
        late = processor.policy.late_arrival
        if late is not None and processor.watermark < math.inf:
            earliest = self._release.earliest() if self._release is not None else None
            if earliest is not None:
                due = min(due, earliest + late)
            if self._hooks.has("on_watermark"):
                due = -math.inf  # at every tick, as its watermark follows the clock
        return None if due == math.inf else due

    def checkpoint_hold(self) -> SequenceToken | None:
        """The oldest queue position this activation still needs (None: none)."""
        return _lowest(_lowest(self._held(), self._emitting), self._unfinished)

    def _held(self) -> SequenceToken | None:
        token = self.processor.held_since()
        token = token if isinstance(token, SequenceToken) else None
        oldest = self._release.oldest() if self._release is not None else None
        return _lowest(token, SequenceToken(*oldest) if oldest is not None else None)

    async def _emit(self, out: Output) -> None:
        if out.dead_letters:
            await self._dead_letters.add(out.dead_letters)
        handoff = self._handoff
        if handoff is not None and out.windows:  # durable before anyone else hears of them
            await handoff.windows(out.windows)
        if handoff is not None and self._release is not None:
            for outcome in out.events:
                if outcome.timestamp is not None:  # always, for an event that passed the policy
                    self._release.add(outcome.timestamp, position_of(outcome), outcome)
            released = self._release.release(out.watermark)
            if released:
                await handoff.events(released, self._release.below())
        if self._on_window is not None:
            for result in out.windows:
                await self._on_window(result)
        if self._on_events is not None and out.events:
            await self._on_events(out.events)
        if self._user_watermark is not None and out.watermark > self._last_watermark:
            self._last_watermark = out.watermark
            await self._user_watermark(out.watermark)


class EventTimeDelivery:
    """What an event-time activation's consumers deliver to: the observer shape over an
    :class:`EventTimeObserver` (its ``target``), with no bound method kept per activation.

    >>> EventTimeDelivery(None).target is None
    True
    """

    __slots__ = ("target",)

    def __init__(self, target: EventTimeObserver) -> None:
        self.target = target

    @property
    def has_on_error(self) -> bool:
        return self.target.has_on_error

    def on_next(self, batch: EventBatch) -> Awaitable[None]:
        return self.target.on_next(batch)

    def on_error(self, error: BaseException) -> Awaitable[None]:
        return self.target.on_error(error)

    def on_completed(self) -> Awaitable[None]:
        return self.target.on_completed()

    def on_watermark(self, watermark: float) -> Awaitable[None]:
        return self.target.on_watermark(watermark)


def _lowest(a: SequenceToken | None, b: SequenceToken | None) -> SequenceToken | None:
    if a is None:
        return b
    return a if b is None or a <= b else b


def _follows_clock_for_accepted(processor: Any) -> bool:
    policy = processor.policy
    return policy.late_arrival is not None and policy.action is Action.ACCEPT
