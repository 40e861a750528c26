"""Driving the event-time core for one consumer activation, one step at a time.

Driving the event-time core for one consumer activation.

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

Its steps take turns (:class:`agents.turns.Turns`): several subscriptions may deliver to it,
and its agent ticks it.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from agents.activation import TimedActivation
from agents.checkpoint import SavedUnit, lowest
from agents.durable import fire_timers, on_timer_of, warn_not_saved
from agents.merged_inputs import HoldBack, InputView, QueueOrder
from agents.output import HandoffTarget, HandoffWrites, HookCalls, HookLimits
from agents.turns import Turns
from streams.core.batch import Event, EventBatch
from streams.core.deadletters import DeadLetterStore
from streams.core.ids import SequenceToken, StreamId
from streams.core.observer import SharedHook, hook_of, is_plain, nothing, plain_function
from streams.core.state import (
    EVENT_TIME,
    PROCESSING_TIME,
    Timer,
    TimerTable,
    is_stateful,
    pack_unit,
    timers_of,
    unpack_unit,
)
from streams.eventtime.policy import Action
from streams.eventtime.processor import Processor
from streams.eventtime.release import MergedRelease, TimestampOrder, position_of, replay_position_of
from streams.eventtime.results import EventOutcome, JoinResult, Output, WindowResult
from streams.eventtime.snapshot import can_snapshot, held_snapshot, is_empty, restore_held
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


class EventTimeObserver(SavedUnit):
    """The one wrapper around an event-time consumer's instance (``target``): what its
    consumers deliver to and its agent ticks (an ``agents.activation.TimedActivation``)."""

    # A batch it took is in its processor's windows: the runtime must not deliver it again
    # after a failure (it would be counted twice).
    redeliverable = False
    user_on_next = None  # steps take turns (agents.timed): never called inline

    # One per activation, so per stream id: slots keep a quiet one small ("__dict__" takes
    # what is set on one besides, as a test's wrapper around a method).
    __slots__ = (
        "target",
        "stream_id",
        "processor",
        "_partition",
        "_dead_letters",
        "_lock",
        "_on_window",
        "on_error",
        "has_on_error",
        "_user_completed",
        "_last_watermark",
        "_emitting",
        "on_change",
        "snapshots",
        "_taken",
        "_through",
        "_held_from",
        "_limits",
        "_hooks",
        "__dict__",
    )

    # What only some consumer types have (a handoff, several inputs, a join, on_events or
    # on_watermark), or an activation after a rare event (a lost emit, a restore): class
    # defaults, set on the few activations that have them (in their __dict__), so that the
    # many of the common shape (a window and on_window) carry no slot for them.
    _handoff: HandoffWrites | None = None
    _release: TimestampOrder[EventOutcome] | None = None
    _merge: MergedRelease | None = None
    _inputs: tuple[str, ...] = ()
    holdback: HoldBack | None = None
    _open_inputs: set[str] | None = None  # the inputs not completed yet (None: the one input)
    _join_left: str | None = None
    _join_seen: tuple[int, int] | None = None
    _on_join: Callable[[list[JoinResult]], Awaitable[None]] | None = None
    _on_events: Callable[[list[EventOutcome]], Awaitable[None]] | None = None
    _user_on_events: Callable[..., Any] | None = None
    _user_watermark: Callable[[float], Awaitable[None]] | None = None
    _unfinished: SequenceToken | None = None
    _skip_to: SequenceToken | None = None
    # A type with durable fields or timers (streams.core.state): saved as one unit with its windows.
    _unit = False
    _durable = False  # its type declares durable fields or timers: a unit is kept even when empty
    timers: TimerTable | None = None
    _on_timer: Callable[[Timer], Awaitable[None]] | None = None

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
        self._partition = name = str(stream_id)
        if spec.inputs:
            self.holdback = HoldBack(name, late_arrival=spec.policy.late_arrival)
            self._open_inputs = set(spec.inputs)
        self.stream_id = stream_id
        self.processor = spec.processor(name)
        if is_stateful(type(target)):
            self._unit = self._durable = True
            self.timers = timers_of(target)
        if self._release is not None or self._merge is not None:
            self._unit = True  # the events it holds for the watermark are saved with it
        self._dead_letters = dead_letters
        self._lock = Turns()  # an activation may have several subscriptions
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
        # timed, given up alone (agents.output). Made when a hook is called (see _hook_calls).
        self._limits = limits or HookLimits(type(target).__qualname__)
        self._hooks: HookCalls | None = None
        if on_events[1] is not None:
            self._on_events = on_events[1]
            self._user_on_events = on_events[0]  # its result is read (merged)
        self.on_error = on_error[1] or nothing
        self.has_on_error = on_error[1] is not None
        self._user_completed: SharedHook = on_completed[1] or nothing
        if on_watermark[1] is not None:
            self._user_watermark = on_watermark[1]
        self._last_watermark = self.processor.watermark
        # What the processor held before a step that is still being emitted: the processor
        # forgets a window as it closes it, but its events stay needed until the window is
        # handed off (and on_window has returned), or a crash in between would lose them.
        self._emitting: SequenceToken | None = None
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
        # positions a failed window's letter names (agents.window_hook).
        self._through: SequenceToken | None = None
        self._held_from: SequenceToken | None = None

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

    def _only_windows(self, out: Output) -> bool:
        """Emitting ``out`` is calling a plain ``on_window`` for each window (or nothing)."""
        return (
            self._handoff is None
            and not (out.dead_letters or out.joins or self._merge is not None or self._release is not None)
            and not (out.events and self._on_events is not None)
            and not (self._user_watermark is not None and out.watermark > self._last_watermark)
            and (self._on_window is None or is_plain(self._on_window))
            and (self.timers is None or not _due(self.timers, out.watermark))
        )

    def _windows_now(self, windows: list[WindowResult]) -> tuple[int, Exception | Awaitable[object] | None]:
        """Call a plain ``on_window`` for each closed window here, until one raises or
        returns an awaitable: ``(that window's index, what it did)``, ``(len(windows), None)``
        once every call returned. The windows from that one on are the task's to finish
        (:meth:`_emit_windows`); all of them, ``(0, None)``, for an ``async def on_window``."""
        if self._on_window is None or not is_plain(self._on_window):
            return 0, None  # an async def: no binding made here only to find that out
        on_window = plain_function(hook_of(self._on_window, self.target))
        assert on_window is not None
        for i, result in enumerate(windows):
            try:
                returned = on_window(result)
            except Exception as exc:  # the user's hook: retried and given up by the task
                return i, exc
            if returned is not None and inspect.isawaitable(returned):
                return i, returned
        return len(windows), None

    async def _emit_windows(
        self, windows: list[WindowResult], left: tuple[int, Exception | Awaitable[object] | None]
    ) -> None:
        """The windows :meth:`_windows_now` left, from the one it stopped at, to ``on_window``
        within its limits (retried, dead-lettered ``window_failed`` if no attempt takes one)."""
        first, begun = left
        if first == len(windows):
            return
        assert self._on_window is not None
        on_window = hook_of(self._on_window, self.target)
        hooks = self._hook_calls()
        for i, result in enumerate(windows[first:]):
            await hooks.window(on_window, result, self._held_from, self._through, begun if i == 0 else None)

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

    def _has_output(self, out: Output) -> bool:
        """Whether emitting ``out`` has anything to do (see :meth:`_emit`)."""
        return bool(
            out.windows
            or out.dead_letters
            or out.joins
            or (out.events and (self._on_events is not None or self._release is not None))
            or self._merge is not None
            or (self._user_watermark is not None and out.watermark > self._last_watermark)
            or (self.timers is not None and _due(self.timers, out.watermark))
        )

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
        self._emitting = before
        self._held_from = lowest(before, first)
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
        self._emitting = None
        self.unsaved = True
        hooks = self._hooks
        if hooks is not None and hooks.idle:
            self._hooks = None  # made again by the next emit that calls a hook
        self._changed()

    def _hook_calls(self) -> HookCalls:
        """Its hooks' calls: made for an emit, and kept while one runs or a run of refused
        steps goes on (a quiet activation keeps none)."""
        hooks = self._hooks
        if hooks is None:
            on_error = self.on_error if self.has_on_error else None
            hooks = self._hooks = HookCalls(self._limits, self._partition, self._dead_letters, on_error)
        return hooks

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

    def checkpoint_hold(self) -> SequenceToken | None:
        """The oldest queue position this activation still needs (None: none)."""
        return lowest(lowest(self._held(), self._emitting), self._unfinished)

    def enable_snapshots(self) -> bool:
        """The store saves states with the checkpoint: snapshot this activation if its kind
        of state can be (True when it will)."""
        # A merge whose imported input's event in force must be replayed (the user's own
        # fields, not saved, rebuild from it) keeps holding the checkpoint instead.
        self.snapshots = (self._merge is None or not self._merge.references) and can_snapshot(self.processor)
        if self._unit and not self.snapshots:
            warn_not_saved(type(self.target), "a merge with an imported input, whose event in force is replayed")
        return self.snapshots

    def stepping(self) -> bool:
        """In a step (its state may be half emitted): no snapshot now."""
        return self._lock.locked() or self._emitting is not None

    def begin_snapshot(self) -> tuple[SequenceToken | None, bytes | None]:
        """``(last event taken, state)`` to save (state None: empty, delete it); the hold
        of what it covers stays until :meth:`end_snapshot`. Raises ``SnapshotError``
        (snapshots then stay off for this activation)."""
        held = self._held_events()
        unit = self._durable or held is not None  # fields, timers, held events: with the watermarks
        try:
            state = self.processor.snapshot() if unit or not is_empty(self.processor) else None
        except Exception:
            self.snapshots = False
            raise
        if unit:  # (StateError: it holds, and tries again at the next checkpoint)
            state = pack_unit(self.target, state, self.timers, held)
        self._save_begun(state is not None)
        return self._taken, state

    def restore(self, position: SequenceToken, state: bytes) -> None:
        """Resume from a saved snapshot: events at or below ``position`` are in it."""
        windows: bytes | None = state
        held = None
        if self._unit:
            windows, held = unpack_unit(self.target, state, self.timers)
        if windows is not None:
            self.processor.restore(windows)
        holding = self._release if self._release is not None else self._merge
        if held is not None and holding is not None:
            restore_held(holding, held)
        if self._join_left is not None:  # every left event up to here is emitted, or held in the state
            self._join_seen = (position.sequence_number, position.event_index)
        self._skip_to = self._taken = position
        self._last_watermark = self.processor.watermark
        self.stored = True
        self._changed()

    def has_state(self) -> bool:
        return self._durable or not is_empty(self.processor) or bool(self._release) or bool(self._merge)

    def _held_events(self) -> bytes | None:
        """The events a windowless activation holds for the watermark (of one input for a
        handoff, or of several), as saved (None: none)."""
        holding = self._release if self._release is not None else self._merge
        return held_snapshot(holding) if holding else None

    def can_park(self) -> bool:
        """Whether it can be deactivated with its windows open: the store has its state as
        it stands (nothing taken or ticked since the last saved snapshot, nothing being
        emitted or written) and no tick would change it, so its stream's next data can
        restore it from that state (:meth:`park`) with nothing lost or counted twice."""
        return (
            self.snapshots
            and self.stored
            and not self.unsaved
            and self._saving is None
            and self._taken is not None
            and self._unfinished is None
            and not self.stepping()
            and self.next_tick() is None
        )

    def park(self) -> tuple[SequenceToken, bytes]:
        """``(last event taken, state)``: what :meth:`restore` resumes from (see
        :meth:`can_park`); the same state as the stored snapshot, kept compact in memory."""
        assert self._taken is not None
        if not self._unit:
            return self._taken, self.processor.snapshot()
        return self._taken, pack_unit(self.target, self.processor.snapshot(), self.timers, self._held_events())

    def _held(self) -> SequenceToken | None:
        # With no snapshot saved or being saved, a restart rebuilds the windows from the
        # queue (held at their oldest event); with one, it restores it and replays what
        # came after (held at the first event it does not have).
        if not self.stored and self._saving is None:
            return self._window_held()
        own = lowest(self._since_snapshot, self._saving)
        return own if self.snapshots else lowest(own, self._window_held())

    def _window_held(self) -> SequenceToken | None:
        token = self.processor.held_since()
        token = token if isinstance(token, SequenceToken) else None
        oldest = self._release.oldest() if self._release is not None else None
        if self._merge is not None:
            oldest = self._merge.oldest()
        return lowest(token, SequenceToken(*oldest) if oldest is not None else None)

    @property
    def waiting_on_handoff(self) -> bool:
        """An append of this activation's output is being retried through an outage, or one
        of its hooks is timed by its own limit (a window's, not the batch's)."""
        hooks = self._hooks
        return (self._handoff is not None and self._handoff.retrying) or (hooks is not None and hooks.running)

    async def _emit(self, out: Output) -> None:
        if out.dead_letters:
            await self._dead_letters.add(out.dead_letters)
            self._hook_calls().refused(out.dead_letters)
        handoff = self._handoff
        if handoff is not None and out.windows:  # durable before anyone else hears of them
            await handoff.windows(out.windows)
        if out.joins:
            await self._emit_joins(out.joins)
        if self._merge is not None:
            await self._emit_merged(out)
        elif handoff is not None and self._release is not None:
            for outcome in out.events:
                if outcome.timestamp is not None:  # always, for an event that passed the policy
                    self._release.add(outcome.timestamp, position_of(outcome), outcome, replay_position_of(outcome))
            released = self._release.release(out.watermark)
            if released:  # through on_events first, as with several inputs: what it returns goes
                handed = await self._handed(released)
                for event in handed:
                    if (sid := _stream_of(event)) != self.stream_id:
                        raise ValueError(f"on_events returned an event of {sid}, not of {self.stream_id}")
                if handed:
                    await handoff.events(handed, self._release.below())
        timers = self.timers
        if timers is not None and _due(timers, out.watermark):
            await self._emit_windows_and_timers(out.windows if self._on_window is not None else [], out.watermark)
        elif self._on_window is not None and out.windows:
            await self._emit_windows(out.windows, self._windows_now(out.windows))
        if self._on_events is not None and out.events and self._merge is None and self._release is None:
            await self._hook_calls().events(self._on_events, out.events)
        if self._user_watermark is not None and out.watermark > self._last_watermark:
            self._last_watermark = out.watermark
            await self._hook_calls().watermark(self._user_watermark, out.watermark)

    async def _emit_windows_and_timers(self, windows: list[WindowResult], watermark: float) -> None:
        """The step's windows and the event-time timers due at its watermark, in order of
        their due times (a window's ``end + A``, a timer's time); at equal times the windows
        first, and the timers in the order they were set (the contract's "Early results and
        timers"). A timer an ``on_timer`` sets already due fires in the same step."""
        timers = self.timers
        assert timers is not None
        hooks, on_timer = self._hook_calls(), self._timer_hook()
        lateness = self.processor.allowed_lateness
        for i, window in enumerate(windows):
            # the timers due before this window (strictly: at equal times, windows go first)
            # (a substream's window may close above the partition's watermark: never past it)
            for timer in timers.due(EVENT_TIME, min(math.nextafter(window.end + lateness, -math.inf), watermark)):
                await hooks.timer(on_timer, timer)
            await self._emit_windows(windows[i : i + 1], (0, None))
        await fire_timers(timers, EVENT_TIME, watermark, hooks, on_timer)

    def _timer_hook(self) -> Callable[[Timer], Awaitable[None]]:
        if self._on_timer is None:
            self._on_timer = on_timer_of(self.target)
        return self._on_timer

    async def _emit_joins(self, joins: list[JoinResult]) -> None:
        """An interval join's pairs: to Spark first (one row a pair, as its left event's
        stream, marked by the left event's position), then to ``on_join``."""
        handoff = self._handoff
        if handoff is not None:
            by_stream: dict[str, list[EventOutcome]] = {}
            for pair in joins:
                left = pair.left.record
                source = str(left.stream_id) if isinstance(left, Event) else self._partition
                by_stream.setdefault(source, []).append(pair.as_event())
            pending = [replay_position_of(e) for e in self.processor.join_pending()]
            seen = self._join_seen
            below = min(pending) if pending else None if seen is None else (seen[0], seen[1] + 1)
            for source, rows in by_stream.items():
                await handoff.events(rows, below, source)
        if self._on_join is not None:
            await self._on_join(joins)

    async def _emit_merged(self, out: Output) -> None:
        """Release what the merged watermark has passed, in event-time order, to on_events
        and then (what on_events returns, or the events) to the handoff."""
        merge = self._merge
        assert merge is not None
        for outcome in out.events:
            merge.add(outcome.partition, outcome)
        released = [event for _, event in merge.release(out.watermark)]
        if not released:
            return
        handed = await self._handed(released)
        handoff = self._handoff
        if handoff is None or not handed:
            return
        by_stream: dict[StreamId, list[EventOutcome]] = {}
        for event in handed:
            by_stream.setdefault(_stream_of(event), []).append(event)
        for sid, events in by_stream.items():
            if sid.namespace not in self._inputs:
                raise ValueError(f"on_events returned an event of {sid}, not of one of its inputs")
            await handoff.events(events, merge.below(sid.namespace), str(sid))

    async def _handed(self, released: list[EventOutcome]) -> list[EventOutcome]:
        """What a handoff takes of the events the watermark ``released``: what ``on_events``
        returns (a filter, an enrichment), or the events themselves without one or when it
        returns None. The same for one input as for several."""
        if self._user_on_events is None:
            return released
        result = self._user_on_events(released)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            return released
        handed = list(result)
        for item in handed:
            if not isinstance(item, EventOutcome):
                raise ValueError(
                    f"on_events returned {item!r}, not one of the events it was given: return those "
                    "(event.with_value(v) for a changed value), or None to hand them all off"
                )
            if not isinstance(item.record, Event):
                raise ValueError(f"on_events returned an outcome of {item.record!r}, not of an event it was given")
        return handed


def _stream_of(outcome: EventOutcome) -> StreamId:
    """The stream of an event ``_handed`` let through (a runtime event)."""
    record = outcome.record
    assert isinstance(record, Event)
    return record.stream_id


def _first_token(batch: EventBatch) -> SequenceToken | None:
    """Its first event's token, without making its events (the core reads its columns)."""
    if not len(batch):
        return None
    return batch.token_at(0) if isinstance(batch, EventBatch) else batch[0].token


def _follows_clock_for_accepted(processor: Processor) -> bool:
    policy = processor.policy
    return policy.late_arrival is not None and policy.action is Action.ACCEPT


def _due(timers: TimerTable, watermark: float) -> bool:
    """An event-time timer is due at ``watermark``."""
    due = timers.next_due(EVENT_TIME)
    return due is not None and due <= watermark
