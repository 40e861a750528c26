"""Activations that remember: a plain consumer's durable fields and timers, saved with the
queue's checkpoint, and the firing of timers that both kinds of activation share.

A consumer type that declares durable fields (``streams.Durable``) or timers
(``streams.Timers``) but no ``event_time`` is delivered to through a
:class:`DurableActivation`. It is a :class:`~agents.activation.TimedActivation` to its
pulling agent, as an event-time one is: it holds the queue's checkpoint at the first event
it took since its state was last saved, its state is collected with each checkpoint
(:class:`agents.checkpoint.ActivationStates`), and it is ticked when a processing-time
timer falls due. Restored from a saved unit, it skips the events the unit already reflects,
so each event changes the state once, whatever crashed in between.

>>> import anyio
>>> from streams.core.batch import BatchContainer, BatchKind
>>> from streams.backends.memory.stores import MemoryDeadLetterStore
>>> from streams.core.ids import StreamId
>>> from streams.core.observer import as_observer
>>> from streams.core.state import Durable
>>> class Orders:
...     count = Durable(0)
...     def on_next(self, batch):
...         self.count += len(batch)
>>> sid = StreamId("orders", "ann")
>>> def batch(seq, n):
...     return BatchContainer(sid, BatchKind.DATA, 0.0, list(range(n))).events(seq)
>>> first = DurableActivation(as_observer(Orders()), sid, MemoryDeadLetterStore())
>>> first.take_now(batch(0, 2)); position, saved = first.begin_snapshot(); first.end_snapshot(True)
>>> again = DurableActivation(as_observer(Orders()), sid, MemoryDeadLetterStore())
>>> again.restore(position, saved)
>>> again.take_now(batch(0, 2)); again.take_now(batch(1, 1))  # the first is in the saved state
>>> again.target.count
3
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from agents.activation import Activation, TimedActivation
from agents.activation_turns import Turns
from agents.checkpoint import SavedUnit
from agents.delivery import inline_on_next
from agents.hook_calls import HookCalls, HookLimits
from agents.merged_inputs import InputView, QueueOrder
from streams.core.batch import EventBatch
from streams.core.deadletters import DeadLetterStore
from streams.core.ids import SequenceToken, StreamId, lowest
from streams.core.observer import lift
from streams.core.state import PROCESSING_TIME, Timer, TimerTable, pack_unit, timers_of, unpack_unit

log = logging.getLogger("headrace.agent")

__all__ = ["DurableActivation", "fire_timers", "on_timer_of", "warn_not_saved"]

BEFORE_ANY = SequenceToken(-1)  # the position of a unit saved before its first event

# A timer set by on_timer itself at a time already due fires in the same step; this many
# firings in one step and the rest wait for the next (a hook that always sets one due now
# cannot keep its stream's step from ending).
MAX_FIRINGS_PER_STEP = 10_000


def on_timer_of(target: object) -> Callable[[Timer], Awaitable[None]]:
    """The consumer's ``on_timer``, awaitable whichever way it is written; one that raises
    a clear error when the type sets timers without having one."""
    hook = getattr(target, "on_timer", None)
    if callable(hook):
        lifted: Callable[[Timer], Awaitable[None]] = lift(hook)
        return lifted
    name = type(target).__qualname__

    async def missing(timer: Timer) -> None:
        raise TypeError(f"{name} sets timers but has no on_timer(self, timer) method to call")

    return missing


async def fire_timers(
    timers: TimerTable, kind: str, now: float, hooks: HookCalls, on_timer: Callable[[Timer], Awaitable[None]]
) -> int:
    """Fire the timers of ``kind`` due at ``now`` through ``on_timer``, in order of due time
    then of being set (and those the firings set due at ``now``); how many fired."""
    fired = 0
    while fired < MAX_FIRINGS_PER_STEP:
        due = timers.due(kind, now)
        if not due:
            break
        for timer in due:
            await hooks.timer(on_timer, timer)
        fired += len(due)
    return fired


_WARNED: set[type] = set()


def warn_not_saved(cls: type, kind: str) -> None:
    """Say once per type that its durable fields and timers are not saved, its kind of
    activation (``kind``) not being snapshotted yet: they start from their defaults after a
    restart, and its events hold the checkpoint as before."""
    if cls not in _WARNED:
        _WARNED.add(cls)
        log.warning(
            "%s declares durable state, but its kind of activation (%s) is not saved yet: its fields "
            "and timers start from their defaults after a restart or a move",
            cls.__qualname__,
            kind,
        )


class DurableActivation(SavedUnit):
    """A plain consumer type's activation whose durable fields and timers are saved with
    the queue's checkpoint (see the module's docs); it delivers to ``inner``, the adapted
    user instance."""

    redeliverable = True  # a batch whose on_next raised is delivered again (its position is not taken)
    user_on_next = None  # taken through take_now: its positions are noted first
    waiting_on_handoff = False

    __slots__ = (
        "inner",
        "target",
        "stream_id",
        "on_change",
        "snapshots",
        "timers",
        "_call",
        "_dead_letters",
        "_limits",
        "_hooks",
        "_on_timer",
        "_taken",
        "_skip_to",
        "_turns",
        "_failing",
        "_inputs",
    )

    def __init__(
        self,
        inner: Activation,
        stream_id: StreamId,
        dead_letters: DeadLetterStore,
        limits: HookLimits | None = None,
        inputs: tuple[str, ...] = (),
        timers: TimerTable | None | Literal[False] = False,
    ) -> None:
        self.inner = inner
        self.target = inner.target
        self.stream_id = stream_id
        self.on_change: Callable[[TimedActivation], None] | None = None
        super().__init__()  # nothing saved yet
        self.snapshots = False  # saved with the checkpoint once the store can (enable_snapshots)
        # Its target's timer table (False: not yet looked up by the caller).
        self.timers = timers_of(self.target) if timers is False else timers
        self._call = inline_on_next(inner)  # None: an async on_next, awaited by the task
        self._dead_letters = dead_letters
        self._limits = limits or HookLimits(type(self.target).__qualname__)
        self._hooks: HookCalls | None = None
        self._on_timer: Callable[[Timer], Awaitable[None]] | None = None
        self._taken: SequenceToken | None = None  # the last event whose on_next returned
        self._skip_to: SequenceToken | None = None  # restored: the events the saved unit has
        self._turns = Turns()  # on_next and on_timer take turns, as a grain's calls do
        # The batch whose on_next raised last: its state may be half changed, so nothing is
        # saved until it is redelivered and taken, or given up (dead-lettered: on_error).
        self._failing: EventBatch | None = None
        self._inputs = inputs  # the namespaces of a type fed by several (one activation per key)

    # -- delivery ---------------------------------------------------------------------------
    # Told of every batch given up (its letters kept), so that a failed on_next does not hold
    # the checkpoint for ever: the user's on_error is called only if it has one.
    has_on_error = True

    def take_now(self, batch: EventBatch) -> Awaitable[None] | None:
        """Call ``on_next`` where ``batch`` arrives (past what a restored unit has), unless
        a timer is firing; what is left (an async ``on_next``, or the wait for the turn) is
        returned for the consumer's task to await."""
        if not len(batch):
            return None
        if self._skip_to is not None:
            batch = batch.after(self._skip_to)
            if not len(batch):
                return None
        if not self._turns.take_now():
            return self._in_turn(batch)
        try:
            pending = self._call_on_next(batch)
        except BaseException:
            self._turns.give_back()
            raise
        if pending is None:
            self._took(batch)
            self._turns.give_back()
            return None
        return self._finish(pending, batch)

    def _call_on_next(self, batch: EventBatch) -> Awaitable[object] | None:
        if self._since_snapshot is None:
            self._since_snapshot = batch.token_at(0) if isinstance(batch, EventBatch) else batch[0].token
        self._failing = batch  # until it returns
        call = self._call
        try:
            return call(batch) if call is not None else self.inner.on_next(batch)
        except BaseException:
            self._changed()
            raise

    async def _finish(self, pending: Awaitable[object], batch: EventBatch) -> None:
        try:
            await pending
            self._took(batch)
        except BaseException:
            self._changed()
            raise
        finally:
            self._turns.give_back()

    async def _in_turn(self, batch: EventBatch) -> None:
        async with self._turns:
            pending = self._call_on_next(batch)
            if pending is not None:
                try:
                    await pending
                except BaseException:
                    self._changed()
                    raise
            self._took(batch)

    async def on_next(self, batch: EventBatch, partition: str | None = None) -> None:
        pending = self.take_now(batch)
        if pending is not None:
            await pending

    def for_input(self, name: str, order: QueueOrder) -> InputView:
        """What the stream of namespace ``name`` delivers to (a type fed by several: one
        activation per key), its batches taking turns with the other namespaces' in queue
        order, so that a restored unit's position holds for all of them."""
        return InputView(self, name, order)

    def _took(self, batch: EventBatch) -> None:
        self._failing = None
        last = batch.last_position()
        if self._taken is None or last > self._taken:  # never back (a second subscription behind)
            self._taken = last
        self.unsaved = True
        self._changed()

    async def on_error(self, error: BaseException) -> None:
        """A batch was given up (dead-lettered): its events are accounted for as letters, so
        the state is saved past them; then the user's ``on_error``, if it has one."""
        failing = self._failing
        if failing is not None and not self._turns.locked():
            self._took(failing)
        if self.inner.has_on_error:
            await self.inner.on_error(error)

    async def on_completed(self, partition: str | None = None) -> None:
        await self.inner.on_completed()

    async def on_watermark(self, watermark: float, partition: str | None = None) -> None:
        await self.inner.on_watermark(watermark)

    async def on_tick(self, now: float, *, strict: bool = False) -> None:
        """Fire the processing-time timers due at ``now`` (the queue's processing clock)."""
        timers = self.timers
        if timers is None or self._turns.locked():
            return
        async with self._turns:
            fired = await fire_timers(timers, PROCESSING_TIME, now, self._hook_calls(), self._timer_hook())
        if fired:
            self.unsaved = True
        self._changed()

    def _timer_hook(self) -> Callable[[Timer], Awaitable[None]]:
        if self._on_timer is None:
            self._on_timer = on_timer_of(self.target)
        return self._on_timer

    def _hook_calls(self) -> HookCalls:
        if self._hooks is None:
            inner = self.inner
            on_error = inner.on_error if inner.has_on_error else None
            self._hooks = HookCalls(self._limits, str(self.stream_id), self._dead_letters, on_error)
        return self._hooks

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    # -- as its agent sees it (agents.activation.TimedActivation) ----------------------------
    def input_streams(self) -> list[StreamId]:
        if not self._inputs:
            return [self.stream_id]
        return [StreamId(name, self.stream_id.key) for name in self._inputs]

    def next_tick(self) -> float | None:
        timers = self.timers
        return None if timers is None else timers.next_due(PROCESSING_TIME)

    def checkpoint_hold(self) -> SequenceToken | None:
        """The first event taken since the saved state (or the one being written) began."""
        return lowest(self._since_snapshot, self._saving)

    def holding(self) -> tuple[str, str | None]:
        """Why it holds the checkpoint: its fields changed since their last save."""
        return "events since its last save", None

    def has_state(self) -> bool:
        return True  # its fields: parked with the store's copy, never simply dropped

    def can_park(self) -> bool:
        """Its saved unit is current: it may be deactivated (a processing-time timer of it
        wakes it again: ``agents.catalog``)."""
        return self.snapshots and self.stored and not self.unsaved and self._saving is None and not self.stepping()

    def park(self) -> tuple[SequenceToken, bytes]:
        return self._position(), pack_unit(self.target, None, self.timers)

    def _position(self) -> SequenceToken:
        # Before any event (a timer fired first) a unit stands before the queue's first record.
        return self._taken if self._taken is not None else BEFORE_ANY

    # -- saved state (agents.checkpoint) ----------------------------------------------------
    def enable_snapshots(self) -> bool:
        self.snapshots = True
        return True

    def stepping(self) -> bool:
        """In a turn, or its last on_next raised (its state may be half changed)."""
        return self._turns.locked() or self._failing is not None

    def begin_snapshot(self) -> tuple[SequenceToken | None, bytes | None]:
        state = pack_unit(self.target, None, self.timers)  # raises StateError: it holds on
        self._save_begun(True)
        return self._position(), state

    def restore(self, position: SequenceToken, state: bytes) -> None:
        """Resume from a saved unit: its fields and timers, and the events it reflects
        (those at or below ``position``) are not taken again."""
        unpack_unit(self.target, state, self.timers)  # (no windows, nothing held)
        self._skip_to = self._taken = position
        self.stored = True
        self._changed()

    def __repr__(self) -> str:
        return f"DurableActivation({type(self.target).__qualname__}, {self.stream_id})"
