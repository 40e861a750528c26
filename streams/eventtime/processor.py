"""The event-time processor: the contract's per-event steps, ticks, punctuation and flush.

Pure and synchronous: no I/O, no asyncio, no wall clock. The processing clock is the
arrival time of what it is given (events, ticks, punctuation), so the same observations
always give the same outputs, however they are split into calls (ASA's repeatability).

Per event (``docs/event-time.md``; W is the event's substream or partition watermark):
1. early arrival → dropped; 2. late arrival → adjust/drop/accept; 3. out of order
(timestamp < W) → adjust/drop/accept; 4. into every open window containing the timestamp,
else a ``window_closed`` dead letter; 5. W := max(W, newest timestamp - out_of_order,
arrival - late_arrival); 6. close every window with W >= end + allowed_lateness.
"""

from __future__ import annotations

import copy
import traceback
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from streams.core.deadletters import DeadLetter
from streams.core.errors import ConfigurationError, StreamCompletedError
from streams.eventtime.aggregates import Count, Reducer
from streams.eventtime.metrics import Counters, EventTimeMetrics
from streams.eventtime.policy import (
    EARLIEST,
    LATEST,
    Action,
    EventLike,
    Extractor,
    OrderingPolicy,
    Reason,
    key_extractor,
    time_problem,
    timestamp_extractor,
)
from streams.eventtime.watermark import EVERY_EVENT, FOREVER, NEVER, MergedWatermark, Watermark, WatermarkGeneration
from streams.eventtime.windows import WindowAssigner, WindowSpec, WindowStore

KEPT = "kept"
ADJUSTED = "adjusted"
DROPPED = "dropped"
DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What became of one event.

    ``status``: ``kept``, ``adjusted`` (timestamp moved), ``dropped`` (by the ordering policy)
    or ``dead_letter`` (every window for it had closed). ``reason`` says which rule acted; a
    ``kept`` event with a reason was accepted as is under ``action="accept"``.
    ``timestamp`` is ASA's ``System.Timestamp`` (None when dropped).
    """

    record: Any
    partition: Hashable
    key: Hashable
    event_time: float | None
    timestamp: float | None
    status: str
    reason: str | None

    def with_value(self, value: Any) -> EventOutcome:
        """This outcome carrying ``value`` instead (an enriched event): same stream,
        position and timestamp, so a handoff recognises it on a replay.

        >>> from types import SimpleNamespace as NS
        >>> e = EventOutcome(NS(value={"axles": 2}, stream_id="tolls/k"), "tolls", None, 1.0, 1.0, KEPT, None)
        >>> e.with_value({"axles": 2, "price": 7.5}).record.value, e.record.value
        ({'axles': 2, 'price': 7.5}, {'axles': 2})
        """
        record = copy.copy(self.record)
        record.value = value
        return replace(self, record=record)


@dataclass(frozen=True, slots=True)
class WindowResult:
    """One closed window of one key (``key`` None for global windows).

    ``closed_at`` is the processing clock when it closed (None when closed by :meth:`flush`);
    ``final`` is True when a +infinity watermark (flush, completion) closed it.
    """

    key: Hashable
    start: float
    end: float
    value: Any
    closed_at: float | None
    final: bool = False


@dataclass(frozen=True, slots=True)
class WatermarkAdvance:
    """A watermark moved: a partition's (``substream`` None), a substream's, or the merged
    one over several inputs (``partition`` None)."""

    arrival_time: float | None
    partition: Hashable | None
    substream: Hashable | None
    watermark: float


@dataclass(slots=True)
class Output:
    """What one call to the processor produced.

    - ``windows``: closed windows, in order of end;
    - ``dead_letters``: everything dropped or refused, each with its reason and record;
    - ``events``: without a window, the events that passed the ordering policy with their
      timestamps (the stream a non-windowed consumer sees);
    - ``watermark``: the processor's watermark after the call;
    - ``trace``: with ``trace=True``, every outcome, window and watermark step in causal order.
    """

    windows: list[WindowResult] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    events: list[EventOutcome] = field(default_factory=list)
    watermark: float = NEVER
    trace: list[EventOutcome | WindowResult | WatermarkAdvance] = field(default_factory=list)


class _Input:
    """One merged input (a partition or a stream): its clock and watermark."""

    __slots__ = ("name", "clock", "mark", "idle_check", "completed", "importers", "imported", "floor_close")

    def __init__(self, name: Hashable, generation: WatermarkGeneration | None, delay: float) -> None:
        self.name = name
        self.clock = NEVER  # processing clock: the newest arrival time seen
        # In substream mode this is the partition's floor: what every substream has passed.
        self.mark = Watermark(name, generation, delay)
        self.idle_check = FOREVER  # lower bound of the next idle timeout due
        self.completed = False
        self.importers: list[_Input] = []
        self.imported = generation is None
        # Substreams: at most the earliest close time of any substream's windows. A rise of
        # the floor (mark) below it closes nothing, so it need not visit every substream.
        self.floor_close = FOREVER


_record_value = attrgetter("value")


class Processor:
    """Applies an :class:`OrderingPolicy`, watermarks and windows to observations.

    >>> from types import SimpleNamespace as Ev
    >>> from streams.eventtime import OrderingPolicy, Tumbling
    >>> p = Processor(OrderingPolicy(out_of_order=2), Tumbling(10), group_by="k")
    >>> evs = [Ev(value={"k": "a"}, event_time=t, arrival_time=t, token=i)
    ...        for i, t in enumerate([1.0, 4.0, 3.0, 12.0, 13.0])]
    >>> [(w.key, w.start, w.end, w.value) for w in p.on_events(evs).windows]
    [('a', 0.0, 10.0, 3)]
    >>> p.held_since()
    3

    ``inputs`` names the merged inputs (partitions or streams) whose minimum watermark closes
    windows; ``imports`` maps an input to the input whose watermark it follows instead of
    generating its own. With ``policy.over`` (substreams) there is one input, and windows are
    per substream key, each closed by its own watermark.

    The runtime maps a queue's batch containers onto the calls: ``DATA`` to :meth:`on_events`,
    ``WATERMARK`` (a producer's ``advance_time``) to :meth:`advance_time`, ``COMPLETED`` to
    :meth:`on_completed`; a timer with nothing to deliver calls :meth:`on_tick`.
    """

    def __init__(
        self,
        policy: OrderingPolicy | None = None,
        window: WindowSpec | None = None,
        aggregate: Reducer[Any, Any] | None = None,
        *,
        group_by: str | Extractor | None = None,
        select: str | Extractor | None = None,
        inputs: Sequence[Hashable] = (0,),
        generation: WatermarkGeneration = EVERY_EVENT,
        imports: Mapping[Hashable, Hashable] | None = None,
        trace: bool = False,
    ) -> None:
        self.policy = policy = policy or OrderingPolicy()
        self.window = window
        self.reducer: Reducer[Any, Any] = aggregate if aggregate is not None else Count()
        self.counters = Counters()
        self._trace = trace
        self._substreams = policy.substreams
        self._timestamp_of = timestamp_extractor(policy.timestamp_by, policy.unit)
        if self._substreams and group_by is not None and group_by != policy.over:
            raise ConfigurationError(
                "with substreams (policy.over) windows are per substream key: leave group_by "
                "unset or give it the same value as over"
            )
        key_spec = policy.over if self._substreams else group_by
        self._key_of = key_extractor(key_spec)
        # A key given as a field name is read inline by the hot path.
        self._key_field = key_spec if isinstance(key_spec, str) else None
        self._select = key_extractor(select) or _record_value
        self._counting = type(self.reducer) is Count
        self._early = FOREVER if policy.early_arrival is None else float(policy.early_arrival)
        self._late = FOREVER if policy.late_arrival is None else float(policy.late_arrival)
        self._delay = float(policy.out_of_order)
        self._assigner = WindowAssigner(window) if window is not None else None
        self._idle_timeout = FOREVER if window is None or window.idle_timeout is None else float(window.idle_timeout)
        self._generation = generation

        names = list(inputs)
        if not names or len(set(names)) != len(names):
            raise ConfigurationError(f"inputs must be distinct names, at least one: {names!r}")
        if self._substreams and len(names) > 1:
            raise ConfigurationError(
                "substreams (policy.over) apply within one input: use one Processor per "
                "partition, or merge the inputs without substreams"
            )
        imports = dict(imports or {})
        self._inputs: dict[Hashable, _Input] = {
            name: _Input(name, None if name in imports else generation, self._delay) for name in names
        }
        for follower, source in imports.items():
            if follower not in self._inputs or source not in self._inputs or follower == source:
                raise ConfigurationError(
                    f"imports maps an input to another declared input, not {follower!r} -> {source!r}"
                )
            self._inputs[source].importers.append(self._inputs[follower])
        _check_acyclic(imports)
        self._multi = len(names) > 1
        self._merged = MergedWatermark(names)
        # A single input closes its windows by its own watermark: the hot path can skip merging.
        self._direct = not self._multi
        self._store = WindowStore(self._assigner) if self._assigner is not None else None
        # Substream mode: key -> (watermark, store). Otherwise every input shares self._store.
        self._lanes: dict[Hashable, tuple[Watermark, WindowStore | None]] = {}
        self._pending: list[WindowStore] = []

    # ------------------------------------------------------------------ observations

    def on_events(self, events: Iterable[EventLike], partition: Hashable = 0) -> Output:
        """Process events of one input, in arrival order."""
        out = Output()
        self._ingest(self._input(partition), events, out)
        return self._done(out)

    def on_tick(self, arrival_time: float, partition: Hashable | None = None) -> Output:
        """The processing clock reached ``arrival_time`` with nothing new (all inputs when
        ``partition`` is None): late-arrival watermarks and idle timeouts move."""
        out = Output()
        targets = self._inputs.values() if partition is None else [self._input(partition)]
        for inp in targets:
            if inp.completed:
                continue
            self._clock(inp, arrival_time)
            if self._late < FOREVER:
                self._lift(inp, arrival_time - self._late, arrival_time, out)
            if arrival_time >= inp.idle_check:
                self._idle(inp, arrival_time, out, strict=False)
        return self._done(out)

    def advance_time(self, watermark: float, arrival_time: float, partition: Hashable = 0) -> Output:
        """A producer's punctuation (StreamInsight CTI): the input's watermark moves to at
        least ``watermark``; later events below it follow the policy's action."""
        out = Output()
        inp = self._input(partition)
        self._observe(inp, arrival_time, out)
        self.counters.punctuations += 1
        self._lift(inp, float(watermark), arrival_time, out)
        return self._done(out)

    def import_watermark(self, watermark: float, arrival_time: float, partition: Hashable = 0) -> Output:
        """Follow another stream's watermark (StreamInsight ``AdvanceTimeImportSettings``);
        the runtime calls this with each watermark the source stream publishes."""
        out = Output()
        inp = self._input(partition)
        self._observe(inp, arrival_time, out)
        self._lift(inp, float(watermark), arrival_time, out)
        return self._done(out)

    def on_completed(self, partition: Hashable = 0, arrival_time: float | None = None) -> Output:
        """The input completed: its watermark becomes +infinity (a final CTI)."""
        out = Output()
        inp = self._input(partition)
        if arrival_time is not None:
            self._clock(inp, arrival_time)
        self._lift(inp, FOREVER, arrival_time, out)
        inp.completed = True
        return self._done(out)

    def flush(self) -> Output:
        """Close the query: every input completes and every open window closes (``final``)."""
        out = Output()
        for inp in self._inputs.values():
            if not inp.completed:
                self._lift(inp, FOREVER, None, out)
                inp.completed = True
        return self._done(out)

    # ------------------------------------------------------------------ state

    @property
    def watermark(self) -> float:
        """The watermark that closes windows: the minimum over inputs (with substreams, the
        partition's floor, which every substream has passed)."""
        if self._multi:
            return self._merged.value
        return next(iter(self._inputs.values())).mark.value

    @property
    def merged(self) -> MergedWatermark | None:
        """The merge of several inputs (``holder``, ``values()``); None with one input."""
        return self._merged if self._multi else None

    def held_since(self, partition: Hashable | None = None) -> Any:
        """The oldest token still held in an open window (of ``partition`` when several
        inputs are merged), or None: the runtime must not checkpoint past it."""
        oldest = None
        for store in self._stores():
            for bucket in store.panes.values():
                for state in bucket.values():
                    token = state[1]
                    if self._multi:
                        token = token.get(partition)
                    if token is not None and (oldest is None or token < oldest):
                        oldest = token
        return oldest

    def snapshot(self) -> bytes:
        """This processor's state as bytes (:mod:`streams.eventtime.snapshot`); raises
        ``SnapshotError`` when it cannot be serialized."""
        from streams.eventtime.snapshot import snapshot

        return snapshot(self)

    def restore(self, state: bytes) -> None:
        """Take the state :meth:`snapshot` gave (of a processor declared the same way)."""
        from streams.eventtime.snapshot import restore

        restore(self, state)

    def next_tick(self) -> float:
        """The earliest processing time at which :meth:`on_tick` would close a window or fire
        an idle timeout (``inf``: a tick would change nothing but the watermark), so a
        runtime with many quiet processors ticks only those that are due."""
        due = FOREVER
        if self._late < FOREVER:
            for store in self._stores():
                if store.next_close < FOREVER:
                    due = min(due, store.next_close + self._late)
        for inp in self._inputs.values():
            if not inp.completed and inp.idle_check < due:
                due = inp.idle_check
        return due

    def open_windows(self) -> list[tuple[Hashable, float, float]]:
        """``(key, start, end)`` of every open window holding data, by end then key order."""
        found: list[tuple[float, int, Hashable, float]] = []
        for store in self._stores():
            for j in store.open_windows():
                start, end = self._assigner.spec.bounds(j)  # type: ignore[union-attr]
                found.extend((end, store.order, key, start) for key in store.keys_of(j))
        found.sort(key=lambda f: (f[0], f[1]))
        return [(key, start, end) for end, _, key, start in found]

    def metrics(self) -> EventTimeMetrics:
        """A snapshot of the counters and watermarks (ASA's job metrics)."""
        clock = max((i.clock for i in self._inputs.values()), default=NEVER)
        wm = self.watermark
        return EventTimeMetrics(
            counters=self.counters.as_dict(),
            watermark=wm,
            watermarks={name: i.mark.value for name, i in self._inputs.items()},
            # A substream's own value may lag the floor until it is next visited.
            substream_watermarks={k: max(lane[0].value, wm) for k, lane in self._lanes.items()},
            delay=clock - wm if wm > NEVER and clock > NEVER else FOREVER,
            holder=self._merged.holder if self._multi else None,
            open_windows=len(self.open_windows()) if self._assigner is not None else 0,
        )

    # ------------------------------------------------------------------ the hot path

    def _ingest(self, inp: _Input, events: Iterable[EventLike], out: Output) -> None:
        if inp.completed:
            raise StreamCompletedError(
                f"input {inp.name!r} has completed (on_completed or flush); it takes no more events"
            )
        if not isinstance(events, Sequence):
            events = list(events)
        # Everything the loop reads is a local: attribute traffic dominates a Python loop.
        early, late, delay = self._early, self._late, self._delay
        earliest, latest = EARLIEST, LATEST
        bounded = early < FOREVER or late < FOREVER  # steps 1 and 2 apply at all
        uses_late = late < FOREVER
        action = self.policy.action
        adjust, accept = action is Action.ADJUST, action is Action.ACCEPT
        ts_of, key_of, key_field = self._timestamp_of, self._key_of, self._key_field
        if key_field is not None:
            # key_of is key_field's field getter: the fallback when the inline read fails.
            assert key_of is not None
            field_key_of = key_of
        substreams = self._substreams
        a = self._assigner
        windowed = a is not None
        if a is not None:
            step, origin, gaps, size = a.step, a.origin, a.gaps, a.size
            pane_closed = a.pane_closed
        counting, select = self._counting, self._select
        add, init = self.reducer.add, self.reducer.init
        trace = self._trace
        passthrough = not windowed
        record = trace or passthrough
        idle = self._idle_timeout < FOREVER
        every_event = self._generation.every_event and not inp.imported
        direct, multi, part = self._direct, self._multi, inp.name
        counters = self.counters
        lanes = self._lanes
        # With substreams and L set, every arrival lifts the partition's floor (inp.mark) to
        # arrival - L; a substream below it is lifted when it is next loaded, or when the
        # floor reaches a window's close time (inp.floor_close): quiet keys close on time.
        floor_mark = inp.mark
        lifting = substreams and uses_late
        clock, idle_check = inp.clock, inp.idle_check
        key = None
        # The current lane (the input's, or the event's substream): its watermark ``w``, newest
        # timestamp and next close live in locals while the loop runs. Before a helper that
        # reads or moves them is called they are parked in the objects, and loaded again
        # after. With a single input the store's closing watermark is ``w`` itself.
        mark, store = inp.mark, self._store
        w, newest = mark.value, mark.max_timestamp
        # Without windows ``store`` is None and ``panes`` is never read.
        panes: dict[float, dict[Any, list[Any]]] = store.panes if store is not None else {}
        next_close = store.next_close if store is not None else FOREVER
        try:
            for rec in events:
                arr = rec.arrival_time
                if arr > clock:
                    clock = arr
                if arr > idle_check:  # a timeout fell due before this event arrived
                    mark.value, mark.max_timestamp = w, newest
                    self._idle(inp, arr, out, strict=True)
                    w, idle_check = mark.value, inp.idle_check
                    next_close = store.next_close if store is not None else FOREVER
                status = None  # steps 1-3 not reached: nothing counted for this event yet
                # Steps 1-4 run what the event brings (its time, key and value) through user
                # code: whatever it raises dead-letters this event alone, never its batch.
                try:
                    if ts_of is None:
                        et = rec.event_time
                        if not (earliest <= et < latest):  # also NaN; a handoff holds years 1-9999
                            self._refuse(
                                inp, rec, None, None, Reason.INVALID_TIMESTAMP, DEAD_LETTER, arr, out, time_problem(et)
                            )
                            continue
                    else:
                        try:
                            et = ts_of(rec)
                        except (KeyError, AttributeError, TypeError, ValueError) as exc:
                            self._refuse(
                                inp, rec, None, None, Reason.INVALID_TIMESTAMP, DEAD_LETTER, arr, out, str(exc)
                            )
                            continue
                    if key_field is not None:
                        try:
                            key = rec.value[key_field]
                        except (KeyError, TypeError, IndexError):  # not a mapping, or no such key
                            key = field_key_of(rec)
                    elif key_of is not None:
                        key = key_of(rec)
                    if substreams:
                        lane = lanes.get(key) or self._new_lane(inp, key)
                        if lane[0] is not mark:  # park the previous substream, load this one
                            mark.value, mark.max_timestamp = w, newest
                            if store is not None:
                                store.watermark = w
                            mark, store = lane
                            w, newest = mark.value, mark.max_timestamp
                            if w < floor_mark.value:  # the arrivals since its last event lifted it
                                w = mark.value = floor_mark.value
                            if store is not None:
                                panes, next_close = store.panes, store.next_close
                    ts = et
                    reason = None
                    status = KEPT
                    if bounded:
                        # 1. early arrival
                        if et - arr > early:
                            self._refuse(inp, rec, key, et, Reason.EARLY_ARRIVAL, DROPPED, arr, out)
                            continue
                        # 2. late arrival
                        if arr - et > late:
                            reason = Reason.LATE_ARRIVAL
                            if adjust:
                                ts = arr - late
                                status = ADJUSTED
                                counters.late_arrival_adjusted += 1
                                counters.adjusted += 1
                            elif accept:
                                counters.late_arrival_accepted += 1
                            else:
                                self._refuse(inp, rec, key, et, reason, DROPPED, arr, out)
                                continue
                    # 3. out of order: below the watermark before this event
                    if ts < w:
                        reason = Reason.OUT_OF_ORDER
                        if adjust:
                            ts = w
                            if status != ADJUSTED:  # not already counted as late
                                counters.adjusted += 1
                            status = ADJUSTED
                            counters.out_of_order_adjusted += 1
                        elif accept:
                            counters.out_of_order_accepted += 1
                        else:
                            self._refuse(inp, rec, key, et, reason, DROPPED, arr, out)
                            continue
                    # 4. into the open windows containing the timestamp
                    if store is not None:  # the lane's store: there is one exactly when windowed
                        offset = ts - origin
                        pane = offset // step
                        if gaps and offset - pane * step >= size:
                            pass  # between two hopping windows: in no window, by definition
                        elif ts < w and pane_closed(pane, w if direct else store.watermark):
                            status = DEAD_LETTER
                            self._refuse(inp, rec, key, et, Reason.WINDOW_CLOSED, DEAD_LETTER, arr, out, ts=ts)
                        else:
                            bucket = panes.get(pane)
                            if bucket is None:
                                if direct:
                                    store.watermark = w  # scheduling skips windows closed at w
                                bucket = self._open_pane(inp, store, pane)
                                next_close, idle_check = store.next_close, inp.idle_check
                            state = bucket.get(key)
                            if state is None:
                                acc = 1 if counting else add(init(), select(rec))
                                bucket[key] = [acc, {part: rec.token} if multi else rec.token]
                            else:
                                if counting:
                                    state[0] += 1
                                else:
                                    state[0] = add(state[0], select(rec))
                                if multi and part not in state[1]:
                                    state[1][part] = rec.token
                except Exception as exc:  # noqa: BLE001 - a key or aggregate of this event raised
                    if status is None:  # its time or key raised: neither is this event's
                        self._invalid(inp, rec, None, None, arr, None, None, exc, out)
                    else:
                        self._invalid(inp, rec, key, et, arr, status, reason, exc, out)
                    continue
                if record and status != DEAD_LETTER:
                    outcome = EventOutcome(rec, part, key, et, ts, status, reason and reason.value)
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
                        out.trace.append(WatermarkAdvance(arr, part, None, arr - late))
                    if arr - late >= inp.floor_close:
                        mark.value, mark.max_timestamp = w, newest
                        if store is not None:
                            store.watermark = w
                        self._lift_lanes(inp, arr - late, arr, out)
                        w = mark.value
                        next_close = store.next_close if store is not None else FOREVER
                if uses_late and arr - late > cand:
                    cand = arr - late
                if cand > w:
                    if direct:
                        w = cand
                        if trace:
                            out.trace.append(WatermarkAdvance(arr, part, key if substreams else None, w))
                        # 6. close what it passed
                        if w >= next_close and store is not None:
                            mark.value, mark.max_timestamp, store.watermark = w, newest, w
                            self._close([store], arr, out)
                            next_close = store.next_close
                    else:
                        mark.max_timestamp = newest
                        self._advance(inp, None, mark, cand, arr, out)
                        self._close_pending(arr, out)
                        w = mark.value
                        next_close = store.next_close if store is not None else FOREVER
        finally:
            mark.value, mark.max_timestamp = w, newest
            if direct and store is not None:
                store.watermark = w
            inp.clock = clock
        counters.events += len(events)

    # ------------------------------------------------------------------ helpers

    def _input(self, partition: Hashable) -> _Input:
        try:
            return self._inputs[partition]
        except KeyError:
            raise ConfigurationError(
                f"unknown input {partition!r}: declare it in Processor(inputs=[...]) (declared: {list(self._inputs)!r})"
            ) from None

    def _clock(self, inp: _Input, arrival_time: float) -> None:
        if arrival_time > inp.clock:
            inp.clock = arrival_time

    def _observe(self, inp: _Input, arrival_time: float, out: Output) -> None:
        """An observation carried in the queue: like an event, it moves the clock and fires
        the idle timeouts that fell due strictly before it."""
        if inp.completed:
            raise StreamCompletedError(f"input {inp.name!r} has completed; it takes nothing more")
        self._clock(inp, arrival_time)
        if arrival_time > inp.idle_check:
            self._idle(inp, arrival_time, out, strict=True)

    def _stores(self) -> list[WindowStore]:
        if self._substreams:
            return [store for _, store in self._lanes.values() if store is not None]
        return [self._store] if self._store is not None else []

    def _new_lane(self, inp: _Input, key: Hashable) -> tuple[Watermark, WindowStore | None]:
        # A new substream starts at the partition's floor (punctuation, ticks).
        mark = Watermark(key, self._generation, self._delay, start=inp.mark.value)
        store = None
        if self._assigner is not None:
            store = WindowStore(self._assigner, order=len(self._lanes), watermark=mark.value)
        lane = (mark, store)
        self._lanes[key] = lane
        return lane

    def _lanes_of(self, inp: _Input) -> list[tuple[Hashable, Watermark, WindowStore | None]]:
        if self._substreams:
            return [(key, mark, store) for key, (mark, store) in self._lanes.items()]
        return [(None, inp.mark, self._store)]

    def _open_pane(self, inp: _Input, store: WindowStore, pane: float) -> dict[Any, list[Any]]:
        bucket = store.open_pane(pane)
        if self._substreams and store.next_close < inp.floor_close:
            inp.floor_close = store.next_close
        if self._idle_timeout < FOREVER:
            # A new window may fall due before the known ones: lower the idle check.
            due = store.earliest_end() + self._idle_timeout
            for other in [inp] if self._substreams else self._inputs.values():
                if due < other.idle_check:
                    other.idle_check = due
        return bucket

    def _advance(
        self,
        inp: _Input,
        key: Hashable,
        mark: Watermark,
        value: float,
        arrival: float | None,
        out: Output,
        store: WindowStore | None = None,
    ) -> None:
        """Raise one watermark and propagate it (merge, imports); closing is left to
        :meth:`_close_pending` so that windows of several stores close in order of end."""
        if not mark.raise_to(value):
            return
        if self._trace:
            out.trace.append(WatermarkAdvance(arrival, inp.name, key, value))
        if self._substreams:
            if store is not None:
                store.watermark = value
                self._pending.append(store)
            return
        if self._merged.update(inp.name, value):
            if self._multi and self._trace:
                out.trace.append(WatermarkAdvance(arrival, None, None, self._merged.value))
            if self._store is not None:
                self._store.watermark = self._merged.value
                self._pending.append(self._store)
        for follower in inp.importers:
            self._advance(follower, None, follower.mark, value, arrival, out)

    def _lift(self, inp: _Input, value: float, arrival: float | None, out: Output) -> None:
        """Raise an input's watermark and, with substreams, every substream's."""
        self._advance(inp, None, inp.mark, value, arrival, out)
        if self._substreams:
            self._lift_lanes(inp, value, arrival, out)
        else:
            self._close_pending(arrival, out)

    def _lift_lanes(self, inp: _Input, value: float, arrival: float | None, out: Output) -> None:
        """Raise every substream to at least ``value`` and close what that passes."""
        for key, mark, store in self._lanes_of(inp):
            self._advance(inp, key, mark, value, arrival, out, store)
        self._close_pending(arrival, out)
        inp.floor_close = min((s.next_close for _, s in self._lanes.values() if s is not None), default=FOREVER)

    def _close_pending(self, clock: float | None, out: Output) -> None:
        if self._pending:
            stores, self._pending = self._pending, []
            self._close(stores, clock, out)

    def _close(self, stores: list[WindowStore], clock: float | None, out: Output) -> None:
        """Step 6: emit every window its store's watermark has closed, in order of end."""
        a = self._assigner
        assert a is not None
        due: list[tuple[float, int, float, WindowStore]] = []
        for store in dict.fromkeys(stores):  # each store once, in order
            if store.watermark >= store.next_close:
                due.extend((a.end(j), store.order, j, store) for j in store.pop_due())
        due.sort(key=lambda d: (d[0], d[1]))
        reducer = self.reducer
        for _, _, j, store in due:
            start, end = a.spec.bounds(j)
            final = store.watermark == FOREVER
            for key, acc in store.collect(j, reducer.merge, reducer.init).items():
                result = WindowResult(key, start, end, reducer.result(acc), clock, final)
                out.windows.append(result)
                if self._trace:
                    out.trace.append(result)
                self.counters.windows_emitted += 1

    def _idle(self, inp: _Input, now: float, out: Output, *, strict: bool) -> None:
        """Fire the idle timeouts due at ``now`` (before it, when an event arrives at ``now``:
        an event arriving at the very instant counts as ingested first)."""
        timeout, lateness = self._idle_timeout, self._assigner.lateness if self._assigner else 0.0
        next_check = FOREVER
        for key, mark, store in self._lanes_of(inp):
            if store is None:
                continue
            while True:
                end = _first_open_end(store, mark.value)
                if end == FOREVER:
                    break
                due = max(end, mark.last_ingest) + timeout
                if due < now or (due == now and not strict):
                    self.counters.idle_timeouts += 1
                    self._advance(inp, key, mark, end + lateness, now, out, store)
                    self._close_pending(now, out)
                    continue
                next_check = min(next_check, due)
                break
        inp.idle_check = next_check

    def _invalid(
        self,
        inp: _Input,
        rec: Any,
        key: Hashable,
        event_time: float | None,
        arrival: float,
        status: str | None,
        reason: Reason | None,
        exc: Exception,
        out: Output,
    ) -> None:
        """Dead-letter an event whose time, key or aggregate raised (steps 1-4), undoing
        what the ordering policy had counted for it: each event has one fate."""
        counters = self.counters
        if status is None:
            own = getattr(rec, "event_time", None)
            if self._timestamp_of is None and not isinstance(own, (int, float)):  # not comparable
                self._refuse(
                    inp, rec, None, None, Reason.INVALID_TIMESTAMP, DEAD_LETTER, arrival, out, time_problem(own)
                )
                return
            what = "its key (over or group_by)"
        else:
            assert event_time is not None
            what = f"the aggregate {type(self.reducer).__name__}"
            accept = self.policy.action is Action.ACCEPT
            if arrival - event_time > self._late:  # step 2 counted it
                if accept:
                    counters.late_arrival_accepted -= 1
                else:
                    counters.late_arrival_adjusted -= 1
            if reason is Reason.OUT_OF_ORDER:  # step 3 counted it
                if accept:
                    counters.out_of_order_accepted -= 1
                else:
                    counters.out_of_order_adjusted -= 1
            if status == ADJUSTED:
                counters.adjusted -= 1
        trace = "".join(traceback.format_exception(exc)).rstrip()
        detail = f"{what} raised {type(exc).__name__}: {exc}\n{trace}"
        self._refuse(inp, rec, key, event_time, Reason.INVALID_VALUE, DEAD_LETTER, arrival, out, detail)

    def _refuse(
        self,
        inp: _Input,
        rec: Any,
        key: Hashable,
        event_time: float | None,
        reason: Reason,
        status: str,
        arrival: float,
        out: Output,
        detail: str = "",
        ts: float | None = None,
    ) -> None:
        """Record a dropped or refused event as a dead letter (never silently lost)."""
        counters = self.counters
        if reason is Reason.EARLY_ARRIVAL:
            counters.early_arrival += 1
            detail = f"{event_time - arrival:g} s ahead of its arrival (early_arrival {self._early:g} s)"  # type: ignore[operator]
        elif reason is Reason.LATE_ARRIVAL:
            counters.late_arrival_dropped += 1
            detail = f"{arrival - event_time:g} s behind its arrival (late_arrival {self._late:g} s)"  # type: ignore[operator]
        elif reason is Reason.OUT_OF_ORDER:
            counters.out_of_order_dropped += 1
            detail = f"event time below the watermark (out_of_order {self._delay:g} s)"
        elif reason is Reason.WINDOW_CLOSED:
            counters.window_closed += 1
            detail = f"every window containing timestamp {ts:g} has closed"
        elif reason is Reason.INVALID_VALUE:
            counters.invalid_value += 1
        else:
            counters.invalid_timestamp += 1
        token = getattr(rec, "token", None)
        stream = getattr(rec, "stream_id", None)
        queue = inp.name if isinstance(inp.name, int) else getattr(inp.name, "number", None)
        letter = DeadLetter(
            reason=reason.value,
            stream=None if stream is None else str(stream),
            queue=queue,
            sequence_number=getattr(token, "sequence_number", None),
            event_index=getattr(token, "event_index", None),
            value=getattr(rec, "value", rec),
            event_time=event_time,
            detail=f"{detail}; token {token}" if token is not None else detail,
            recorded_at=arrival,
        )
        out.dead_letters.append(letter)
        if self._trace:
            out.trace.append(EventOutcome(rec, inp.name, key, event_time, ts, status, reason.value))

    def _done(self, out: Output) -> Output:
        out.watermark = self.watermark
        return out


def _first_open_end(store: WindowStore, watermark: float) -> float:
    """End of the earliest open window this watermark still holds back (others, held by
    another merged input, are not its to time out)."""
    a = store.assigner
    ends = [a.end(j) for j in store.open_windows() if a.close_time(j) > watermark]
    return ends[0] if ends else FOREVER


def _check_acyclic(imports: Mapping[Hashable, Hashable]) -> None:
    for start in imports:
        seen, node = {start}, imports[start]
        while node in imports:
            if node in seen:
                raise ConfigurationError(f"imports form a cycle through input {node!r}")
            seen.add(node)
            node = imports[node]
