"""How watermarks flow: raising one, propagating it (merged inputs, imports, substreams),
closing the windows it passes (step 6 of the contract) and firing idle timeouts.

A processor has one :class:`WatermarkFlow`; its per-event path raises the current lane's
watermark inline and calls in here when a watermark must propagate or windows close.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from streams.eventtime.aggregates import Reducer
from streams.eventtime.counted import CountStore
from streams.eventtime.dedup import Deduplication
from streams.eventtime.joins import IntervalJoin, JoinStore
from streams.eventtime.parts import Input, Lane, Store
from streams.eventtime.results import Counters, Output, WatermarkAdvance, WindowResult
from streams.eventtime.sessions import OpenSession, SessionStore
from streams.eventtime.sliding import SlidingStore
from streams.eventtime.watermark import FOREVER, NEVER, MergedWatermark, Watermark, WatermarkGeneration
from streams.eventtime.windows import Hopping, Session, Sliding, Tumbling, WindowAssigner, WindowStore

_NO_LANES: dict[Hashable, Lane] = {}  # shared by every flow without substreams: never written
_NO_STORES: list[Store] = []  # likewise: only substreams append to pending


class WatermarkFlow:
    """The watermarks of a processor's inputs and substreams, and the windows they close.

    Without substreams every input shares ``store`` (closed by the merged watermark, or by
    the one input's own: ``merged`` is None then); with substreams (one input) each key has a
    lane: its own watermark and store, started at the input's floor. A store holds fixed
    windows' panes (``assigner``) or sessions (``session``).

    A processor per stream is a flow per stream: what one input does not need is not made
    (the merge of several, the substreams' lanes and their list of stores to close).
    """

    __slots__ = (
        "inputs",
        "multi",
        "merged",
        "store",
        "lanes",
        "pending",
        "store_due",
        "assigner",
        "session",
        "counted",
        "sliding",
        "join",
        "lateness",
        "reducer",
        "counters",
        "substreams",
        "idle_timeout",
        "generation",
        "delay",
        "trace",
        "dedup",
    )

    def __init__(
        self,
        inputs: tuple[Input, ...],
        assigner: WindowAssigner | None,
        reducer: Reducer[Any, Any],
        counters: Counters,
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
        self.inputs = inputs
        self.multi = len(inputs) > 1
        self.merged = MergedWatermark(i.name for i in inputs) if self.multi else None
        self.assigner = assigner
        self.session = session
        self.counted = counted
        self.sliding = sliding
        self.join = join
        self.reducer = reducer
        self.lateness = assigner.lateness if assigner is not None else session.allowed_lateness if session else 0.0
        self.store = self._new_store(0, NEVER)
        # Substream mode: key -> (watermark, store). Otherwise every input shares self.store
        # (and lanes is the one shared empty dict, never written: new_lane is for substreams).
        self.lanes: dict[Hashable, Lane] = {} if substreams else _NO_LANES
        # Stores whose watermark moved, for close_pending: the lanes' (substreams), or the
        # shared store's (store_due).
        self.pending: list[Store] = [] if substreams else _NO_STORES
        self.store_due = False
        self.counters = counters
        self.substreams = substreams
        self.idle_timeout = idle_timeout
        self.generation = generation
        self.delay = delay
        self.trace = trace
        self.dedup: Deduplication | None = None  # the keys seen within the horizon (Dedup)

    def _new_store(self, order: int, watermark: float) -> Store | None:
        if self.join is not None:
            left, right = (i.name for i in self.inputs)
            return JoinStore(self.join, left, right)
        if self.session is not None:
            return SessionStore(self.session, self.reducer, order, watermark)
        if self.counted is not None:
            return CountStore(self.counted, self.reducer, order, watermark)
        if self.sliding is not None:
            return SlidingStore(self.sliding, self.reducer, order, watermark)
        if self.assigner is not None:
            return WindowStore(self.assigner, order, watermark)
        return None

    def stores(self) -> list[Store]:
        """Every window store (one per substream, or the shared one)."""
        if self.substreams:
            return [store for _, store in self.lanes.values() if store is not None]
        return [self.store] if self.store is not None else []

    def new_lane(self, inp: Input, key: Hashable) -> Lane:
        """A new substream: it starts at the partition's floor (punctuation, ticks)."""
        assert self.substreams, "lanes are substreams'"
        mark = Watermark(key, self.generation, self.delay, start=inp.mark.value)
        lane = (mark, self._new_store(len(self.lanes), mark.value))
        self.lanes[key] = lane
        return lane

    def lanes_of(self, inp: Input) -> list[tuple[Hashable, Watermark, Store | None]]:
        if self.substreams:
            return [(key, mark, store) for key, (mark, store) in self.lanes.items()]
        return [(None, inp.mark, self.store)]

    def open_pane(self, inp: Input, store: Store, pane: float) -> dict[Hashable, list[Any]]:
        """Open ``pane`` in ``store``: its windows are scheduled to close, idle checks lowered."""
        assert isinstance(store, WindowStore)  # panes are fixed windows'
        bucket = store.open_pane(pane)
        self.scheduled(inp, store)
        return bucket

    def scheduled(self, inp: Input, store: Store) -> None:
        """A window (or session) was scheduled in ``store``: lower the substreams' floor
        close and the idle checks it may fall due before."""
        if self.substreams and store.next_close < inp.floor_close:
            inp.floor_close = store.next_close
        if self.idle_timeout < FOREVER:
            # A new window may fall due before the known ones: lower the idle check.
            due = store.earliest_end() + self.idle_timeout
            for other in [inp] if self.substreams else self.inputs:
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
        if self.trace:
            out.trace.append(WatermarkAdvance(arrival, inp.name, key, value))
        if self.substreams:
            if store is not None:
                store.watermark = value
                self.pending.append(store)
            return
        merged = self.merged
        if merged is None:  # one input: its watermark closes the windows
            if self.store is not None:
                self.store.watermark = value
                self.store_due = True
        elif merged.update(inp.name, value):
            if self.trace:
                out.trace.append(WatermarkAdvance(arrival, None, None, merged.value))
            if self.store is not None:
                self.store.watermark = merged.value
                self.store_due = True
        for follower in inp.importers:
            self.advance(follower, None, follower.mark, value, arrival, out)

    def lift(self, inp: Input, value: float, arrival: float | None, out: Output) -> None:
        """Raise an input's watermark and, with substreams, every substream's."""
        self.advance(inp, None, inp.mark, value, arrival, out)
        if self.substreams:
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
        if self.store_due:
            self.store_due = False
            assert self.store is not None
            self.close([self.store], clock, out)
        elif self.pending:
            stores, self.pending = self.pending, []
            self.close(stores, clock, out)

    def close(self, stores: list[Store], clock: float | None, out: Output) -> None:
        """Step 6: emit every window its store's watermark has closed, in order of end."""
        if self.session is not None:
            self._close_sessions(stores, clock, out)
            return
        if self.counted is not None:  # only a final watermark closes one (partial)
            for store in dict.fromkeys(stores):
                assert isinstance(store, CountStore)
                self.emit(store.pop_due(), out)
            return
        if self.sliding is not None:
            slid: list[tuple[float, int, int, WindowResult]] = []
            for store in dict.fromkeys(stores):
                assert isinstance(store, SlidingStore)
                if store.watermark >= store.next_close:
                    slid.extend((r.end, store.order, i, r) for i, r in enumerate(store.pop_due(clock)))
            slid.sort(key=lambda d: d[:3])
            self.emit([d[3] for d in slid], out)
            return
        if self.join is not None:
            for store in dict.fromkeys(stores):
                assert isinstance(store, JoinStore)
                if store.watermark > store.next_close:
                    out.joins.extend(store.pop_due(clock))
            return
        a = self.assigner
        assert a is not None
        due: list[tuple[float, int, float, WindowStore]] = []
        for store in dict.fromkeys(stores):  # each store once, in order
            assert isinstance(store, WindowStore)
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
                if self.trace:
                    out.trace.append(result)
                self.counters.windows_emitted += 1

    def emit(self, results: list[WindowResult], out: Output) -> None:
        """Hand closed windows out (and into the trace), counted."""
        out.windows.extend(results)
        if self.trace:
            out.trace.extend(results)
        self.counters.windows_emitted += len(results)

    def _close_sessions(self, stores: list[Store], clock: float | None, out: Output) -> None:
        due: list[tuple[float, int, int, Hashable, OpenSession, bool]] = []
        for store in dict.fromkeys(stores):
            assert isinstance(store, SessionStore)
            if store.watermark >= store.next_close:
                final = store.watermark == FOREVER
                due.extend((s.end, store.order, i, key, s, final) for i, (key, s) in enumerate(store.pop_due()))
        due.sort(key=lambda d: (d[0], d[1], d[2]))
        result_of = self.reducer.result
        for _, _, _, key, s, final in due:
            result = WindowResult(key, s.start, s.end, result_of(s.acc), clock, final)
            out.windows.append(result)
            if self.trace:
                out.trace.append(result)
            self.counters.windows_emitted += 1

    def idle(self, inp: Input, now: float, out: Output, *, strict: bool) -> None:
        """Fire the idle timeouts due at ``now`` (before it, when an event arrives at ``now``:
        an event arriving at the very instant counts as ingested first)."""
        timeout, lateness = self.idle_timeout, self.lateness
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
