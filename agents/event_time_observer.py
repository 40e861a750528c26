"""Driving the event-time core for one consumer activation, one step at a time.

An activation whose type declares ``event_time = EventTime(...)`` is wrapped in an
:class:`EventTimeObserver`: batches go through its processor (ordering policy, watermark,
windows); closed windows go to the type's ``on_window``, refused events to the dead-letter
store, and the checkpoint is held at the oldest event still in an open window, so a crash
loses no window (the queue replays it).

A type that hands off to Spark has its closed windows written to the handoff sink first; a
windowless one has its events held until the watermark passes them and handed off in
timestamp order (the checkpoint is held at the oldest event still held). A failed append is
retried, what the sink refuses is dead-lettered (:mod:`spark_sink.handoff`).

An activation with several inputs (``EventTime(..., inputs=...)``, one activation per key
over several namespaces) is delivered to through one :class:`InputView` per input stream;
without a window its events wait for the merged watermark and leave in event-time order
across inputs (:class:`~streams.eventtime.release.MergedRelease`), to ``on_events``
and, with a handoff, to Spark: what ``on_events`` returns, or the events themselves. With an
interval join (``EventTime(..., join=IntervalJoin(...))``) the pairs go to ``on_join`` and,
with an ``EventHandoff``, to Spark, one row a pair (:meth:`EventTimeObserver._emit_joins`).

Its steps take turns (:class:`agents.activation_turns.Turns`): several subscriptions may deliver to it,
and its agent ticks it. This module delivers and steps; what a step's output becomes is
``agents.event_time_emitter``'s, and what of the activation is saved with the checkpoint is
``agents.event_time_unit``'s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial

from agents.activation import TimedActivation
from agents.activation_turns import Turns
from agents.durable import fire_timers
from agents.event_time_unit import EventTimeUnit
from agents.handoff_writes import HandoffTarget, HandoffWrites
from agents.hook_calls import HookCalls, HookLimits
from agents.merged_inputs import HoldBack, InputView, QueueOrder
from streams.core.batch import EventBatch
from streams.core.deadletters import DeadLetterStore
from streams.core.ids import SequenceToken, StreamId, lowest
from streams.core.observer import SharedHook, hook_of, nothing
from streams.core.state import (
    EVENT_TIME,
    PROCESSING_TIME,
    is_stateful,
    timers_of,
)
from streams.eventtime.policy import Action
from streams.eventtime.processor import Processor
from streams.eventtime.release import MergedRelease, TimestampOrder
from streams.eventtime.results import Output
from streams.eventtime.spec import EventTime

log = logging.getLogger("headrace.agent")


__all__ = ["EventTimeObserver", "declared_event_time"]


def declared_event_time(instance: object) -> EventTime | None:
    """The ``event_time`` a consumer declares, if it is an event-time consumer.

    >>> from streams.eventtime import Count, EventTime, Tumbling
    >>> class Totals:
    ...     event_time = EventTime(window=Tumbling(60), aggregate=Count())
    >>> declared_event_time(Totals()) is Totals.event_time, declared_event_time(object())
    (True, None)
    """
    spec = getattr(instance, "event_time", None)
    return spec if isinstance(spec, EventTime) else None


class EventTimeObserver(EventTimeUnit):
    """The one wrapper around an event-time consumer's instance (``target``): what its
    consumers deliver to and its agent ticks (an ``agents.activation.TimedActivation``)."""

    # A batch it took is in its processor's windows: the runtime must not deliver it again
    # after a failure (it would be counted twice).
    redeliverable = False
    user_on_next = None  # steps take turns (agents.event_time_observer): never called inline

    def __init__(
        self,
        target: object,
        spec: EventTime,
        stream_id: StreamId,
        dead_letters: DeadLetterStore,
        handoff: HandoffTarget | None = None,
        limits: HookLimits | None = None,
    ) -> None:
        self.target = target
        self._partition = name = str(stream_id)
        self._route_output(spec, name, dead_letters, handoff)
        self.stream_id = stream_id
        self.processor = spec.processor(name)
        if is_stateful(type(target)):
            self._unit = self._durable = True
            self.timers = timers_of(target)
        if self._release is not None or self._merge is not None:
            self._unit = True  # the events it holds for the watermark are saved with it
        self._dead_letters = dead_letters
        self._lock = Turns()  # an activation may have several subscriptions
        self._bind_hooks(spec, limits)
        if self._user_watermark is not None:
            self._last_watermark = self.processor.watermark
        # What the processor held before a step that is still being emitted: the processor
        # forgets a window as it closes it, but its events stay needed until the window is
        # handed off (and on_window has returned), or a crash in between would lose them.
        self._in_step: tuple[SequenceToken | None, SequenceToken | None] | None = None
        # The hold of an emit that never finished (cancelled, or failed past its retries):
        # kept until the activation ends, so a restart replays and rebuilds what it lost
        # (_unfinished, None until then).
        # Told after each step (its hold and next tick may have moved): the agent keeps
        # them in heaps rather than asking every activation at every ack and tick.
        self.on_change: Callable[[TimedActivation], None] | None = None
        # Snapshots (agents.checkpoint): while on, open windows do not hold the checkpoint; the
        # first event taken since the last saved snapshot does (and, while one is being
        # written, the first one that snapshot covers). Held events of a handoff and merges
        # of several inputs are not snapshotted: their windows hold it as before.
        # Off unless the queue's store saves them (enable_snapshots).
        self.snapshots = False
        super().__init__()  # nothing saved yet
        self._taken: SequenceToken | None = None  # the last event taken
        # Restored: what the snapshot already has (_skip_to, None until then).
        # The last event taken, and the hold before the step now emitting: the queue
        # positions a failed window's letter names (agents.hook_calls).
        self._through: SequenceToken | None = None

    def _route_output(
        self, spec: EventTime, name: str, dead_letters: DeadLetterStore, handoff: HandoffTarget | None
    ) -> None:
        """Where the step's output goes: the handoff, and what waits for the watermark first
        (a windowless consumer's events, several inputs' merge, an interval join's left input)."""
        if handoff is not None:
            self._handoff = HandoffWrites(handoff, dead_letters)
            if spec.window is None and not spec.inputs:
                # A windowless consumer's events wait here for the watermark, then go in order.
                self._release = TimestampOrder()
        if spec.inputs:
            self._inputs = spec.inputs
            if spec.window is None and spec.join is None:
                # Several inputs, no window: every event waits for the merged watermark.
                self._merge = MergedRelease(spec.inputs, spec.imports or {})
            if spec.join is not None:
                # An interval join: its left input, and the newest replay position of it seen
                # (the handoff's marks: every pair is marked by its left event's position).
                self._join_left = spec.inputs[0]
            self.holdback = HoldBack(name, late_arrival=spec.policy.late_arrival)
            self._open_inputs = set(spec.inputs)

    def _bind_hooks(self, spec: EventTime, limits: HookLimits | None) -> None:
        """The consumer's own hooks, bound to ``target`` (its type checked once)."""
        target = self.target
        # Checked, and its hooks inspected, once per consumer type.
        type_hooks = spec.check_consumer(type(target))
        on_events, on_error, on_watermark, on_join = type_hooks.bind(
            target, "on_events", "on_error", "on_watermark", "on_join"
        )
        # Called once a window and once a stream: the type's method, bound when called.
        on_window, on_completed = type_hooks.bind(target, "on_window", "on_completed", shared=True)
        if on_join[1] is not None:
            self._on_join = on_join[1]
        self._on_window: SharedHook | None = on_window[1]
        # Each window, step's events or watermark one unit of work for its hook: retried,
        # timed, given up alone (agents.hook_calls). Made when a hook is called (see _hook_calls).
        self._limits = limits or HookLimits(type(target).__qualname__)
        self._hooks: HookCalls | None = None
        if on_events[1] is not None:
            self._on_events = on_events[1]
            self._user_on_events = on_events[0]  # its result is read (merged)
        self.on_error = on_error[1] or nothing  # has_on_error: not nothing
        self._user_completed: SharedHook = on_completed[1] or nothing
        if on_watermark[1] is not None:
            self._user_watermark = on_watermark[1]

    def for_input(self, name: str, order: QueueOrder) -> InputView:
        """What the stream of input ``name`` delivers to (several inputs), its batches
        taking turns with the other inputs' in queue order."""
        return InputView(self, name, order)

    async def on_next(self, batch: EventBatch, partition: str | None = None) -> None:
        part = partition or self._partition
        async with self._lock:
            batch = self._taking(batch, part)
            if len(batch) and _follows_clock_for_accepted(self.processor):
                # The agent does not tick a quiet activation; under `accept` a late event's
                # fate depends on the clock's watermark, so catch up with the queue's clock
                # as it stood just before this batch (what the other streams' records did),
                # never the batch's own arrival: how reads split the queue changes nothing.
                # (A batch gathered from records that others stood between, in runs.)
                for clock, run in batch.clock_runs():
                    if clock is not None:
                        await self._step(partial(self.processor.on_tick, clock, strict=True))
                    await self._step(partial(self.processor.on_events, run, part), run[0].token if len(run) else None)
            else:
                await self._step(lambda: self.processor.on_events(batch, part), _first_token(batch))

    def take_now(self, batch: EventBatch) -> Awaitable[None] | None:
        """The agent's call where ``batch`` arrives (``agents.delivery``), saving a task per
        delivery: the step runs here, and ends here when it has nothing to emit (no window
        closed, nothing refused or released, no watermark for ``on_watermark``), which is
        most batches. Otherwise the rest (the emit, or the whole delivery while another
        step holds the turn, or one that needs the queue's clock) is returned for the
        consumer's task to await; it holds the turn until it is done."""
        if (
            self._inputs
            or ((self.snapshots or self.stored) and self._since_snapshot is None)
            or _follows_clock_for_accepted(self.processor)
            or not self._lock.take_now()
        ):
            # Several inputs take turns; a step that needs the queue's clock is awaited; and
            # the first step after a saved snapshot (the one that holds the checkpoint
            # again) is left to the task, after the agent's acknowledgement of what came
            # before, as every step was before they ran inline.
            return self.on_next(batch)
        part = self._partition
        try:
            batch = self._taking(batch, part)
            before = self._begin(_first_token(batch))
            try:
                out = self.processor.on_events(batch, part)
                self._changed()
            except BaseException:
                self._step_lost(before)
                raise
        except BaseException:
            self._lock.give_back()
            raise
        if not self._has_output(out):
            self._step_ended()
            self._lock.give_back()
            return None
        if self._only_windows(out):
            left = self._windows_now(out.windows)
            if left[0] == len(out.windows):
                self._step_ended()
                self._lock.give_back()
                return None
            return self._emit_taken(out, before, left)
        return self._emit_taken(out, before)

    async def _emit_taken(
        self,
        out: Output,
        before: SequenceToken | None,
        left: tuple[int, Exception | Awaitable[object] | None] | None = None,
    ) -> None:
        """The emit of a step :meth:`take_now` ran, in the turn it took; ``left``: only its
        windows from this one on are left to emit (see :meth:`_windows_now`)."""
        try:
            if left is None:
                await self._emit_step(out, before)
                return
            try:
                await self._emit_windows(out.windows, left)
            except BaseException:
                self._step_lost(before)
                raise
            self._step_ended()
        finally:
            self._lock.give_back()

    def _taking(self, batch: EventBatch, part: str) -> EventBatch:
        """What a step is about to take of ``batch`` (past a restored snapshot's events),
        noting the positions the checkpoint, snapshots and handoff marks follow."""
        if self._skip_to is not None and len(batch):
            batch = batch.after(self._skip_to)
        if len(batch) and (self.snapshots or self.stored):
            if self._since_snapshot is None:
                self._since_snapshot = _first_token(batch)
            self._taken = batch.last_position()  # the same on every read (a replay's skip)
        if len(batch):
            last = batch.last_position()  # where a replay finds it (the handoff's marks)
            self._through = last
            if self._release is not None:
                self._release.saw((last.sequence_number, last.event_index))
            if self._merge is not None:
                self._merge.saw(part, (last.sequence_number, last.event_index))
            if part == self._join_left:
                self._join_seen = (last.sequence_number, last.event_index)
        return batch

    # A watermark or completion is observed at the processing clock as this activation has
    # seen it, never the wall clock's: in a backlog that would run ahead of the records.
    async def on_watermark(self, watermark: float, partition: str | None = None) -> None:
        part = partition or self._partition
        async with self._lock:
            await self._step(lambda: self.processor.advance_time(watermark, self.processor.clock, part))

    async def on_completed(self, partition: str | None = None) -> None:
        part = partition or self._partition
        async with self._lock:
            await self._step(lambda: self.processor.on_completed(part, self.processor.clock))
        if self._open_inputs is not None:
            self._open_inputs.discard(part)
        if not self._open_inputs:  # with several inputs, once the last completes
            await hook_of(self._user_completed, self.target)()

    async def on_tick(self, now: float, *, strict: bool = False) -> None:
        """The queue's processing clock moved to ``now`` and nothing arrived (a silent stream);
        ``strict``: ``now`` is a record's arrival (see :meth:`Processor.on_tick`)."""
        if self._lock.locked():
            return
        async with self._lock:
            await self._step(lambda: self.processor.on_tick(now, strict=strict))
            timers = self.timers
            if timers is not None and timers.next_due(PROCESSING_TIME) is not None:
                before = self._begin(None)
                try:
                    await fire_timers(timers, PROCESSING_TIME, now, self._hook_calls(), self._timer_hook())
                except BaseException:
                    self._step_lost(before)
                    raise
                self._step_ended()

    async def _step(self, step: Callable[[], Output], first: SequenceToken | None = None) -> None:
        """Run one processor step (over events from ``first``) and emit its output, holding
        the checkpoint where it stood before the step until everything the step closed or
        released is emitted."""
        before = self._begin(first)
        try:
            out = step()
            self._changed()  # the new windows' hold counts before the emit can suspend
        except BaseException:
            self._step_lost(before)
            raise
        await self._emit_step(out, before)

    def _begin(self, first: SequenceToken | None) -> SequenceToken | None:
        """A step begins (over events from ``first``): the hold before it, kept until it is emitted."""
        before = self._held()
        self._in_step = (before, lowest(before, first))
        return before

    async def _emit_step(self, out: Output, before: SequenceToken | None) -> None:
        try:
            await self._emit(out)
            merged, clock = self.processor.merged, self.processor.clock
            if self.holdback is not None and merged is not None and clock is not None:  # several inputs
                self.holdback.observe(merged, clock)  # held back for how long, in processing time
        except BaseException:
            self._step_lost(before)
            raise
        self._step_ended()

    def _step_lost(self, before: SequenceToken | None) -> None:
        """A step or its emit did not finish: hold what it held until the activation ends."""
        self._unfinished = lowest(self._unfinished, before)
        self.snapshots = False  # its state lost what the emit did not finish
        self._step_ended()

    def _step_ended(self) -> None:
        self._in_step = None  # read only while a step emits: a quiet activation keeps no token
        self.unsaved = True
        hooks = self._hooks
        if hooks is not None and hooks.idle:
            self._hooks = None  # made again by the next emit that calls a hook
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def input_streams(self) -> list[StreamId]:
        """The streams it takes batches from: its own, or one per input (same key).

        >>> from streams.eventtime import Count, EventTime, Tumbling
        >>> from streams.backends.memory.stores import MemoryDeadLetterStore
        >>> class Joined:
        ...     event_time = EventTime(window=Tumbling(60), aggregate=Count(), inputs=["tolls", "prices"])
        ...     def on_window(self, result): pass
        >>> observer = EventTimeObserver(Joined(), Joined.event_time, StreamId("tolls", "b1"), MemoryDeadLetterStore())
        >>> [str(s) for s in observer.input_streams()]
        ['tolls/b1', 'prices/b1']
        """
        if not self._inputs:
            return [self.stream_id]
        key = self.stream_id.key
        return [StreamId(name, key) for name in self._inputs]

    def next_tick(self) -> float | None:
        """When (processing-clock seconds) a tick would next change something for this
        activation: close a window, fire an idle timeout, release held events, or move the
        watermark its type watches (``on_watermark``); None when no tick ever would. An
        activation of several inputs ticks at every timer period, as its merge is timed."""
        processor = self.processor
        timers = self.timers
        timer = None if timers is None else timers.next_due(PROCESSING_TIME)
        if processor.watermark == math.inf:
            return timer
        if self._inputs:
            return -math.inf
        due = processor.next_tick()
        if timer is not None:
            due = min(due, timer)
        late = processor.policy.late_arrival
        if late is not None:
            earliest = self._release.earliest() if self._release is not None else None
            if earliest is not None:
                due = min(due, earliest + late)
            event_timer = None if timers is None else timers.next_due(EVENT_TIME)
            if event_timer is not None:  # the clock carries the watermark to it on a silent stream
                due = min(due, event_timer + late)
            if self._user_watermark is not None:
                due = -math.inf  # at every tick, as its watermark follows the clock
        return None if due == math.inf else due


def _first_token(batch: EventBatch) -> SequenceToken | None:
    """Its first event's token, without making its events (the core reads its columns)."""
    if not len(batch):
        return None
    return batch.token_at(0) if isinstance(batch, EventBatch) else batch[0].token


def _follows_clock_for_accepted(processor: Processor) -> bool:
    policy = processor.policy
    return policy.late_arrival is not None and policy.action is Action.ACCEPT
