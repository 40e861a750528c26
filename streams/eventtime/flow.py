"""How watermarks flow: raising one, propagating it (merged inputs, imports, substreams),
closing the windows it passes (step 6 of the contract) and firing idle timeouts.

A processor has one :class:`WatermarkFlow`; its per-event path raises the current lane's
watermark inline and calls in here when a watermark must propagate or windows close. Times
here are integer microseconds (:mod:`streams.core.micros`); what goes out (results,
watermark steps) is in seconds.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from streams.core.micros import PER_SECOND, optional_seconds, to_micros, to_seconds
from streams.eventtime.aggregates import Reducer
from streams.eventtime.counted import CountStore
from streams.eventtime.dedup import Deduplication
from streams.eventtime.early import Revisions
from streams.eventtime.joins import IntervalJoin, JoinStore
from streams.eventtime.parts import Input, Lane, Store
from streams.eventtime.results import Counters, Output, WatermarkAdvance, WindowResult
from streams.eventtime.sessions import OpenSession, SessionStore
from streams.eventtime.sliding import SlidingStore
from streams.eventtime.watermark import FOREVER, NEVER, MergedWatermark, Watermark, WatermarkGeneration
from streams.eventtime.windows import Every, Hopping, Session, Sliding, Tumbling, WindowAssigner, WindowStore

_NO_LANES: dict[Hashable, Lane] = {}  # shared by every flow without substreams: never written
_NO_STORES: list[Store] = []  # likewise: only substreams append to pending


class FlowShape:
    """What every flow of one declaration reads and never changes: its windows (fixed,
    session, of a count of events, sliding, or a join), aggregate, watermark generation and
    tolerances. One per declaration (made by its first processor), so that a stream's flow
    holds only its own state: 14 slots of the 22 a flow had (112 bytes an activation).
    """

    __slots__ = (
        "multi",
        "assigner",
        "session",
        "counted",
        "sliding",
        "join",
        "lateness",
        "reducer",
        "substreams",
        "idle_timeout",
        "generation",
        "delay",
        "trace",
        "every",
    )

    def __init__(
        self,
        inputs: int,
        assigner: WindowAssigner | None,
        reducer: Reducer[Any, Any],
        *,
        substreams: bool,
        idle_timeout: float,
        generation: WatermarkGeneration,
        delay: float,
        trace: bool,
        session: Session | None = None,
        join: IntervalJoin | None = None,
        counted: Tumbling | Hopping | None = None,
        sliding: Sliding | None = None,
    ) -> None:
        self.multi = inputs > 1
        self.assigner = assigner
        self.session = session
        self.counted = counted
        self.sliding = sliding
        self.join = join
        self.reducer = reducer
        # Fixed windows declared with emit=Every(...): each store keeps its updates' Revisions.
        emit = assigner.spec.emit if assigner is not None else "final"
        self.every: Every | None = emit if isinstance(emit, Every) else None
        self.lateness = (
            assigner.lateness if assigner is not None else to_micros(session.allowed_lateness) if session else 0
        )
        self.substreams = substreams
        self.idle_timeout = idle_timeout
        self.generation = generation
        self.delay = delay
        self.trace = trace


class WatermarkFlow:
    """The watermarks of a processor's inputs and substreams, and the windows they close.

    Without substreams every input shares ``store`` (closed by the merged watermark, or by
    the one input's own: ``merged`` is None then); with substreams (one input) each key has a
    lane: its own watermark and store, started at the input's floor. A store holds fixed
    windows' panes (``assigner``) or sessions (``session``).

    A processor per stream is a flow per stream: what one input does not need is not made
    (the merge of several, the substreams' lanes and their list of stores to close).
    """

    __slots__ = ("inputs", "shape", "merged", "store", "lanes", "pending", "counters", "dedup")

    def __init__(self, inputs: tuple[Input, ...], shape: FlowShape, counters: Counters) -> None:
        self.inputs = inputs
        self.shape = shape
        self.merged = MergedWatermark(i.name for i in inputs) if shape.multi else None
        self.store = self._new_store(0, NEVER)
        # Substream mode: key -> (watermark, store). Otherwise every input shares self.store
        # (and lanes is the one shared empty dict, never written: new_lane is for substreams).
        self.lanes: dict[Hashable, Lane] = {} if shape.substreams else _NO_LANES
        # Stores whose watermark moved, for close_pending: the lanes' (substreams, appended
        # to), or the shared store (a list of it, made when its watermark moves).
        self.pending: list[Store] = [] if shape.substreams else _NO_STORES
        self.counters = counters
        self.dedup: Deduplication | None = None  # the keys seen within the horizon (Dedup)

    def _new_store(self, order: int, watermark: float) -> Store | None:
        if self.shape.join is not None:
            left, right = (i.name for i in self.inputs)
            return JoinStore(self.shape.join, left, right)
        if self.shape.session is not None:
            return SessionStore(self.shape.session, self.shape.reducer, order, watermark)
        if self.shape.counted is not None:
            return CountStore(self.shape.counted, self.shape.reducer, order, watermark)
        if self.shape.sliding is not None:
            return SlidingStore(self.shape.sliding, self.shape.reducer, order, watermark)
        if self.shape.assigner is not None:
            store = WindowStore(self.shape.assigner, order, watermark)
            if self.shape.every is not None:
                store.early = Revisions(self.shape.every, self.shape.assigner, self.shape.reducer)
            return store
        return None

    def stores(self) -> list[Store]:
        """Every window store (one per substream, or the shared one)."""
        if self.shape.substreams:
            return [store for _, store in self.lanes.values() if store is not None]
        return [self.store] if self.store is not None else []

    def new_lane(self, inp: Input, key: Hashable) -> Lane:
        """A new substream: it starts at the partition's floor (punctuation, ticks)."""
        assert self.shape.substreams, "lanes are substreams'"
        mark = Watermark(key, self.shape.generation, self.shape.delay, start=inp.mark.value)
        lane = (mark, self._new_store(len(self.lanes), mark.value))
        self.lanes[key] = lane
        return lane

    def lanes_of(self, inp: Input) -> list[tuple[Hashable, Watermark, Store | None]]:
        if self.shape.substreams:
            return [(key, mark, store) for key, (mark, store) in self.lanes.items()]
        return [(None, inp.mark, self.store)]

    def open_pane(self, inp: Input, store: Store, pane: int) -> dict[Hashable, list[Any]]:
        """Open ``pane`` in ``store``: its windows are scheduled to close, idle checks lowered."""
        assert isinstance(store, WindowStore)  # panes are fixed windows'
        bucket = store.open_pane(pane)
        if store.early is not None:
            store.early.opened(store, pane)
        self.scheduled(inp, store)
        return bucket

    def touched(self, store: Store | None, pane: int, key: Hashable, arrival: float, watermark: float) -> bool:
        """An event of ``key`` went into ``pane`` of ``store``, whose windows emit updates:
        True when an update is due after its step (:meth:`stepped`)."""
        assert isinstance(store, WindowStore) and store.early is not None
        return bool(store.early.touch(pane, key, arrival, watermark))

    def stepped(self, store: Store | None, clock: float, out: Output) -> None:
        """An event's step ended: the updates it made due (``Every(events=N)``)."""
        assert isinstance(store, WindowStore) and store.early is not None
        before = len(out.windows)
        store.early.after_step(store, clock, out, self.shape.trace)
        self.counters.early_results += len(out.windows) - before

    def tick(self, now: float, out: Output, *, strict: bool) -> None:
        """A tick at ``now``: the updates due by the processing clock (``Every(seconds)``)."""
        before = len(out.windows)
        for store in self.stores():
            if isinstance(store, WindowStore) and store.early is not None:
                store.early.tick(store, now, out, strict=strict, trace=self.shape.trace)
        if len(out.windows) > before:
            self.counters.early_results += len(out.windows) - before

    def scheduled(self, inp: Input, store: Store) -> None:
        """A window (or session) was scheduled in ``store``: lower the substreams' floor
        close and the idle checks it may fall due before."""
        if self.shape.substreams and store.next_close < inp.floor_close:
            inp.floor_close = store.next_close
        if self.shape.idle_timeout < FOREVER:
            # A new window may fall due before the known ones: lower the idle check.
            due = store.earliest_end() + self.shape.idle_timeout
            for other in [inp] if self.shape.substreams else self.inputs:
                if due < other.idle_check:
                    other.idle_check = due

    def advance(
        self,
        inp: Input,
        key: Hashable,
        mark: Watermark,
        value: float,
        arrival: float | None,
        out: Output,
        store: Store | None = None,
    ) -> None:
        """Raise one watermark and propagate it (merge, imports); closing is left to
        :meth:`close_pending` so that windows of several stores close in order of end."""
        if not mark.raise_to(value):
            return
        if self.shape.trace:
            out.trace.append(WatermarkAdvance(optional_seconds(arrival), inp.name, key, to_seconds(value)))
        if self.shape.substreams:
            if store is not None:
                store.watermark = value
                self.pending.append(store)
            return
        merged = self.merged
        if merged is None:  # one input: its watermark closes the windows
            if self.store is not None:
                self.store.watermark = value
                self.pending = [self.store]
        elif merged.update(inp.name, value):
            if self.shape.trace:
                out.trace.append(WatermarkAdvance(optional_seconds(arrival), None, None, to_seconds(merged.value)))
            if self.store is not None:
                self.store.watermark = merged.value
                self.pending = [self.store]
        for follower in inp.importers:
            self.advance(follower, None, follower.mark, value, arrival, out)

    def lift(self, inp: Input, value: float, arrival: float | None, out: Output) -> None:
        """Raise an input's watermark and, with substreams, every substream's."""
        self.advance(inp, None, inp.mark, value, arrival, out)
        if self.shape.substreams:
            self.lift_lanes(inp, value, arrival, out)
        else:
            self.close_pending(arrival, out)

    def lift_lanes(self, inp: Input, value: float, arrival: float | None, out: Output) -> None:
        """Raise every substream to at least ``value`` (the floor) and close what that passes."""
        for key, mark, store in self.lanes_of(inp):
            self.advance(inp, key, mark, value, arrival, out, store)
        self.close_pending(arrival, out)
        inp.floor_close = min((s.next_close for _, s in self.lanes.values() if s is not None), default=FOREVER)

    def close_pending(self, clock: float | None, out: Output) -> None:
        if self.pending:
            stores, self.pending = self.pending, [] if self.shape.substreams else _NO_STORES
            self.close(stores, clock, out)

    def close(self, stores: list[Store], clock: float | None, out: Output) -> None:
        """Step 6: emit every window its store's watermark has closed, in order of end."""
        if self.shape.session is not None:
            self._close_sessions(stores, clock, out)
        elif self.shape.counted is not None:  # only a final watermark closes one (partial)
            for store in dict.fromkeys(stores):
                assert isinstance(store, CountStore)
                self.emit(store.pop_due(), out)
        elif self.shape.sliding is not None:
            self._close_sliding(stores, clock, out)
        elif self.shape.join is not None:
            self._close_joins(stores, clock, out)
        else:
            self._close_panes(stores, clock, out)

    def _close_sliding(self, stores: list[Store], clock: float | None, out: Output) -> None:
        slid: list[tuple[float, int, int, WindowResult]] = []
        for store in dict.fromkeys(stores):
            assert isinstance(store, SlidingStore)
            if store.watermark >= store.next_close:
                slid.extend((r.end, store.order, i, r) for i, r in enumerate(store.pop_due(clock)))
        slid.sort(key=lambda d: d[:3])
        self.emit([d[3] for d in slid], out)

    def _close_panes(self, stores: list[Store], clock: float | None, out: Output) -> None:
        """Step 6 for tumbling and hopping windows: closes and on-time results, by due time."""
        a = self.shape.assigner
        assert a is not None
        # (due time, store order, on-time result?, window, store): a window closes at end + A,
        # its on-time update (emit=Every, A > 0) is due at its end; at equal times, closes first.
        due: list[tuple[float, int, bool, int, WindowStore]] = []
        for store in dict.fromkeys(stores):  # each store once, in order
            assert isinstance(store, WindowStore)
            early = store.early
            if early is not None:
                due.extend((a.end(j), store.order, True, j, store) for j in early.due_ontime(store.watermark))
            if store.watermark >= store.next_close:
                due.extend((a.close_time(j), store.order, False, j, store) for j in store.pop_due())
            if early is not None:  # the next on-time result is due by the same watermark
                store.next_close = min(store.next_close, early.next_end())
        due.sort(key=lambda d: (d[0], d[1], d[2]))
        for _, _, ontime, j, store in due:
            if ontime:
                assert store.early is not None
                before = len(out.windows)
                store.early.emit_ontime(store, j, clock, out, self.shape.trace)
                self.counters.early_results += len(out.windows) - before
            else:
                self._emit_window(store, j, clock, out)

    def _emit_window(self, store: WindowStore, j: int, clock: float | None, out: Output) -> None:
        """The final result of window ``j`` of ``store``, per key."""
        a, reducer, early = self.shape.assigner, self.shape.reducer, store.early
        assert a is not None
        # In seconds, as to_seconds and optional_seconds give them: divided here, once a window.
        lo, hi = a.bounds(j)
        start, end, closed_at = lo / PER_SECOND, hi / PER_SECOND, None if clock is None else clock / PER_SECOND
        revisions = early.closed(j) if early is not None else None
        for key, acc in store.collect(j, reducer.merge, reducer.init).items():
            revision = revisions.get(key, 0) if revisions is not None else 0
            result = WindowResult(key, start, end, reducer.result(acc), closed_at, True, revision)
            out.windows.append(result)
            if self.shape.trace:
                out.trace.append(result)
            self.counters.windows_emitted += 1

    def emit(self, results: list[WindowResult], out: Output) -> None:
        """Hand closed windows out (and into the trace), counted."""
        out.windows.extend(results)
        if self.shape.trace:
            out.trace.extend(results)
        self.counters.windows_emitted += len(results)

    def _close_joins(self, stores: list[Store], clock: float | None, out: Output) -> None:
        """Hand out the join results the watermark made final (counted)."""
        for store in dict.fromkeys(stores):
            assert isinstance(store, JoinStore)
            if store.watermark > store.next_close:
                joined = store.pop_due(clock)
                out.joins.extend(joined)
                self.counters.joins_emitted += len(joined)

    def _close_sessions(self, stores: list[Store], clock: float | None, out: Output) -> None:
        due: list[tuple[float, int, int, Hashable, OpenSession]] = []
        for store in dict.fromkeys(stores):
            assert isinstance(store, SessionStore)
            if store.watermark >= store.next_close:
                due.extend((s.end, store.order, i, key, s) for i, (key, s) in enumerate(store.pop_due()))
        due.sort(key=lambda d: (d[0], d[1], d[2]))
        result_of = self.shape.reducer.result
        for _, _, _, key, s in due:
            result = WindowResult(
                key, to_seconds(s.start), to_seconds(s.end), result_of(s.acc), optional_seconds(clock)
            )
            out.windows.append(result)
            if self.shape.trace:
                out.trace.append(result)
            self.counters.windows_emitted += 1

    def idle(self, inp: Input, now: float, out: Output, *, strict: bool) -> None:
        """Fire the idle timeouts due at ``now`` (before it, when an event arrives at ``now``:
        an event arriving at the very instant counts as ingested first)."""
        timeout, lateness = self.shape.idle_timeout, self.shape.lateness
        next_check = FOREVER
        for key, mark, store in self.lanes_of(inp):
            if store is None:
                continue
            while True:
                # The earliest open window this watermark still holds back (others, held
                # by another merged input, are not its to time out).
                end = store.first_open_end(mark.value)
                if end == FOREVER:
                    break
                due = max(end, mark.last_ingest) + timeout
                if due < now or (due == now and not strict):
                    self.counters.idle_timeouts += 1
                    self.advance(inp, key, mark, end + lateness, now, out, store)
                    self.close_pending(now, out)
                    continue
                next_check = min(next_check, due)
                break
        inp.idle_check = next_check
