"""What the agents deliver to: the boundary between a queue's pulling agent and the consumers, and
an activation whose constructor has not succeeded yet.

What the agents deliver to: the boundary between a queue's pulling agent and the consumers.

:class:`Activation` is what a subscription's :class:`~agents.delivery.StreamConsumer`
delivers to: an activation of a consumer type, or an in-process observer
(:func:`streams.core.observer.as_observer` adapts either shape a user writes). An event-time
activation (:class:`agents.event_time_observer.EventTimeObserver`) is also a :class:`TimedActivation`:
the agent ticks it while its stream is silent, its open windows hold the queue's
checkpoint, and its state may be saved with that checkpoint (:mod:`agents.checkpoint`).

Both are structural: nothing subclasses them, and checking one costs nothing at run time.

>>> from streams.core.observer import as_observer
>>> seen = []
>>> activation: Activation = as_observer(seen.extend)
>>> activation.redeliverable, activation.has_on_error, activation.waiting_on_handoff
(True, False, False)

An activation whose consumer could not be built yet: its constructor raised.

A constructor is user code like ``on_next``, and fails the same way (a bad key, a resource
away a moment): the batch that needed it is retried with the delivery back-off, dead-lettered
``activation_failed`` if every attempt fails, and the stream's next batch tries again. Until
the instance exists nothing of the stream is taken, so redelivery counts nothing twice; once
it exists, every call goes to the real activation.

>>> import anyio
>>> from streams.core.observer import as_observer
>>> attempts = []
>>> def build():
...     attempts.append(1)
...     if len(attempts) < 2:
...         raise ValueError("not yet")
...     return as_observer(seen.extend)
>>> seen = []
>>> pending = PendingActivation(build, "Totals")
>>> try:
...     anyio.run(pending.on_next, [1])
... except ActivationError as exc:
...     print(exc)
Totals could not be built: ValueError('not yet')
>>> anyio.run(pending.on_next, [2]); seen, pending.built is not None
([2], True)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from streams.core.batch import EventBatch
from streams.core.errors import ActivationError
from streams.core.ids import SequenceToken, StreamId


class Activation(Protocol):
    """What a consumer's cursor delivers to, one batch (or watermark, or completion) at a time."""

    @property
    def target(self) -> object:
        """The user's object behind it (deactivated with it; named in log lines)."""
        ...

    @property
    def has_on_error(self) -> bool:
        """The user wrote an ``on_error``: failures are told to it."""
        ...

    @property
    def redeliverable(self) -> bool:
        """A batch whose delivery raised may be delivered again (False when what it took
        is kept, as in an event-time activation's windows: it would be counted twice)."""
        ...

    @property
    def waiting_on_handoff(self) -> bool:
        """The runtime's own append of its output is riding out an outage (the delivery
        watchdog does not count that time against the consumer)."""
        ...

    @property
    def user_on_next(self) -> Callable[[EventBatch], object] | None:
        """``on_next`` as the user wrote it, which the agent may call where the data arrives
        (:mod:`agents.delivery`); None when only the consumer's task may call it."""
        ...

    @property
    def take_now(self) -> Callable[[EventBatch], Awaitable[None] | None] | None:
        """The activation's own way to take a batch where the data arrives: it runs what it
        can there and returns what is left for its task to await (an event-time activation's
        step, :mod:`agents.event_time_observer`); None for one that has none."""
        ...

    def on_next(self, batch: EventBatch) -> Awaitable[None]: ...

    def on_error(self, error: BaseException) -> Awaitable[None]: ...

    def on_completed(self) -> Awaitable[None]: ...

    def on_watermark(self, watermark: float) -> Awaitable[None]: ...


class TimedActivation(Activation, Protocol):
    """An event-time activation, as its pulling agent sees it.

    Ticks and holds: after each step it calls ``on_change`` with itself, and the agent then
    reads :meth:`checkpoint_hold` and :meth:`next_tick` (kept in heaps, not asked of every
    activation at every acknowledgement and timer). Snapshots: the members
    :class:`agents.checkpoint.ActivationStates` reads and calls while saving its state."""

    on_change: Callable[[TimedActivation], None] | None

    def __hash__(self) -> int: ...  # kept in sets and heaps by identity

    @property
    def stream_id(self) -> StreamId: ...

    def on_tick(self, now: float, *, strict: bool = False) -> Awaitable[None]:
        """The queue's processing clock moved to ``now`` and nothing arrived (the clock is
        the newest arrival read while the queue has a backlog, else the wall clock).
        ``strict``: ``now`` is a record's arrival, so another record may still arrive at this
        very instant and count first: a timeout due exactly at ``now`` waits for it."""
        ...

    def input_streams(self) -> list[StreamId]:
        """The streams whose consumers deliver to it (its agent ticks it only once they have
        delivered every record read)."""
        ...

    def next_tick(self) -> float | None:
        """When a tick would next change something (None: no tick ever would)."""
        ...

    def checkpoint_hold(self) -> SequenceToken | None:
        """The oldest queue position it still needs (None: none)."""
        ...

    def holding(self) -> tuple[str, str | None]:
        """Why it holds that position (open windows, held events, an emit in flight, ...),
        and with several inputs, the input whose event it is (None: not one input's)."""
        ...

    def has_state(self) -> bool:
        """Open windows or held events: it stays active while its stream is quiet, unless
        it can be parked (its state saved as it stands)."""
        ...

    def can_park(self) -> bool:
        """Its saved state is current and no tick would change it: it may be deactivated."""
        ...

    def park(self) -> tuple[SequenceToken, bytes]:
        """``(last event taken, state)`` to restore it from when its stream has data again."""
        ...

    # -- saved state (agents.checkpoint) ------------------------------------------------------
    snapshots: bool  # its state is saved with the checkpoint (no hold at its open windows)
    stored: bool  # a snapshot of it is in the store
    unsaved: bool  # stepped since its last snapshot was taken

    def enable_snapshots(self) -> bool: ...

    def stepping(self) -> bool: ...

    def begin_snapshot(self) -> tuple[SequenceToken | None, bytes | None]: ...

    def end_snapshot(self, ok: bool) -> None: ...

    def restore(self, position: SequenceToken, state: bytes) -> None: ...


__all__ = ["ActivationError", "PendingActivation"]


class PendingActivation:
    """Stands for an activation whose constructor raised; builds it at each delivery until
    it can (``build()`` makes the real one), then delivers to it."""

    __slots__ = ("_build", "name", "built")

    def __init__(self, build: Callable[[], Activation], name: str) -> None:
        self._build = build
        self.name = name  # the consumer type, for the error's message
        self.built: Activation | None = None

    def activation(self) -> Activation:
        """The real activation, built now if it was not (raises :class:`ActivationError`
        with the constructor's error as its cause)."""
        built = self.built
        if built is None:
            try:
                built = self.built = self._build()
            except Exception as exc:
                raise ActivationError(f"{self.name} could not be built: {exc!r}") from exc
        return built

    @property
    def target(self) -> object:
        return None if self.built is None else self.built.target

    @property
    def has_on_error(self) -> bool:
        return self.built is not None and self.built.has_on_error

    @property
    def redeliverable(self) -> bool:
        # Unbuilt, it has taken nothing: a retry cannot count anything twice.
        return self.built is None or self.built.redeliverable

    @property
    def waiting_on_handoff(self) -> bool:
        return self.built is not None and self.built.waiting_on_handoff

    @property
    def user_on_next(self) -> Callable[[EventBatch], object] | None:
        return None  # delivered by the consumer's task, which retries and times it

    @property
    def take_now(self) -> Callable[[EventBatch], Awaitable[None] | None] | None:
        return None  # likewise

    async def on_next(self, batch: EventBatch) -> None:
        await self.activation().on_next(batch)

    async def on_error(self, error: BaseException) -> None:
        if self.built is not None:
            await self.built.on_error(error)

    async def on_completed(self) -> None:
        await self.activation().on_completed()

    async def on_watermark(self, watermark: float) -> None:
        await self.activation().on_watermark(watermark)
