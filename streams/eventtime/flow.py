"""How watermarks flow: raising one, propagating it (merged inputs, imports, substreams),
closing the windows it passes (step 6 of the contract) and firing idle timeouts.

A processor has one :class:`WatermarkFlow`; its per-event path raises the current lane's
watermark inline and calls in here when a watermark must propagate or windows close.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from streams.eventtime.aggregates import Reducer
from streams.eventtime.inputs import Input, Lane
from streams.eventtime.metrics import Counters
from streams.eventtime.results import Output, WatermarkAdvance, WindowResult
from streams.eventtime.watermark import FOREVER, MergedWatermark, Watermark, WatermarkGeneration
from streams.eventtime.windows import WindowAssigner, WindowStore


class WatermarkFlow:
    """The watermarks of a processor's inputs and substreams, and the windows they close.

    Without substreams every input shares ``store`` (closed by the merged watermark); with
    substreams (one input) each key has a lane: its own watermark and store, started at the
    input's floor.
    """

    __slots__ = (
        "inputs",
        "multi",
        "merged",
        "store",
        "lanes",
        "pending",
        "assigner",
        "reducer",
        "counters",
        "substreams",
        "idle_timeout",
        "generation",
        "delay",
        "trace",
    )

    def __init__(
        self,
        inputs: dict[Hashable, Input],
        assigner: WindowAssigner | None,
        reducer: Reducer[Any, Any],
        counters: Counters,
        *,
        substreams: bool,
        idle_timeout: float,
        generation: WatermarkGeneration,
        delay: float,
        trace: bool,
    ) -> None:
        self.inputs = inputs
        self.multi = len(inputs) > 1
        self.merged = MergedWatermark(inputs)
        self.assigner = assigner
        self.store = WindowStore(assigner) if assigner is not None else None
        # Substream mode: key -> (watermark, store). Otherwise every input shares self.store.
        self.lanes: dict[Hashable, Lane] = {}
        self.pending: list[WindowStore] = []  # stores whose watermark moved: close_pending
        self.reducer = reducer
        self.counters = counters
        self.substreams = substreams
        self.idle_timeout = idle_timeout
        self.generation = generation
        self.delay = delay
        self.trace = trace

    def stores(self) -> list[WindowStore]:
        """Every window store (one per substream, or the shared one)."""
        if self.substreams:
            return [store for _, store in self.lanes.values() if store is not None]
        return [self.store] if self.store is not None else []

    def new_lane(self, inp: Input, key: Hashable) -> Lane:
        """A new substream: it starts at the partition's floor (punctuation, ticks)."""
        mark = Watermark(key, self.generation, self.delay, start=inp.mark.value)
        store = None
        if self.assigner is not None:
            store = WindowStore(self.assigner, order=len(self.lanes), watermark=mark.value)
        lane = (mark, store)
        self.lanes[key] = lane
        return lane

    def lanes_of(self, inp: Input) -> list[tuple[Hashable, Watermark, WindowStore | None]]:
        if self.substreams:
            return [(key, mark, store) for key, (mark, store) in self.lanes.items()]
        return [(None, inp.mark, self.store)]

    def open_pane(self, inp: Input, store: WindowStore, pane: float) -> dict[Hashable, list[Any]]:
        """Open ``pane`` in ``store``: its windows are scheduled to close, idle checks lowered."""
        bucket = store.open_pane(pane)
        if self.substreams and store.next_close < inp.floor_close:
            inp.floor_close = store.next_close
        if self.idle_timeout < FOREVER:
            # A new window may fall due before the known ones: lower the idle check.
            due = store.earliest_end() + self.idle_timeout
            for other in [inp] if self.substreams else self.inputs.values():
                if due < other.idle_check:
                    other.idle_check = due
        return bucket

    def advance(
        self,
        inp: Input,
        key: Hashable,
        mark: Watermark,
        value: float,
        arrival: float | None,
        out: Output,
        store: WindowStore | None = None,
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
        if self.merged.update(inp.name, value):
            if self.multi and self.trace:
                out.trace.append(WatermarkAdvance(arrival, None, None, self.merged.value))
            if self.store is not None:
                self.store.watermark = self.merged.value
                self.pending.append(self.store)
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
        if self.pending:
            stores, self.pending = self.pending, []
            self.close(stores, clock, out)

    def close(self, stores: list[WindowStore], clock: float | None, out: Output) -> None:
        """Step 6: emit every window its store's watermark has closed, in order of end."""
        a = self.assigner
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
                if self.trace:
                    out.trace.append(result)
                self.counters.windows_emitted += 1

    def idle(self, inp: Input, now: float, out: Output, *, strict: bool) -> None:
        """Fire the idle timeouts due at ``now`` (before it, when an event arrives at ``now``:
        an event arriving at the very instant counts as ingested first)."""
        timeout, lateness = self.idle_timeout, self.assigner.lateness if self.assigner else 0.0
        next_check = FOREVER
        for key, mark, store in self.lanes_of(inp):
            if store is None:
                continue
            while True:
                end = _first_open_end(store, mark.value)
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


def _first_open_end(store: WindowStore, watermark: float) -> float:
    """End of the earliest open window this watermark still holds back (others, held by
    another merged input, are not its to time out)."""
    a = store.assigner
    ends = [a.end(j) for j in store.open_windows() if a.close_time(j) > watermark]
    return ends[0] if ends else FOREVER
