"""The per-event path: steps 1-6 of the contract over one input's events, in arrival order.

Each event: its time and key are read (``timestamp_by``, ``over``/``group_by``); with
substreams its lane is loaded and lifted to the partition's floor; an event that breaks a
tolerance goes to the ordering step (:mod:`streams.eventtime.ordering`); it is added to the
pane of every open window containing its timestamp (or dead-lettered as ``window_closed``);
then the watermark moves, and the windows it passes close (:mod:`streams.eventtime.flow`).

This is the processor's hot path. The common case (an event in order, into an open pane)
runs inline with everything it reads in locals; the named steps are called only for what
is rare per event (a violation, a new lane or pane, a watermark that closes something).

A batch whose events the runtime keeps as columns is taken in runs when the consumer's
shape allows (:mod:`streams.eventtime.runs`), with this way for the events it cannot take.
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
from streams.eventtime.parts import Input
from streams.eventtime.policy import EARLIEST_US, LATEST_US, EventLike, Reason, time_problem
from streams.eventtime.results import DEAD_LETTER, DROPPED, KEPT, EventOutcome, Output, WatermarkAdvance
from streams.eventtime.runs import take_in_runs
from streams.eventtime.sessions import OPENED, REFUSED, SessionStore
from streams.eventtime.sliding import SlidingStore
from streams.eventtime.watermark import FOREVER, NEVER, Watermark
from streams.eventtime.windows import WindowStore

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

    __slots__ = ("ordering", "refusals", "timestamp_of", "key_of", "key_field", "select", "in_runs")

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
        if self.in_runs and not inp.imported and hasattr(events, "columns"):
            take_in_runs(self, flow, inp, events, out, sampler)
            return
        if not isinstance(events, Sequence):
            events = list(events)
        refusals, counters = self.refusals, flow.counters
        # Everything the loop reads is a local: attribute traffic dominates a Python loop.
        early, late, delay = self.ordering.early, self.ordering.late, flow.shape.delay
        earliest, latest = EARLIEST_US, LATEST_US
        per_second = PER_SECOND  # every time below is integer microseconds, converted once here
        bounded = early < FOREVER or late < FOREVER  # steps 1 and 2 apply at all
        uses_late = late < FOREVER
        judge, forget = self.ordering.judge, self.ordering.forget
        refuse, no_time = refusals.refuse, Reason.INVALID_TIMESTAMP
        ts_of, key_of, key_field = self.timestamp_of, self.key_of, self.key_field
        user_ts = getattr(ts_of, "user_code", False)  # the user's timestamp_by: keep its traceback
        if key_field is not None:
            # key_of is key_field's field getter: the fallback when the inline read fails.
            assert key_of is not None
            field_key_of = key_of
        substreams = flow.shape.substreams
        a = flow.shape.assigner
        fixed = a is not None
        windowed = (
            fixed
            or flow.shape.session is not None
            or flow.shape.join is not None
            or flow.shape.counted is not None
            or flow.shape.sliding is not None
        )
        if a is not None:
            step, origin, gaps, size = a.step, a.origin, a.gaps, a.size
            pane_closed = a.pane_closed
        updating = flow.shape.every is not None  # emit=Every: each event counts towards updates
        # The arrival of the event whose step made an update due (Every(events=N)), else
        # None. Its updates go out where the next event begins (or after the last): nothing
        # happens in between, and emit="final" windows pay no test at the end of each step.
        updates_at: int | None = None
        reducer = flow.shape.reducer
        counting, select = type(reducer) is Count, self.select
        add, init = reducer.add, reducer.init
        trace = flow.shape.trace
        dedup = flow.dedup
        passthrough = not windowed
        record = trace or passthrough
        idle = flow.shape.idle_timeout < FOREVER
        every_event = flow.shape.generation.every_event and not inp.imported
        multi, part = flow.shape.multi, inp.name
        direct = not multi  # a single input closes its windows by its own watermark
        lanes = flow.lanes
        # With substreams and L set, every arrival lifts the partition's floor (inp.mark) to
        # arrival - L; a substream below it is lifted when it is next loaded, or when the
        # floor reaches a window's close time (inp.floor_close): quiet keys close on time.
        floor_mark: Watermark = inp  # an input is its own watermark (its mark)
        lifting = substreams and uses_late
        clock, idle_check = inp.clock, inp.idle_check
        key: Hashable = None
        # The current lane (the input's, or the event's substream): its watermark ``w``, newest
        # timestamp and next close live in locals while the loop runs. Before a helper that
        # reads or moves them is called they are parked in the objects, and loaded again
        # after. With a single input the store's closing watermark is ``w`` itself.
        mark, store = floor_mark, flow.store
        w, newest = mark.value, mark.max_timestamp
        # Without fixed windows ``panes`` is never read; with sessions ``sessions`` is the
        # lane's store (else None), so each kind of store has its typed local.
        panes: dict[int, dict[Hashable, list[Any]]] = store.panes if isinstance(store, WindowStore) else {}
        sessions = store if isinstance(store, SessionStore) else None
        joins = store if isinstance(store, JoinStore) else None  # two inputs: never a substream
        # Windows of events and sliding windows: never with fixed windows (no check per call then).
        counts = store if not fixed and isinstance(store, CountStore) else None
        slides = store if not fixed and isinstance(store, SlidingStore) else None
        next_close = store.next_close if store is not None else FOREVER
        # One event in sampler.every is sampled (lateness, disorder): the loop only asks whether
        # an event is the next one due, by identity (cheaper per event than counting down).
        n = len(events)
        marked: object = None
        if sampler is not None:
            at, every, sample = sampler.due - 1, sampler.every, sampler.record
            if at < n:
                marked = events[at]
        try:
            for rec in events:
                try:
                    arr = rec.arrival_us  # type: ignore[union-attr]  # an Event's, made once with it
                except AttributeError:  # an event-like of the caller's own: its seconds
                    arr = to_micros(rec.arrival_time)
                if arr > clock:
                    clock = arr
                if arr > idle_check:  # a timeout fell due before this event arrived, or updates
                    if updates_at is not None:  # the previous step's updates (see updates_at)
                        flow.stepped(store, updates_at, out)
                        updates_at, idle_check = None, inp.idle_check
                    if arr > idle_check:
                        mark.value, mark.max_timestamp = w, newest
                        flow.idle(inp, arr, out, strict=True)
                        w, idle_check = mark.value, inp.idle_check
                        next_close = store.next_close if store is not None else FOREVER
                et: int | None = None  # not read yet: nothing counted for this event
                # Steps 1-4 run what the event brings (its time, key and value) through user
                # code: whatever it raises dead-letters this event alone, never its batch.
                try:
                    # The event's time (TIMESTAMP BY) and key (OVER / GROUP BY).
                    if ts_of is None:
                        try:
                            t = rec.event_us  # type: ignore[union-attr]  # an Event's, made once with it
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
                            problem = _with_traceback(exc) if user_ts else str(exc)
                            refuse(counters, part, rec, None, None, no_time, DEAD_LETTER, arr, out, problem)
                            continue
                    if key_field is not None:
                        try:
                            key = rec.value[key_field]
                        except (KeyError, TypeError, IndexError):  # not a mapping, or no such key
                            key = field_key_of(rec)
                    elif key_of is not None:
                        key = key_of(rec)
                    # The substream floor: load the event's lane, lifted to the partition's floor.
                    if substreams:
                        lane = lanes.get(key) or flow.new_lane(inp, key)
                        if lane[0] is not mark:  # park the previous substream, load this one
                            mark.value, mark.max_timestamp = w, newest
                            if store is not None:
                                store.watermark = w
                            mark, store = lane
                            w, newest = mark.value, mark.max_timestamp
                            if w < floor_mark.value:  # the arrivals since its last event lifted it
                                w = mark.value = floor_mark.value
                            if isinstance(store, WindowStore):
                                panes, next_close = store.panes, store.next_close
                            elif isinstance(store, SessionStore):
                                sessions, next_close = store, store.next_close
                            elif isinstance(store, CountStore):
                                counts = store
                            elif isinstance(store, SlidingStore):
                                slides, next_close = store, store.next_close
                    if rec is marked:  # lateness and disorder, before the policy touches the event
                        at += every
                        marked = events[at] if at < n else None
                        sample(arr / per_second, t / per_second, newest / per_second, key if substreams else None)
                    et = t
                    ts, status, reason = t, KEPT, None
                    # 1-3. the ordering policy, for an event that breaks a tolerance
                    if t < w or (bounded and (t - arr > early or arr - t > late)):
                        verdict = judge(counters, part, rec, key, t, arr, w, out)
                        if verdict is None:  # dropped
                            continue
                        ts, status, reason = verdict
                    # 3b. dedup, past the ordering policy: a dropped event registers no key
                    if dedup is not None:
                        try:
                            duplicate = dedup.seen(key if substreams else None, rec, ts, w)
                        except Exception as exc:  # noqa: BLE001 - the user's dedup key raised
                            forget(counters, t, arr, status, reason)
                            refusals.invalid(counters, part, rec, key, t, arr, exc, out, what="the dedup key")
                            continue
                        if duplicate is not None:
                            forget(counters, t, arr, status, reason)  # one fate: dropped, not adjusted
                            refuse(
                                counters,
                                part,
                                rec,
                                key,
                                t,
                                Reason.DUPLICATE,
                                DROPPED,
                                arr,
                                out,
                                _repeat(duplicate, dedup),
                            )
                            continue
                    # 4. into the open windows containing the timestamp
                    if fixed:  # panes of tumbling or hopping windows: the lane's store is a WindowStore
                        offset = ts - origin
                        pane = offset // step
                        if gaps and offset - pane * step >= size:
                            pass  # between two hopping windows: in no window, by definition
                        elif ts < w and pane_closed(pane, w if direct or store is None else store.watermark):
                            status = DEAD_LETTER
                            refuse(counters, part, rec, key, t, Reason.WINDOW_CLOSED, DEAD_LETTER, arr, out, ts=ts)
                        else:
                            bucket = panes.get(pane)
                            if bucket is None:
                                assert store is not None  # fixed windows: every lane has its store
                                if direct:
                                    store.watermark = w  # scheduling skips windows closed at w
                                bucket = flow.open_pane(inp, store, pane)
                                next_close, idle_check = store.next_close, inp.idle_check
                            state = bucket.get(key)
                            if state is None:
                                acc = 1 if counting else add(init(), select(rec))
                                if acc is None:  # the commonest slip in a reducer: no return
                                    raise TypeError(_NO_ACCUMULATOR)
                                bucket[key] = [acc, {part: rec.token} if multi else rec.token]
                            else:
                                if counting:
                                    state[0] += 1
                                else:
                                    acc = add(state[0], select(rec))
                                    if acc is None:  # kept as it was: the event is refused
                                        raise TypeError(_NO_ACCUMULATOR)
                                    state[0] = acc
                                if multi and part not in state[1]:
                                    state[1][part] = rec.token
                            if updating and flow.touched(
                                store, pane, key, arr, w if direct or store is None else store.watermark
                            ):
                                updates_at, idle_check = arr, NEVER  # the next event's first test sends them
                    elif sessions is not None:  # merge into the key's sessions (or open one)
                        joined = sessions.add(
                            key,
                            ts,
                            None if counting else select(rec),
                            rec,
                            w=w if direct else sessions.watermark,
                            part=part if multi else None,
                        )
                        if joined == REFUSED:
                            status = DEAD_LETTER
                            refuse(counters, part, rec, key, t, Reason.WINDOW_CLOSED, DEAD_LETTER, arr, out, ts=ts)
                        elif joined == OPENED:
                            flow.scheduled(inp, sessions)
                            idle_check = inp.idle_check
                        next_close = sessions.next_close
                    elif joins is not None:  # an interval join: its pairs wait for the merged watermark
                        outcome = EventOutcome(
                            rec, part, key, t / per_second, ts / per_second, status, reason and reason.value
                        )
                        if not joins.add(part, key, outcome, ts=ts, w=joins.watermark):
                            status = DEAD_LETTER
                            refuse(
                                counters,
                                part,
                                rec,
                                key,
                                t,
                                Reason.WINDOW_CLOSED,
                                DEAD_LETTER,
                                arr,
                                out,
                                f"timestamp {to_seconds(ts):g} is below the merged watermark "
                                f"{to_seconds(joins.watermark):g} by more "
                                "than the join's allowed lateness: its pairs may be final already",
                                ts=ts,
                            )
                        elif joins.watermark > joins.next_close:  # a left event already due (upper < 0)
                            flow.close([joins], arr, out)  # before step 5: earlier than any it makes due
                    elif counts is not None:  # a window of events: one its event completes is emitted now
                        done = counts.add(key, ts, None if counting else select(rec), rec.token, arr)
                        if done:
                            flow.emit(done, out)
                    elif slides is not None:  # the open sliding windows containing it, and those it creates
                        value = None if counting else select(rec)
                        if slides.add(key, ts, value, rec.token, w=w if direct else slides.watermark):
                            flow.scheduled(inp, slides)
                        else:
                            status = DEAD_LETTER
                            refuse(counters, part, rec, key, t, Reason.WINDOW_CLOSED, DEAD_LETTER, arr, out, ts=ts)
                        next_close = slides.next_close
                except Exception as exc:  # noqa: BLE001 - a key or aggregate of this event raised
                    if et is None:  # its time or key raised: neither is this event's
                        refusals.invalid(counters, part, rec, None, None, arr, exc, out)
                    else:
                        forget(counters, et, arr, status, reason)
                        refusals.invalid(counters, part, rec, key, et, arr, exc, out)
                    continue
                if record and status != DEAD_LETTER:
                    outcome = EventOutcome(
                        rec, part, key, t / per_second, ts / per_second, status, reason and reason.value
                    )
                    if passthrough:
                        out.events.append(outcome)
                    if trace:
                        out.trace.append(outcome)
                # 5. the watermark
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
                if lifting and arr - late > floor_mark.value:  # every substream, this first
                    floor_mark.value = arr - late
                    if trace:
                        out.trace.append(WatermarkAdvance(arr / per_second, part, None, (arr - late) / per_second))
                    if arr - late >= inp.floor_close:
                        mark.value, mark.max_timestamp = w, newest
                        if store is not None:
                            store.watermark = w
                        flow.lift_lanes(inp, arr - late, arr, out)
                        w = mark.value
                        next_close = store.next_close if store is not None else FOREVER
                if uses_late and arr - late > cand:
                    cand = arr - late
                if cand > w:
                    if direct:
                        w = cand
                        if trace:
                            out.trace.append(
                                WatermarkAdvance(arr / per_second, part, key if substreams else None, w / per_second)
                            )
                        # 6. close what it passed
                        if w >= next_close and store is not None:
                            mark.value, mark.max_timestamp, store.watermark = w, newest, w
                            flow.close([store], arr, out)
                            next_close = store.next_close
                    else:
                        mark.max_timestamp = newest
                        flow.advance(inp, None, mark, cand, arr, out)
                        flow.close_pending(arr, out)
                        w = mark.value
                        next_close = store.next_close if store is not None else FOREVER
            if updates_at is not None:  # the last step's updates
                flow.stepped(store, updates_at, out)
        finally:
            mark.value, mark.max_timestamp = w, newest
            if direct and store is not None:
                store.watermark = w
            inp.clock = clock
            if sampler is not None:  # due in the next batch (its first, if this one's was refused)
                sampler.due = at - n + 1 if at >= n else 1
        counters.events += n


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
