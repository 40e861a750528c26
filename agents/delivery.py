"""Delivery to one subscription: its cursor, one batch at a time, awaited.

A slow consumer slows only its own cursor; the others keep their own pace. A batch whose
delivery raises is delivered again with back-off (``delivery_retry_backoff``, doubling) while
``max_event_delivery_time`` allows (``agents.redelivery``); if no attempt succeeds the consumer
is told through ``on_error``, the failure handler hears of it, the batch is dead-lettered with
reason ``delivery_failed`` (``activation_failed`` when the consumer's constructor raised,
:mod:`agents.activation`) and the traceback (so it stays findable), and delivery goes on,
unless the subscription is faulted (``fault_on_error``; never an implicit activation's).
Every delivery runs with the worker, queue and stream as the logging context
(``streams.core.logcontext``), so the consumer's own log lines name them.

A consumer's task delivers until the cursor is caught up, then ends: a quiet consumer has
no task (an agent may hold a hundred thousand of them), and the agent starts one when data
comes. When ``on_next`` cannot suspend (a plain function, or a coroutine function with no
``await``), the agent calls it instead, as soon as the data is cached: the same calls in the
same order, without a task switch per batch. An event-time activation's step runs there too,
and only what it has to emit (closed windows, letters) is left to a task. Such a consumer has a task only while there is
something to await (catching up when it starts, a failure to report, a watermark or a
completion, history to read). A plain function that returns an awaitable is
from then on called by a task of its own, which awaits what it returns. (A call that cannot
suspend cannot be cut short by the ``max_event_delivery_time`` watchdog either, wherever it
runs; an awaitable handed to the task is watched as any delivery. A call made by the agent
runs in the agent's task and context: code that looks at the current task or sets context
variables sees the agent's.)

Calling a consumer's ``on_next`` where the data arrives, without a task switch per batch.

When ``on_next`` cannot suspend (a plain function, or an ``async def`` marked
:func:`streams.inline`), the agent calls it as soon as the data is cached
(``agents.delivery``): the call runs to completion where it is made and returns what is still
to be awaited (an awaitable a plain function returned). Whether to call inline is the user's
declared choice; nothing is guessed from the function's code.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, cast

import anyio

from agents.activation import Activation
from agents.context import AgentContext
from agents.counters import Tally
from agents.delivery_failures import DeliveryFailures
from cache.protocols import CachedBatch, QueueCacheCursor
from streams.core.batch import BatchKind, Event, EventBatch, KeptEvents
from streams.core.errors import DeliveryTimeoutError
from streams.core.ids import SequenceToken, StreamId
from streams.core.logcontext import LOG_CONTEXT
from streams.core.observer import EventFilter, is_coroutine_function, is_inline

log = logging.getLogger("headrace.agent")


class ConsumerKind:
    """What a consumer shares with the others of its kind in one agent: the agent's context,
    how it starts a task (in the agent's task group), the agent's set of consumers that have
    a task now (its watchdog and drain look at these, not at every consumer), whether the
    kind is a durable or an implicit subscription's, and the events-out tally of its
    consumer type. One per agent and kind, not per stream: six slots fewer a consumer.
    The working consumers map to the cancel scope of their task's delivery (None until the
    task has begun).
    """

    __slots__ = ("context", "spawn", "working", "durable", "implicit", "tally")

    def __init__(
        self,
        context: AgentContext,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
        working: dict[StreamConsumer, anyio.CancelScope | None],
        *,
        durable: bool = False,
        implicit: bool = False,
        tally: Tally | None = None,
    ) -> None:
        self.context = context
        self.spawn = spawn
        self.working = working
        self.durable = durable
        self.implicit = implicit  # an implicit activation is never faulted (as in Orleans)
        self.tally = tally if tally is not None else Tally()


class StreamConsumer:
    """One subscription on one stream, in the agent that owns the stream's queue."""

    # Slots, and no event until a task waits: an agent may hold many thousands of these.
    # What the consumers of a kind share is in their ConsumerKind, the stream id is the
    # cursor's, whether it has a task is whether it is in the kind's working map (with the
    # task's cancel scope), and whether it is closed is whether its cursor is.
    __slots__ = (
        "subscription_id",
        "kind",
        "observer",
        "cursor",
        "delivered_batches",
        "delivered_events",
        "deadline",
        "_call_now",
        "_log_fields",
        "_extras",
    )

    def __init__(
        self,
        subscription_id: str,
        observer: Activation,
        cursor: QueueCacheCursor,
        kind: ConsumerKind,
        *,
        start_token: SequenceToken | None = None,
        log_fields: Mapping[str, Any] | None = None,
        event_filter: EventFilter | None = None,
    ) -> None:
        self.subscription_id = subscription_id
        self.kind = kind
        self.observer = observer
        self.cursor = cursor
        self.delivered_batches = 0
        self.delivered_events = 0  # status: events out, per second
        # What few consumers have (a token, a filter, a failure...): made on first need.
        self._extras: _Extras | None = None
        if start_token is not None:
            self._more().start_token = start_token
        # When the delivery in flight runs out of max_event_delivery_time; 0.0 (shared) while
        # none is in flight, which is what "delivering" means here.
        self.deadline = 0.0
        if event_filter is not None:
            self._more().filter = _Filter(event_filter)
        self._call_now: Callable[[EventBatch], Awaitable[object] | None] | None = None
        self._bind(observer)
        self._log_fields = log_fields if log_fields is not None else {}  # worker, queue, stream

    def _more(self) -> _Extras:
        extras = self._extras
        if extras is None:
            extras = self._extras = _Extras()
        return extras

    @property
    def failures(self) -> int:
        """Deliveries that failed for good (dead-lettered)."""
        return 0 if self._extras is None else self._extras.failures

    @failures.setter
    def failures(self, value: int) -> None:
        self._more().failures = value

    @property
    def faulted(self) -> bool:
        """Closed for good by a failure (``fault_on_error``)."""
        return self._extras is not None and self._extras.faulted

    @faulted.setter
    def faulted(self, value: bool) -> None:
        self._more().faulted = value

    @property
    def reporting(self) -> bool:
        """Reporting a failure: the runtime's time, which the watchdog leaves alone."""
        return self._extras is not None and self._extras.reporting

    @reporting.setter
    def reporting(self, value: bool) -> None:
        self._more().reporting = value

    @property
    def detached(self) -> int:
        """Times moved off the cache onto the durable queue."""
        return 0 if self._extras is None else self._extras.detached

    @property
    def _filter(self) -> _Filter | None:
        return None if self._extras is None else self._extras.filter

    @property
    def _begun(self) -> tuple[QueueCacheCursor, CachedBatch, EventBatch, Exception | Awaitable[object]] | None:
        return None if self._extras is None else self._extras.begun

    @property
    def _has_task(self) -> bool:  # a task of its own delivers (or is about to): the agent leaves it be
        return self in self.kind.working

    @property
    def stream_id(self) -> StreamId:
        return self.cursor.stream_id

    @property
    def durable(self) -> bool:
        return self.kind.durable

    @property
    def implicit(self) -> bool:
        return self.kind.implicit

    def _bind(self, observer: Activation) -> None:
        self.observer = observer
        # None: only the task calls on_next (or, stepping inline, the observer's own call,
        # bound when it is made: a bound method kept per consumer is 64 bytes a stream).
        inline = not steps_inline(observer) and self._filter is None
        self._call_now = inline_on_next(observer) if inline else None

    def replace_observer(self, observer: Activation) -> None:
        """Deliver to ``observer`` from this consumer's position on (``handle.resume()``
        without a token): the cursor, and so the position, stay; a delivery in flight
        finishes with the observer it began with."""
        self._bind(observer)

    @property
    def _delivering(self) -> bool:
        """A delivery is in flight (begun, not yet finished)."""
        return self.deadline != 0.0

    @property
    def closed(self) -> bool:
        """Closed: unsubscribed, its stream deactivated, or faulted by a failure."""
        return self.cursor.closed

    @property
    def idle(self) -> bool:
        """Caught up (or closed) and not in the middle of a delivery. A cursor with history
        still to read from the queue (a rewind, a detached consumer) has not caught up, though
        it holds nothing between two reads: drain and shutdown wait for it."""
        if self._delivering:
            return False
        cursor = self.cursor
        return cursor.closed or (cursor.current() is None and not cursor.needs_fill)

    def start(self) -> None:
        """Begin delivering: a task catches up with what the cursor holds (none is needed
        while there is nothing to catch up with)."""
        cursor = self.cursor
        if cursor.current() is not None or cursor.needs_fill:
            self._start_task()

    def _start_task(self) -> None:
        kind = self.kind
        kind.working[self] = None  # its scope once the task has begun
        kind.spawn(self.run)

    def _resume(self) -> None:
        """Have a task deliver: the running one looks at the cursor (and at close) before it
        ends, so it needs no wake-up; else start one."""
        if not self._has_task and not self.cursor.closed:
            self._start_task()

    def data_arrived(self) -> None:
        """The agent added batches of this consumer's stream to the cache: deliver them here
        and now if ``on_next`` cannot suspend and no task is busy with this consumer, else
        leave them to a task. The agent calls it with the stream's log context set."""
        now = self._call_now is not None or self.observer.take_now is not None  # (or steps_inline)
        if now and self not in self.kind.working and self._deliver_now():  # (not _has_task)
            return
        self._resume()

    def _deliver_now(self) -> bool:
        """Deliver data batches from the cursor in the caller's task (the agent's); return
        whether the cursor is caught up with nothing left for the task to do."""
        cursor, call = self.cursor, self._call_now or self.observer.take_now or inline_on_next(self.observer)
        assert call is not None
        # The log context is the agent's to set here: once per stream for all its consumers.
        while not cursor.closed:
            item = cursor.current()
            if item is None:
                return not cursor.needs_fill
            if item.kind is not BatchKind.DATA:
                return False  # watermarks and completions are awaited by the task
            batch = self._batch_of(item)
            if batch:
                pending: Awaitable[object] | Exception | None
                try:
                    pending = call(batch)
                except Exception as exc:
                    pending = exc
                if pending is not None:
                    self._leave_to_task(cursor, item, batch, pending)
                    return False
            events = len(batch)
            self.delivered_batches += 1
            self.delivered_events += events
            self.kind.tally.events += events
            cursor.advance()
        return True

    def _leave_to_task(
        self,
        cursor: QueueCacheCursor,
        item: CachedBatch,
        batch: EventBatch,
        pending: Exception | Awaitable[object],
    ) -> None:
        """Leave a delivery begun in the agent for a task to finish: it counts as in
        flight (for ``idle``, the watchdog and detaching) until the task is done with it."""
        self.deadline = time.monotonic() + self.kind.context.options.max_event_delivery_time
        self._more().begun = (cursor, item, batch, pending)
        if not isinstance(pending, Exception) and not steps_inline(self.observer):
            self._call_now = None  # it returns awaitables: a task calls it from now on

    async def _finish_begun(self) -> None:
        extras = self._extras
        assert extras is not None and extras.begun is not None
        cursor, item, batch, pending = extras.begun
        extras.begun = None
        if isinstance(pending, Exception):
            await self._failures().retry(item, batch, pending)
        else:
            try:
                await pending
                self.delivered_batches += 1
                self.delivered_events += len(batch)
                self.kind.tally.events += len(batch)
            except Exception as exc:
                await self._failures().retry(item, batch, exc)
        self.deadline = 0.0  # delivered
        cursor.advance()

    def close(self) -> None:
        """Stop delivering. An idle consumer stops at once; a busy one after its batch."""
        if self.cursor.closed:
            return
        self.cursor.close()
        scope = self.kind.working.get(self)
        if scope is not None and not self._delivering:
            scope.cancel()

    def check_deadline(self, now: float) -> None:
        """Called by the agent's timer: cancel a delivery past ``max_event_delivery_time``.

        A watchdog instead of a timeout around every batch: a deadline costs one float per
        delivery, where a timer per batch cost a quarter of the agent's time."""
        deadline = self.deadline
        scope = self.kind.working.get(self) if deadline else None
        if deadline and now > deadline and scope is not None:
            if self.observer.waiting_on_handoff or self.reporting:
                # The runtime's own append is riding out an outage with the checkpoint held:
                # not the consumer's time. It gets a whole limit again once the append is in.
                self.deadline = now + self.kind.context.options.max_event_delivery_time
                return
            self._more().timed_out = True
            scope.cancel()

    async def run(self) -> None:
        fields = LOG_CONTEXT.set(self._log_fields)  # the task's own context: for all it delivers
        try:
            while True:
                with anyio.CancelScope() as scope:
                    self.kind.working[self] = scope
                    await self._deliver_all()
                extras = self._extras
                if extras is None or not extras.timed_out:
                    return  # closed, or caught up with the agent delivering from here on
                extras.timed_out = False
                self.deadline = 0.0  # cut short: not in flight any more
                item = self.cursor.current()
                if item is not None:
                    await self._failures().failed(
                        item,
                        self._batch_of(item),
                        DeliveryTimeoutError(
                            f"consumer {self.subscription_id} on {self.stream_id} took longer than "
                            f"max_event_delivery_time ({self.kind.context.options.max_event_delivery_time}s)"
                        ),
                    )
                    self.cursor.advance()
        finally:
            self.kind.working.pop(self, None)  # the watchdog has nothing to cancel until the next task
            LOG_CONTEXT.reset(fields)

    async def _deliver_all(self) -> None:
        limit = self.kind.context.options.max_event_delivery_time
        while not self.cursor.closed or self._begun is not None:
            if self._begun is not None:  # finished even after close(), as a delivery in flight is
                await self._finish_begun()
                continue
            cursor = self.cursor
            item = cursor.current()
            if item is None:
                if cursor.needs_fill:
                    miss = await cursor.fill()  # type: ignore[attr-defined]
                    if miss is not None:  # history retention removed: a visible gap
                        await self.report_error(miss)
                    continue
                # Caught up: the task ends, so a quiet consumer costs no parked task. The
                # agent delivers what comes next, or starts a task for it. Nothing is in
                # flight: the deadline goes back to the shared 0.0, not a float of its own
                # (24 bytes a quiet activation).
                self.deadline = 0.0
                return
            self.deadline = time.monotonic() + limit
            await self._deliver(item)
            self.deadline = 0.0  # delivered
            cursor.advance()

    def detach(self, make_cursor: Callable[[int], QueueCacheCursor]) -> None:
        """Move this consumer off the cache onto a cursor of its own over the durable queue,
        from the batch it still needs (``make_cursor(sequence_number)``)."""
        item = self.cursor.current()
        if item is None or self.cursor.closed:
            return
        # Mid-delivery, the batch is being finished: the new cursor starts after it (after
        # its last record: a group of records holds several). A cursor that began inside a
        # group (its token there) begins there again.
        start = item.last + 1 if self._delivering else item.start
        old, self.cursor = self.cursor, make_cursor(start)
        old.close()
        self._more().detached += 1
        self._resume()

    async def _deliver(self, item: CachedBatch) -> None:
        kind = item.kind
        observer = self.observer
        data: EventBatch | None = None  # a data batch's events (those its filter kept)
        try:
            if kind is BatchKind.DATA:
                data = self._batch_of(item)
                if data and self._filter is not None:
                    data = await self._filtered(item, data, self._filter)
                if data:
                    await observer.on_next(data)
            elif kind is BatchKind.COMPLETED:
                await observer.on_completed()
            elif kind is BatchKind.WATERMARK:
                await observer.on_watermark(float(item.container.values[0]))
            self.delivered_batches += 1
            self.delivered_events += len(data or ())
            self.kind.tally.events += len(data or ())
        except Exception as exc:  # a consumer's bug must not stop the agent
            if data:  # data: retried
                await self._failures().retry(item, data, exc)
            else:
                await self._failures().failed(item, data or [], exc)

    async def _filtered(self, item: CachedBatch, batch: EventBatch, event_filter: _Filter) -> EventBatch:
        """The events of ``batch`` that the subscription's filter keeps (the batch itself
        when it keeps all). The filter is user code: an event it raises on, or returns an
        awaitable for (an ``async def`` filter is refused at subscribe; a lambda may still
        return a coroutine), or whose verdict has no truth value, is dead-lettered
        ``filter_failed`` with the traceback, the first of a run of such batches logged at
        warning, and the rest of the batch goes on."""
        kept: list[Event] = []
        refused: list[tuple[Event, Exception]] = []
        for event in batch:
            try:
                if filter_verdict(event_filter.fn, event):
                    kept.append(event)
            except Exception as exc:  # the user's predicate: isolated, as any user code
                refused.append((event, exc))
        if refused:
            await self._failures().filter_failed(item, refused, first_of_run=not event_filter.failing)
        event_filter.failing = bool(refused)
        if len(kept) == len(batch):
            return batch  # the shared batch, no copy
        # An in-process observer (the only kind with a filter) takes any sequence of events.
        return cast(EventBatch, KeptEvents(batch.stream_id, kept))

    def _batch_of(self, item: CachedBatch) -> EventBatch:
        events = item.events
        extras = self._extras
        if extras is not None and extras.start_token is not None:
            start, extras.start_token = extras.start_token, None
            if start.sequence_number == item.sequence and start.event_index:
                return events.from_index(start.event_index)
        return events

    def count_delivered(self, batch: EventBatch) -> None:
        self.delivered_batches += 1
        self.delivered_events += len(batch)
        self.kind.tally.events += len(batch)

    def fault(self) -> None:
        """Closed for good by a failure (``fault_on_error``)."""
        self.cursor.close()

    def _failures(self) -> DeliveryFailures:
        return DeliveryFailures(self, self.kind.context)

    async def report_error(self, error: Exception) -> None:
        """Tell the consumer and the failure handler of an error outside a delivery
        (a cache miss when its cursor was created)."""
        await self._failures().report_error(error)


class _Extras:
    """What only some consumers have (a filter, a token inside a batch) or have after a
    rare event (a failure, a timeout, a detach, a delivery begun inline and left to a
    task): one object made on first need, so the many quiet consumers carry one empty slot
    for all of it."""

    __slots__ = ("failures", "faulted", "detached", "reporting", "timed_out", "start_token", "filter", "begun")

    def __init__(self) -> None:
        self.failures = 0
        self.faulted = False
        self.detached = 0
        self.reporting = False
        self.timed_out = False  # the watchdog cut the delivery in flight short
        self.start_token: SequenceToken | None = None  # the subscription's, until its batch is delivered
        # The subscription's filter (subscribe(..., filter=)): evaluated by the task, which
        # can await the letters of the events it fails on, so such a consumer is never
        # delivered to inline.
        self.filter: _Filter | None = None
        # A delivery the agent began and the task finishes: (cursor, item, batch, outcome).
        self.begun: tuple[QueueCacheCursor, CachedBatch, EventBatch, Exception | Awaitable[object]] | None = None


class _Filter:
    """A subscription's filter, and whether the last batch it looked at had events it
    failed on (a run of such batches is logged at its first)."""

    __slots__ = ("fn", "failing")

    def __init__(self, fn: EventFilter) -> None:
        self.fn = fn
        self.failing = False


def filter_verdict(event_filter: EventFilter, event: Event) -> bool:
    """Whether ``event_filter`` keeps ``event``: its result taken by truth value, as Python's
    ``filter()`` takes it, so ``lambda e: e.value.get("vip")`` keeps the events whose field
    is truthy. An awaitable is refused (a coroutine is always true: an ``async`` filter
    would keep everything), and so is a result with no truth value (a NumPy array).

    >>> filter_verdict(lambda e: e, 0), filter_verdict(lambda e: [e], 0)
    (False, True)
    >>> async def later(e): return False
    >>> filter_verdict(lambda e: later(e), 0)
    Traceback (most recent call last):
    ...
    TypeError: a stream filter returns a bool, not a coroutine: make it a plain def
    """
    verdict = event_filter(event)
    if inspect.isawaitable(verdict):
        close = getattr(verdict, "close", None)
        if close is not None:
            close()  # never awaited: no "coroutine was never awaited" warning later
        raise TypeError(f"a stream filter returns a bool, not a {type(verdict).__name__}: make it a plain def")
    return bool(verdict)


def inline_on_next(observer: Activation) -> Callable[[EventBatch], Awaitable[object] | None] | None:
    """``on_next`` as a call that runs to completion where it is made, returning what is
    still to be awaited (an awaitable a plain function returned), or ``None`` when only the
    consumer's task calls it: an ``async def on_next`` not marked :func:`streams.inline`.

    >>> from streams.core.observer import as_observer
    >>> seen = []
    >>> call = inline_on_next(as_observer(seen.extend))
    >>> call([1, 2]), seen
    (None, [1, 2])
    """
    take_now = observer.take_now  # an event-time activation's own step (agents.event_time_observer)
    if take_now is not None:
        return take_now
    fn = observer.user_on_next  # the function as_observer adapted
    if fn is None:
        return None
    if is_coroutine_function(fn):
        return _completing(fn) if is_inline(fn) else None
    return _calling(fn)


def steps_inline(observer: Activation) -> bool:
    """Whether the call :func:`inline_on_next` gives is the activation's own ``take_now``,
    which may return an awaitable for one delivery and finish the next where it is made
    (a plain function that returns an awaitable once is awaited by a task from then on).

    >>> from streams.core.observer import as_observer
    >>> steps_inline(as_observer(print))
    False
    """
    return observer.take_now is not None


class _Calling:
    """A plain callable, called as ``streams.core.observer.lift`` calls it: an awaitable it
    returns has not started, so the task may await it. (One slotted object per consumer,
    where a closure was three.)"""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, batch: EventBatch) -> Awaitable[object] | None:
        result = self.fn(batch)
        return result if result is not None and inspect.isawaitable(result) else None


def _calling(fn: Callable[..., Any]) -> Callable[[EventBatch], Awaitable[object] | None]:
    return _Calling(fn)


class _Completing:
    """A coroutine function marked :func:`streams.inline`, run to its end where it is called."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, batch: EventBatch) -> None:
        # Iterating the coroutine runs its body to the end; a marked callback yields nothing.
        # (Cheaper than send(None), which ends by raising StopIteration.)
        fn = self.fn
        coroutine = fn(batch)
        for _ in coroutine.__await__():
            coroutine.close()
            raise RuntimeError(
                f"{getattr(fn, '__qualname__', fn)} is marked @inline but awaited: "
                "remove the await, or the @inline mark so that its own task calls it"
            )


def _completing(fn: Callable[..., Any]) -> Callable[[EventBatch], None]:
    return _Completing(fn)
