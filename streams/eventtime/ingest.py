"""The per-event path: steps 1-6 of the contract over one input's events, in arrival order.

Each event: its time and key are read (``timestamp_by``, ``over``/``group_by``); with
substreams its lane is loaded and lifted to the partition's floor; an event that breaks a
tolerance goes to the ordering step (:mod:`streams.eventtime.ordering`); it is added to the
pane of every open window containing its timestamp (or dead-lettered as ``window_closed``);
then the watermark moves, and the windows it passes close (:mod:`streams.eventtime.flow`).

This is the processor's hot path. The common case (an event in order, into an open pane)
runs inline with everything it reads in locals; the named steps are called only for what
is rare per event (a violation, a new lane or pane, a watermark that closes something).

A batch whose events the runtime keeps as columns is taken in runs instead when the
consumer's shape allows (``in_runs``; the processor chooses the way:
:mod:`streams.eventtime.runs`), with this way for the events the runs cannot take.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from streams.core.errors import StreamCompletedError
from streams.core.micros import PER_SECOND, event_micros, to_micros, to_seconds
from streams.eventtime.aggregates import Count
from streams.eventtime.counted import CountStore
from streams.eventtime.dedup import Deduplication
from streams.eventtime.flow import WatermarkFlow
from streams.eventtime.joins import JoinStore
from streams.eventtime.lateness import LatenessSketch
from streams.eventtime.ordering import OrderingStep, Refusals
from streams.eventtime.parts import Input, Store
from streams.eventtime.policy import EARLIEST_US, LATEST_US, EventLike, Reason, time_problem
from streams.eventtime.results import DEAD_LETTER, DROPPED, KEPT, EventOutcome, Output, WatermarkAdvance
from streams.eventtime.runs import NO_SAMPLES, Samples
from streams.eventtime.sessions import OPENED, REFUSED, SessionStore
from streams.eventtime.sliding import SlidingStore
from streams.eventtime.watermark import FOREVER, NEVER, Watermark
from streams.eventtime.windows import WindowAssigner, WindowStore

_record_value = attrgetter("value")

# An aggregate's add that returns None lost the accumulator (a forgotten ``return``): the
# event is dead-lettered invalid_value, and the window keeps what it had.
_NO_ACCUMULATOR = "the aggregate's add returned None, not the new accumulator (is a return missing?)"


class Ingest:
    """Runs events of one input through steps 1-6 (:meth:`run`).

    ``timestamp_of`` None reads the events' own ``event_time``; ``key_field`` (a field name
    of the value) is read inline, ``key_of`` is its fallback or the key function.

    One per declaration (:class:`~streams.eventtime.parts.ProcessorParts`), shared by its
    processors: each :meth:`run` is given the processor's own flow (its state and counters)
    and sampler, so that a stream's activation holds no Ingest, ordering step or refusals of
    its own (272 bytes an activation would otherwise hold).
    """

    __slots__ = (
        "ordering",
        "refusals",
        "timestamp_of",
        "key_of",
        "key_field",
        "select",
        "in_runs",
        "panes",
        "windowed",
    )

    def __init__(
        self,
        flow: WatermarkFlow,
        ordering: OrderingStep,
        refusals: Refusals,
        *,
        timestamp_of: Callable[[Any], int] | None,
        key_of: Callable[[Any], Hashable] | None,
        key_field: str | None,
        select: Callable[[Any], Any] | None,
    ) -> None:
        """``flow``: the first processor's, for its shape (the same in every processor of
        the declaration); it is not kept."""
        self.ordering, self.refusals = ordering, refusals
        self.timestamp_of, self.key_of, self.key_field = timestamp_of, key_of, key_field
        self.select = select or _record_value
        a = flow.shape.assigner
        # What every batch reads of the shape, worked out once: a call per batch on the way
        # of one event per call costs as much as the event.
        self.panes, self.windowed = _pane_rule(a), _windowed(flow)
        # The shapes whose in-order events can be counted a run at a time (_in_order).
        self.in_runs = (
            a is not None
            and not a.gaps
            and not flow.shape.multi
            and not flow.shape.substreams
            and not flow.shape.trace
            and flow.shape.idle_timeout == FOREVER
            and flow.dedup is None
            and flow.shape.every is None
            and flow.shape.generation.every_event
            and ordering.early == FOREVER
            and ordering.late == FOREVER
            and key_of is None
            and key_field is None
            and type(flow.shape.reducer) is Count
            and (timestamp_of is None or hasattr(timestamp_of, "field"))
        )

    def run(
        self,
        flow: WatermarkFlow,
        inp: Input,
        events: Iterable[EventLike],
        out: Output,
        sampler: LatenessSketch | None = None,
    ) -> None:
        """Steps 1-6 for ``events`` of input ``inp`` of the processor whose flow is ``flow``,
        sampling lateness and disorder into ``sampler`` (None: none)."""
        if inp.completed:
            raise StreamCompletedError(
                f"input {inp.name!r} has completed (on_completed or flush); it takes no more events"
            )
        if not isinstance(events, Sequence):
            events = list(events)
        self._take_in(flow, inp, events, out, NO_SAMPLES if sampler is None else Samples(sampler, len(events)))
        flow.counters.events += len(events)

    def _take_in(  # noqa: C901, PLR0912, PLR0915 - the one per-event loop: see docs/architecture.md
        self, flow: WatermarkFlow, inp: Input, events: Sequence[EventLike], out: Output, samples: Samples
    ) -> None:
        """Steps 1-6, event by event. The common case (an event in order, into an open pane)
        runs inline with everything it reads in locals (attribute traffic dominates a Python
        loop); each step is called out for what is rare per event: a violation, a new lane,
        pane or key, another kind of window, a watermark that closes something."""
        refusals, counters, shape = self.refusals, flow.counters, flow.shape
        early, late, delay, uses_late = (
            self.ordering.early,
            self.ordering.late,
            shape.delay,
            self.ordering.late < FOREVER,
        )
        earliest, latest, bounded = EARLIEST_US, LATEST_US, early < FOREVER or uses_late  # steps 1 and 2 apply
        judge, refuse, no_time = self.ordering.judge, refusals.refuse, Reason.INVALID_TIMESTAMP
        ts_of, key_of, key_field = self.timestamp_of, self.key_of, self.key_field
        substreams, multi, part, updating = shape.substreams, shape.multi, inp.name, shape.every is not None
        a = shape.assigner
        step, origin, gaps, size, pane_closed = self.panes
        counting, select, add, init = type(shape.reducer) is Count, self.select, shape.reducer.add, shape.reducer.init
        trace, dedup, direct = shape.trace, flow.dedup, not multi  # one input closes by its own watermark
        passthrough = not self.windowed
        record, count_inline = trace or passthrough, counting and not multi
        idle, every_event = shape.idle_timeout < FOREVER, shape.generation.every_event and inp.generating is not None
        # With substreams and L set, every arrival lifts the partition's floor (inp.mark) to
        # arrival - L; a substream below it is lifted when it is next loaded, or when the
        # floor reaches a window's close time (inp.floor_close): quiet keys close on time.
        lifting, lanes = substreams and uses_late, flow.lanes
        clock, idle_check = inp.clock, inp.idle_check
        # The arrival of the event whose step made an update due (Every(events=N)), else None:
        # its updates go out where the next event begins (_catch_up), or after the last.
        updates_at: int | None = None
        # The current lane (the input's, or the event's substream): its watermark ``w``, newest
        # timestamp and next close live in locals while the loop runs; parked in the objects
        # before a step that reads or moves them, and loaded again after. With a single input
        # the store's closing watermark is ``w`` itself. ``panes``: a WindowStore's, else {}.
        mark: Watermark = inp
        store, key = flow.store, None
        w, newest, (panes, next_close) = mark.value, mark.max_timestamp, _opened(store)
        marked = samples.first(events)
        try:
            for rec in events:
                try:
                    arr = rec.arrival_us  # type: ignore[attr-defined]  # an Event's, made once with it
                except AttributeError:  # an event-like of the caller's own: its seconds
                    arr = to_micros(rec.arrival_time)
                if arr > clock:
                    clock = arr
                if arr > idle_check:  # a timeout fell due before this event arrived, or updates
                    mark.value, mark.max_timestamp = w, newest
                    _catch_up(flow, inp, store, updates_at, arr, out)
                    updates_at, w, idle_check, next_close = None, mark.value, inp.idle_check, _next_close(store)
                et: int | None = None  # not read yet: nothing counted for this event
                status, reason = KEPT, None
                # Steps 1-4 run what the event brings (its time, key and value) through user
                # code: whatever it raises dead-letters this event alone, never its batch.
                try:
                    # Taking in: the event's time (TIMESTAMP BY) and key (OVER / GROUP BY).
                    if ts_of is None:
                        try:
                            t = rec.event_us  # type: ignore[attr-defined]  # an Event's, made once with it
                        except AttributeError:  # an event-like of the caller's own: its seconds
                            t = event_micros(rec.event_time)
                        if not (earliest <= t < latest):  # also NaN; a handoff holds years 1-9999
                            problem = time_problem(rec.event_time)
                            refuse(counters, part, rec, None, None, no_time, DEAD_LETTER, arr, out, problem)
                            continue
                    else:
                        try:
                            t = ts_of(rec)
                        except Exception as exc:  # a user's timestamp_by may raise anything
                            refuse(counters, part, rec, None, None, no_time, DEAD_LETTER, arr, out, self._raised(exc))
                            continue
                    if key_field is not None:
                        try:
                            key = rec.value[key_field]
                        except (KeyError, TypeError, IndexError):  # not a mapping, or no such key
                            key = key_of(rec)  # type: ignore[misc]  # key_field's getter: its fallback
                    elif key_of is not None:
                        key = key_of(rec)
                    if substreams:  # the event's lane, lifted to the partition's floor
                        lane = lanes.get(key) or flow.new_lane(inp, key)
                        if lane[0] is not mark:
                            mark.value, mark.max_timestamp = w, newest  # inline: a new lane most events
                            if store is not None:
                                store.watermark = w
                            mark, store = lane
                            w, newest = mark.value, mark.max_timestamp
                            if w < inp.value:  # the arrivals since its last event lifted it
                                w = mark.value = inp.value
                            if store is not None:
                                next_close = store.next_close
                                if isinstance(store, WindowStore):
                                    panes = store.panes
                    if rec is marked:  # lateness and disorder, before the policy touches the event
                        marked = samples.take(events, arr, t, newest, key if substreams else None)
                    et = ts = t
                    # Ordering (steps 1-3), for an event that breaks a tolerance.
                    if t < w or (bounded and (t - arr > early or arr - t > late)):
                        verdict = judge(counters, part, rec, key, t, arr, w, out)
                        if verdict is None:  # dropped
                            continue
                        ts, status, reason = verdict
                    # Dedup, past the ordering policy: a dropped event registers no key.
                    if dedup is not None and self._duplicate(flow, inp, rec, key, t, ts, w, arr, status, reason, out):
                        continue
                    # Into the windows (step 4): panes of tumbling or hopping windows inline.
                    if a is not None:
                        offset = ts - origin
                        pane = offset // step
                        if gaps and offset - pane * step >= size:
                            pass  # between two hopping windows: in no window, by definition
                        elif ts < w and pane_closed(pane, w if direct else store.watermark):  # type: ignore[union-attr]
                            status = DEAD_LETTER
                            refuse(counters, part, rec, key, t, Reason.WINDOW_CLOSED, DEAD_LETTER, arr, out, ts=ts)
                        else:
                            bucket = panes.get(pane)
                            if bucket is None:
                                bucket, next_close, idle_check = _open_pane(flow, inp, store, pane, w, direct)
                            state = bucket.get(key)
                            if state is not None and count_inline:
                                state[0] += 1
                            else:
                                _add(bucket, state, key, rec, (add, init, select), counting, multi, part)
                            if updating and flow.touched(
                                store,
                                pane,
                                key,
                                arr,
                                w if direct else store.watermark,  # type: ignore[union-attr]
                            ):
                                updates_at, idle_check = arr, NEVER  # the next event's first test sends them
                    elif store is not None:  # sessions, a join, windows of events, sliding windows
                        status = self._into_store(flow, inp, store, rec, key, t, ts, status, reason, w, arr, out)
                        next_close, idle_check = store.next_close, inp.idle_check
                except Exception as exc:  # noqa: BLE001 - a key or aggregate of this event raised
                    self._raised_on(flow, inp, rec, key, et, arr, status, reason, exc, out)
                    continue
                if record and status != DEAD_LETTER:
                    outcome = EventOutcome(
                        rec, part, key, t / PER_SECOND, ts / PER_SECOND, status, reason and reason.value
                    )
                    if passthrough:
                        out.events.append(outcome)
                    if trace:
                        out.trace.append(outcome)
                # The watermark advance (step 5).
                if idle:
                    mark.last_ingest = arr
                if every_event:  # Watermark.observe for generation every event, inlined
                    if ts > newest:
                        newest = ts
                        cand = ts - delay
                    else:
                        cand = NEVER
                else:
                    mark.max_timestamp = newest
                    cand = mark.observe(ts)
                    newest = mark.max_timestamp
                if lifting and arr - late > inp.value:  # every substream, this first
                    _park(mark, store, w, newest)
                    _lift_floor(flow, inp, arr - late, arr, out)
                    w, next_close = mark.value, _next_close(store)
                if uses_late and arr - late > cand:
                    cand = arr - late
                if cand > w:
                    if not direct:  # several inputs: the merged watermark closes
                        mark.max_timestamp = newest
                        w, next_close = _advance_merged(flow, inp, mark, store, cand, arr, out)
                        continue
                    w = cand
                    if trace:
                        out.trace.append(
                            WatermarkAdvance(arr / PER_SECOND, part, key if substreams else None, w / PER_SECOND)
                        )
                    if w >= next_close and store is not None:  # closing what it passed (step 6)
                        mark.value, mark.max_timestamp, store.watermark = w, newest, w
                        flow.close([store], arr, out)
                        next_close = store.next_close
            if updates_at is not None:  # the last step's updates
                flow.stepped(store, updates_at, out)
        finally:
            mark.value, mark.max_timestamp = w, newest
            if direct and store is not None:
                store.watermark = w
            inp.clock = clock
            samples.done()

    def _raised(self, exc: Exception) -> str:
        """A refusal's detail when the timestamp reader raised: with its traceback when it
        is the user's own function."""
        return _with_traceback(exc) if getattr(self.timestamp_of, "user_code", False) else str(exc)

    def _raised_on(
        self,
        flow: WatermarkFlow,
        inp: Input,
        rec: EventLike,
        key: Hashable,
        et: int | None,
        arr: int,
        status: str,
        reason: Reason | None,
        exc: Exception,
        out: Output,
    ) -> None:
        """Dead-letter an event whose key or aggregate raised (``et`` None: its time or
        key, neither of which is then the event's), undoing what the ordering counted."""
        counters = flow.counters
        if et is None:
            self.refusals.invalid(counters, inp.name, rec, None, None, arr, exc, out)
            return
        self.ordering.forget(counters, et, arr, status, reason)
        self.refusals.invalid(counters, inp.name, rec, key, et, arr, exc, out)

    def _duplicate(
        self,
        flow: WatermarkFlow,
        inp: Input,
        rec: EventLike,
        key: Hashable,
        t: int,
        ts: int,
        w: float,
        arr: int,
        status: str,
        reason: Reason | None,
        out: Output,
    ) -> bool:
        """Dedup: True when the event's dedup key was seen within the horizon (it is then
        dropped, lettered ``duplicate``) or raised (dead-lettered)."""
        dedup, counters, part = flow.dedup, flow.counters, inp.name
        assert dedup is not None
        try:
            duplicate = dedup.seen(key if flow.shape.substreams else None, rec, ts, w)
        except Exception as exc:  # noqa: BLE001 - the user's dedup key raised
            self.ordering.forget(counters, t, arr, status, reason)
            self.refusals.invalid(counters, part, rec, key, t, arr, exc, out, what="the dedup key")
            return True
        if duplicate is None:
            return False
        self.ordering.forget(counters, t, arr, status, reason)  # one fate: dropped, not adjusted
        detail = _repeat(duplicate, dedup)
        self.refusals.refuse(counters, part, rec, key, t, Reason.DUPLICATE, DROPPED, arr, out, detail)
        return True

    def _into_store(
        self,
        flow: WatermarkFlow,
        inp: Input,
        store: Store,
        rec: EventLike,
        key: Hashable,
        t: int,
        ts: int,
        status: str,
        reason: Reason | None,
        w: float,
        arr: int,
        out: Output,
    ) -> str:
        """Step 4 for windows other than fixed panes: the event's status after (``window_closed``
        when every window it belongs to has closed)."""
        multi = flow.shape.multi
        closing = store.watermark if multi else w
        detail = ""
        if isinstance(store, SessionStore):  # merge into the key's sessions (or open one)
            joined = store.add(key, ts, self._value(flow, rec), rec, w=closing, part=inp.name if multi else None)
            if joined == OPENED:
                flow.scheduled(inp, store)
            kept = joined != REFUSED
        elif isinstance(store, JoinStore):  # an interval join: its pairs wait for the merged watermark
            outcome = EventOutcome(rec, inp.name, key, t / PER_SECOND, ts / PER_SECOND, status, reason and reason.value)
            kept = store.add(inp.name, key, outcome, ts=ts, w=store.watermark)
            if kept and store.watermark > store.next_close:  # a left event already due (upper < 0)
                flow.close([store], arr, out)  # before step 5: earlier than any it makes due
            detail = "" if kept else _join_late(ts, store.watermark)
        elif isinstance(store, CountStore):  # a window of events: one its event completes is emitted now
            done = store.add(key, ts, self._value(flow, rec), rec.token, arr)
            if done:
                flow.emit(done, out)
            kept = True
        else:  # sliding: the open windows containing it, and those it creates
            assert isinstance(store, SlidingStore)  # fixed panes are the loop's
            kept = store.add(key, ts, self._value(flow, rec), rec.token, w=closing)
            if kept:
                flow.scheduled(inp, store)
        if kept:
            return status
        self.refusals.refuse(
            flow.counters, inp.name, rec, key, t, Reason.WINDOW_CLOSED, DEAD_LETTER, arr, out, detail, ts=ts
        )
        return DEAD_LETTER

    def _value(self, flow: WatermarkFlow, rec: EventLike) -> Any:
        """What the aggregate adds of ``rec`` (None for a count: it reads nothing)."""
        return None if type(flow.shape.reducer) is Count else self.select(rec)


def _pane_rule(a: WindowAssigner | None) -> tuple[int, int, bool, int, Callable[[int, float], bool]]:
    """What step 4 reads of fixed windows: step, origin, gaps, size and the closed test."""
    if a is None:
        return 1, 0, False, 0, _never_closed
    return a.step, a.origin, a.gaps, a.size, a.pane_closed


def _never_closed(pane: int, w: float) -> bool:
    return False


def _windowed(flow: WatermarkFlow) -> bool:
    """Whether events go into windows (else they pass through as outcomes)."""
    shape = flow.shape
    return any(part is not None for part in (shape.assigner, shape.session, shape.join, shape.counted, shape.sliding))


def _opened(store: Store | None) -> tuple[dict[int, dict[Hashable, list[Any]]], float]:
    """A lane's panes (a WindowStore's; else empty: never read) and its next close."""
    if store is None:
        return {}, FOREVER
    return (store.panes if isinstance(store, WindowStore) else {}), store.next_close


def _next_close(store: Store | None) -> float:
    return FOREVER if store is None else store.next_close


def _park(mark: Watermark, store: Store | None, w: float, newest: float) -> None:
    """A lane's watermark and newest time, from the loop's locals into its objects."""
    mark.value, mark.max_timestamp = w, newest
    if store is not None:
        store.watermark = w


def _catch_up(
    flow: WatermarkFlow, inp: Input, store: Store | None, updates_at: int | None, arr: int, out: Output
) -> None:
    """Before an event arriving at ``arr``: the previous step's updates (emit=Every), then
    the idle timeouts that fell due before it."""
    if updates_at is not None:
        flow.stepped(store, updates_at, out)
    if arr > inp.idle_check:
        flow.idle(inp, arr, out, strict=True)


def _open_pane(
    flow: WatermarkFlow, inp: Input, store: Store | None, pane: int, w: float, direct: bool
) -> tuple[dict[Hashable, list[Any]], float, float]:
    """A new pane of the lane's store: it, the store's next close and the input's idle check."""
    assert store is not None  # fixed windows: every lane has its store
    if direct:
        store.watermark = w  # scheduling skips windows closed at w
    bucket = flow.open_pane(inp, store, pane)
    return bucket, store.next_close, inp.idle_check


def _add(
    bucket: dict[Hashable, list[Any]],
    state: list[Any] | None,
    key: Hashable,
    rec: EventLike,
    reducer: tuple[Callable[[Any, Any], Any], Callable[[], Any], Callable[[Any], Any]],
    counting: bool,
    multi: bool,
    part: Hashable,
) -> None:
    """Step 4 into one pane for ``key``: a new state (``state`` None), or the aggregate's
    add (``reducer``: its add, init and select); with several inputs (``multi``), each
    input's first token is kept."""
    add, init, select = reducer
    if state is None:
        acc = 1 if counting else add(init(), select(rec))
        if acc is None:  # the commonest slip in a reducer: no return
            raise TypeError(_NO_ACCUMULATOR)
        bucket[key] = [acc, {part: rec.token} if multi else rec.token]
        return
    if counting:
        state[0] += 1
    else:
        acc = add(state[0], select(rec))
        if acc is None:  # kept as it was: the event is refused
            raise TypeError(_NO_ACCUMULATOR)
        state[0] = acc
    if multi and part not in state[1]:
        state[1][part] = rec.token


def _lift_floor(flow: WatermarkFlow, inp: Input, floor: int, arr: int, out: Output) -> None:
    """With substreams and L set: the partition's floor rises to ``arrival - L``, and every
    substream with it once that reaches a window's close time."""
    inp.value = floor
    if flow.shape.trace:
        out.trace.append(WatermarkAdvance(arr / PER_SECOND, inp.name, None, floor / PER_SECOND))
    if floor >= inp.floor_close:
        flow.lift_lanes(inp, floor, arr, out)


def _advance_merged(
    flow: WatermarkFlow, inp: Input, mark: Watermark, store: Store | None, cand: float, arr: int, out: Output
) -> tuple[float, float]:
    """The watermark advance of one of several inputs, and what the merged watermark closes:
    the input's watermark and the next close after."""
    flow.advance(inp, None, mark, cand, arr, out)
    flow.close_pending(arr, out)
    return mark.value, _next_close(store)


def _join_late(ts: int, watermark: float) -> str:
    return (
        f"timestamp {to_seconds(ts):g} is below the merged watermark {to_seconds(watermark):g} by more "
        "than the join's allowed lateness: its pairs may be final already"
    )


def _repeat(duplicate: tuple[Hashable, float], dedup: Deduplication) -> str:
    """A duplicate's letter detail: its key, and the horizon it fell within (in seconds)."""
    key, first = duplicate
    until = to_seconds(first + dedup.within)
    return (
        f"dedup key {key!r} first seen at {to_seconds(first):g}, within {dedup.spec.within:g} s "
        f"(until the watermark reaches {until:g})"
    )


def _with_traceback(exc: BaseException) -> str:
    """A refusal's detail when the user's code raised: the error, then where."""
    trace = "".join(traceback.format_exception(exc)).rstrip()
    return f"timestamp_by raised {type(exc).__name__}: {exc}\n{trace}"
