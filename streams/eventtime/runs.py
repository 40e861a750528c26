"""The in-order way through steps 1-6: a batch of columns, counted a run at a time.

A batch whose events the runtime keeps as columns (``columns()``: values, event times,
arrivals; ``streams.core.batch``) is taken in runs when the consumer's shape allows
(``Ingest.in_runs``: one input, fixed windows, a count, no key function, the time an event's
own or a field of its value, no arrival bounds, idle timeout, dedup, updates or trace): the
events in order, into a pane that is open for them, are read from the columns alone (no
event object) and counted into their pane once per run; the watermark still moves, and
closes, event by event, and an event out of order is adjusted here when the policy adjusts.
Any other event (a time to refuse, one out of order under drop or accept) is made whole and
goes the per-event way (:class:`~streams.eventtime.ingest.Ingest`), where it stands in the
run, so both ways give the same result.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol

from streams.core.micros import PER_SECOND
from streams.eventtime.flow import WatermarkFlow
from streams.eventtime.lateness import LatenessSketch
from streams.eventtime.ordering import OrderingStep
from streams.eventtime.parts import Input
from streams.eventtime.policy import EARLIEST_US, LATEST_US, EventLike
from streams.eventtime.results import Output
from streams.eventtime.windows import WindowStore

# A time the runs leave to the per-event way (which says why it is refused): outside any bounds.
NOT_A_TIME = math.inf
# Floats of seconds beyond these are outside years 1 to 9999 in any unit: refused, not converted.
MAX_SECONDS = 1e300


class PerEvent(Protocol):
    """What the runs need of the per-event way (``streams.eventtime.ingest.Ingest``)."""

    ordering: OrderingStep
    timestamp_of: Callable[[Any], int] | None

    @property  # Ingest.run(flow, inp, events, out), sampling nothing: a run samples its own events
    def run(self) -> Callable[[WatermarkFlow, Input, Iterable[EventLike], Output], None]: ...


def take_in_runs(
    ingest: PerEvent,
    flow: WatermarkFlow,
    inp: Input,
    events: Any,
    out: Output,
    sampler: LatenessSketch | None,
) -> None:
    """Steps 1-6 for a batch of columns (see the module's docstring): a run of events into one
    pane adds its count once; one out of order is adjusted here (the policy's ``adjust``); any
    other goes the per-event way alone. An event costs its time (:func:`time_column`), its pane
    (worked out only outside the run's pane's bounds) and the watermark (the clock: ``max`` in C)."""
    (store, a), (values, times, arrivals) = (flow.store, flow.shape.assigner), events.columns()
    assert isinstance(store, WindowStore) and a is not None  # as in_runs says
    ts = time_column(ingest.timestamp_of, values, times)
    step, origin, delay, adjusting = a.step, a.origin, flow.shape.delay, ingest.ordering.adjust
    w, newest, next_close = inp.value, inp.max_timestamp, store.next_close  # an input is its own watermark
    earliest, latest, samples = EARLIEST_US, LATEST_US, Samples(sampler, len(values))  # sampled by position
    state: list[Any] | None = None  # the current run's [count, first token] in its pane
    run_pane = adjusted = run_from = 0  # run_from: where the current run began (all taken since)
    clock, low, high = _Clock(inp, arrivals), math.inf, -math.inf  # low, high: the run's pane's bounds (none)
    at, n = samples.at, samples.n
    try:
        for i, t in enumerate(ts):
            if i == at:  # lateness and disorder, before the policy touches the event
                at = samples.record(i, arrivals[i], t, newest)
            if earliest <= t < latest and (t >= w or adjusting):  # a valid time (not NaN)
                if t < w:  # 3. out of order: adjusted to the watermark (OrderingStep.judge)
                    t = w
                    adjusted += 1
                if not low <= t < high:  # 4. into the pane's state for the key
                    pane = int((t - origin) // step)  # t is a time here: an int
                    if state is None or pane != run_pane:
                        _counted(state, i - run_from)
                        run_from, run_pane = i, pane
                        store.watermark = w  # scheduling skips windows closed at w
                        state, next_close = _pane_state(flow, inp, store, pane, events.token_at(i))
                        low = origin + pane * step
                        high = low + step
                if t > newest:  # 5. the watermark (generation every event)
                    newest = t
                    if t - delay > w:
                        w = t - delay
                        if w >= next_close:  # 6. what it passed closes, with this run counted
                            state[0] += i + 1 - run_from  # type: ignore[index]
                            run_from = i + 1
                            inp.max_timestamp = newest
                            next_close = _close(flow, inp, store, w, round(arrivals[i] * PER_SECOND), out)
                            state, low, high = None, math.inf, -math.inf
                continue
            # A time to refuse, or out of order under drop or accept: the per-event way.
            _counted(state, i - run_from)
            w, newest, next_close = clock.divert(ingest, flow, store, events, i, w, newest, out)
            state, low, high = None, math.inf, -math.inf
    finally:
        samples.done(at)
    _counted(state, n - run_from)
    inp.value, inp.max_timestamp, store.watermark = w, newest, w
    clock.done(n)
    _count(flow, n - clock.diverted, adjusted)


def time_column(timestamp_of: Callable[[Any], int] | None, values: list[Any], times: list[Any]) -> list[float]:
    """Each event's time as integer microseconds, or :data:`NOT_A_TIME` for one the
    per-event way refuses (or reads, when not a number): the event's own seconds, or a
    field of its value in the timestamp reader's unit (``policy.micros_of`` for a number).

    >>> time_column(None, [{}, {}], [0.3, float("nan")])
    [300000, inf]
    """
    field = getattr(timestamp_of, "field", None)
    per_us = PER_SECOND // getattr(timestamp_of, "per_second", 1)
    raws = times if field is None else [v.get(field) if type(v) is dict else None for v in values]
    return [
        r * per_us
        if type(r) is int
        else round(r * per_us)
        if type(r) is float and -MAX_SECONDS < r < MAX_SECONDS  # not NaN, nor huge
        else NOT_A_TIME
        for r in raws
    ]


def _pane_state(flow: WatermarkFlow, inp: Input, store: WindowStore, pane: int, token: Any) -> tuple[list[Any], float]:
    """The ``[count, first token]`` of pane ``pane`` (opened if new), and the store's next close."""
    bucket = store.panes.get(pane)
    if bucket is None:
        bucket = flow.open_pane(inp, store, pane)
    state = bucket.get(None)
    if state is None:
        state = bucket[None] = [0, token]
    return state, store.next_close


def _close(flow: WatermarkFlow, inp: Input, store: WindowStore, w: float, clock: int, out: Output) -> float:
    """Step 6 at watermark ``w``: the store's next close after."""
    inp.value = store.watermark = w
    flow.close([store], clock, out)
    return store.next_close


def _counted(state: list[Any] | None, events: int) -> None:
    """A run's ``events`` counted into its pane's state (None: no run)."""
    if state is not None:
        state[0] += events


def _count(flow: WatermarkFlow, taken: int, adjusted: int) -> None:
    counters = flow.counters
    counters.events += taken
    if adjusted:  # a rare count: its list is made, and read, only when there is one
        counters.adjusted += adjusted
        counters.out_of_order_adjusted += adjusted


class _Clock:
    """The input's processing clock over a batch of columns: the newest arrival, taken over
    the arrivals since it was last needed (with ``max`` in C), not event by event."""

    __slots__ = ("inp", "arrivals", "since", "diverted")

    def __init__(self, inp: Input, arrivals: list[float]) -> None:
        self.inp, self.arrivals, self.since, self.diverted = inp, arrivals, 0, 0

    def upto(self, i: int) -> None:
        """The clock past the arrivals before ``i``."""
        if i > self.since:
            self.inp.clock = max(self.inp.clock, round(max(self.arrivals[self.since : i]) * PER_SECOND))

    def divert(
        self,
        ingest: PerEvent,
        flow: WatermarkFlow,
        store: WindowStore,
        events: Any,
        i: int,
        w: float,
        newest: float,
        out: Output,
    ) -> tuple[float, float, float]:
        """Event ``i`` the per-event way (sampled here, not again), from the watermark ``w``
        and newest time the run left, the clock up to it first: the watermark, newest time
        and next close after."""
        inp = self.inp
        inp.value, inp.max_timestamp, store.watermark = w, newest, w
        self.upto(i)
        ingest.run(flow, inp, [events.event_at(i)], out)
        self.since = i + 1
        self.diverted += 1
        return inp.value, inp.max_timestamp, store.next_close

    def done(self, n: int) -> None:
        self.upto(n)


class Samples:
    """Which events of a batch of ``n`` are sampled into ``sampler`` (lateness, disorder):
    ``at``, the position of the next (past the batch: none). The runs read it by position,
    the per-event way by identity (:meth:`first`, :meth:`take`)."""

    __slots__ = ("sampler", "at", "n")

    def __init__(self, sampler: LatenessSketch | None, n: int) -> None:
        self.sampler, self.n = sampler, n
        self.at = n + 1 if sampler is None else sampler.due - 1  # n + 1: never due

    def record(self, i: int, arrival: float, t: float, newest: float) -> int:
        """Sample event ``i`` (at time ``t``): the position of the next one due."""
        assert self.sampler is not None
        if not EARLIEST_US <= t < LATEST_US:
            return -1  # a refused time: as in run(), the next batch's first is due instead
        self.sampler.record(arrival, t / PER_SECOND, newest / PER_SECOND, None)
        return i + self.sampler.every

    def first(self, events: Sequence[Any]) -> object:
        """The event of ``events`` due next (None: none of them)."""
        return events[self.at] if self.at < self.n else None

    def take(self, events: Sequence[Any], arrival: int, t: int, newest: float, substream: Hashable) -> object:
        """Sample the event due (arriving at ``arrival``, at time ``t``): the next one due."""
        assert self.sampler is not None
        self.at += self.sampler.every
        self.sampler.record(arrival / PER_SECOND, t / PER_SECOND, newest / PER_SECOND, substream)
        return self.first(events)

    def done(self, at: int | None = None) -> None:
        """The sampler's next due, in the next batch (its first, if this one's was refused)."""
        at = self.at if at is None else at
        if self.sampler is not None:
            self.sampler.due = at - self.n + 1 if at >= self.n else 1


NO_SAMPLES = Samples(None, 0)
"""The samples of a batch sampled into no sketch: none is ever due (shared, never changed)."""
NO_SAMPLES.at = sys.maxsize
