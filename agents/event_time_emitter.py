"""How a step's output leaves an event-time activation: to its hooks and its handoff.

A step of the event-time core (``streams.eventtime.processor``) returns what it closed,
refused, released or paired (:class:`~streams.eventtime.results.Output`). The emitter hands
that on, in the contract's order: dead letters first; closed windows to the handoff (durable
before anyone else hears of them), then to ``on_window``; a windowless handoff's events once
the watermark has passed them, in timestamp order, through ``on_events``; an interval join's
pairs; the event-time timers due, interleaved with the windows by due time; and last the
watermark, to ``on_watermark``. Each hook call is one unit of work, retried, timed and given
up alone (:class:`agents.hook_calls.HookCalls`).

A plain ``on_window`` is called where the step emits (:meth:`EventTimeEmitter._windows_now`):
no task, cancel scope or coroutine per window, which is most windows.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from agents.activation import TimedActivation
from agents.activation_turns import Turns
from agents.checkpoint import SavedUnit
from agents.durable import fire_timers, on_timer_of
from agents.handoff_writes import HandoffWrites
from agents.hook_calls import HookCalls, HookLimits
from agents.merged_inputs import HoldBack
from streams.core.batch import Event
from streams.core.deadletters import DeadLetterStore
from streams.core.ids import SequenceToken, StreamId
from streams.core.observer import SharedHook, hook_of, is_plain, nothing, plain_function
from streams.core.state import EVENT_TIME, Timer, TimerTable
from streams.eventtime.processor import Processor
from streams.eventtime.release import MergedRelease, TimestampOrder, position_of, replay_position_of
from streams.eventtime.results import EventOutcome, JoinResult, Output, WindowResult
from streams.eventtime.watermark import NEVER


class EventTimeEmitter(SavedUnit):
    """What an event-time activation holds, and how its steps' output leaves it (see the
    module). :class:`agents.event_time_observer.EventTimeObserver` is the activation."""

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
        "_user_completed",
        "on_change",
        "snapshots",
        "_taken",
        "_through",
        "_in_step",
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
    _last_watermark: float = NEVER  # the last one on_watermark was told of (a type with one)
    _unfinished: SequenceToken | None = None
    _skip_to: SequenceToken | None = None
    # A type with durable fields or timers (streams.core.state): saved as one unit with its windows.
    _unit = False
    _durable = False  # its type declares durable fields or timers: a unit is kept even when empty
    timers: TimerTable | None = None
    _on_timer: Callable[[Timer], Awaitable[None]] | None = None

    # Set by the activation (agents.event_time_observer.EventTimeObserver.__init__), used here.
    target: object
    stream_id: StreamId
    processor: Processor
    _partition: str
    _dead_letters: DeadLetterStore
    _lock: Turns
    _on_window: SharedHook | None
    on_error: Callable[[BaseException], Awaitable[None]]
    _user_completed: SharedHook
    on_change: Callable[[TimedActivation], None] | None
    snapshots: bool
    _taken: SequenceToken | None
    _through: SequenceToken | None
    # While a step emits: (the hold before it, the oldest position it held); None between
    # steps (one slot for both: a quiet activation keeps no token).
    _in_step: tuple[SequenceToken | None, SequenceToken | None] | None
    _limits: HookLimits
    _hooks: HookCalls | None

    def _only_windows(self, out: Output) -> bool:
        """Emitting ``out`` is calling a plain ``on_window`` for each window (or nothing)."""
        return (
            self._handoff is None
            and not (out.dead_letters or out.joins or self._merge is not None or self._release is not None)
            and not (out.events and self._on_events is not None)
            and not (self._user_watermark is not None and out.watermark > self._last_watermark)
            and (self._on_window is None or is_plain(self._on_window))
            and (self.timers is None or not due(self.timers, out.watermark))
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

    def _has_output(self, out: Output) -> bool:
        """Whether emitting ``out`` has anything to do (see :meth:`_emit`)."""
        return bool(
            out.windows
            or out.dead_letters
            or out.joins
            or (out.events and (self._on_events is not None or self._release is not None))
            or self._merge is not None
            or (self._user_watermark is not None and out.watermark > self._last_watermark)
            or (self.timers is not None and due(self.timers, out.watermark))
        )

    @property
    def has_on_error(self) -> bool:
        """Its type has an ``on_error`` (else failures go to the dead letters alone)."""
        return self.on_error is not nothing

    @property
    def _emitting(self) -> SequenceToken | None:
        """The hold before the step now emitting (None: none, or no step)."""
        step = self._in_step
        return None if step is None else step[0]

    @property
    def _held_from(self) -> SequenceToken | None:
        """The oldest position the step now emitting holds: what a failed window's letter names."""
        step = self._in_step
        return None if step is None else step[1]

    def _hook_calls(self) -> HookCalls:
        """Its hooks' calls: made for an emit, and kept while one runs or a run of refused
        steps goes on (a quiet activation keeps none)."""
        hooks = self._hooks
        if hooks is None:
            on_error = self.on_error if self.has_on_error else None
            hooks = self._hooks = HookCalls(self._limits, self._partition, self._dead_letters, on_error)
        return hooks

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
            await self._emit_released(out, handoff, self._release)
        await self._emit_to_hooks(out)

    async def _emit_to_hooks(self, out: Output) -> None:
        """The step's windows and due timers, events and watermark to the consumer's own hooks."""
        timers = self.timers
        if timers is not None and due(timers, out.watermark):
            await self._emit_windows_and_timers(out.windows if self._on_window is not None else [], out.watermark)
        elif self._on_window is not None and out.windows:
            await self._emit_windows(out.windows, self._windows_now(out.windows))
        if self._on_events is not None and out.events and self._merge is None and self._release is None:
            await self._hook_calls().events(self._on_events, out.events)
        if self._user_watermark is not None and out.watermark > self._last_watermark:
            self._last_watermark = out.watermark
            await self._hook_calls().watermark(self._user_watermark, out.watermark)

    async def _emit_released(self, out: Output, handoff: HandoffWrites, release: TimestampOrder[EventOutcome]) -> None:
        """Hold the step's events for release in event-time order, and hand off what its
        watermark releases: through on_events first, as with several inputs (what it returns goes)."""
        for outcome in out.events:
            if outcome.timestamp is not None:  # always, for an event that passed the policy
                release.add(outcome.timestamp, position_of(outcome), outcome, replay_position_of(outcome))
        released = release.release(out.watermark)
        if not released:
            return
        handed = await self._handed(released)
        for event in handed:
            if (sid := _stream_of(event)) != self.stream_id:
                raise ValueError(f"on_events returned an event of {sid}, not of {self.stream_id}")
        if handed:
            await handoff.events(handed, release.below())

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
            for timer in timers.due(EVENT_TIME, watermark, before=window.end + lateness):
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


def due(timers: TimerTable, watermark: float) -> bool:
    """An event-time timer is due at ``watermark``."""
    at = timers.next_due(EVENT_TIME)
    return at is not None and at <= watermark
