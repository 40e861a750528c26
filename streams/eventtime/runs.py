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

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from streams.eventtime.flow import WatermarkFlow
from streams.eventtime.lateness import LatenessSketch
from streams.eventtime.ordering import OrderingStep
from streams.eventtime.parts import Input
from streams.eventtime.policy import EARLIEST, LATEST, EventLike
from streams.eventtime.results import Output
from streams.eventtime.windows import WindowStore


class PerEvent(Protocol):
    """What the runs need of the per-event way (``streams.eventtime.ingest.Ingest``)."""

    ordering: OrderingStep
    timestamp_of: Callable[[Any], float] | None

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
    """Steps 1-6 for a batch of columns (see the module's docstring): a run of events
    into one pane adds its count once; an event out of order is adjusted here, as the
    ordering step would (the policy's ``adjust``); any other event goes the per-event way
    (``ingest.run`` of that event alone), from the state as the run left it."""
    store = flow.store
    a = flow.shape.assigner
    assert isinstance(store, WindowStore) and a is not None  # as in_runs says
    values, times, arrivals = events.columns()
    ts_of = ingest.timestamp_of
    field = getattr(ts_of, "field", None)
    per_second = getattr(ts_of, "per_second", 1)
    step, origin, delay, earliest, latest = a.step, a.origin, flow.shape.delay, EARLIEST, LATEST
    adjusting = ingest.ordering.adjust
    mark, panes = inp, store.panes  # an input is its own watermark (its mark)
    w, newest, clock, next_close = mark.value, mark.max_timestamp, inp.clock, store.next_close
    state: list[Any] | None = None  # the current run's [count, first token] in its pane
    run_pane = run = taken = adjusted = 0
    nan = float("nan")
    # Sampled here by position, as run() samples by identity; the one-event runs below
    # (refusals, disorder under drop or accept) are this batch's positions too.
    n = len(values)
    at = every = n + 1  # never due: no sampler
    sample = no_sample
    if sampler is not None:
        at, every, sample = sampler.due - 1, sampler.every, sampler.record
    try:
        for i in range(len(values)):
            arr = arrivals[i]
            if field is None:
                t = times[i]
            else:  # policy.seconds for a number, inline; anything else goes the per-event way
                v = values[i]
                raw = v.get(field) if type(v) is dict else None
                t = raw / per_second if type(raw) is int or type(raw) is float else nan
            if i == at:  # lateness and disorder, before the policy touches the event
                if earliest <= t < latest:
                    at += every
                    sample(arr, t, newest, None)
                else:  # a refused time: as in run(), the next batch's first is due instead
                    at = -1
            if earliest <= t < latest and (t >= w or adjusting):  # a valid time (not NaN)
                if t < w:  # 3. out of order: adjusted to the watermark (OrderingStep.judge)
                    t = w
                    adjusted += 1
                pane = (t - origin) // step
                if state is None or pane != run_pane:  # 4. into the pane's state for the key
                    if run:
                        state[0] += run  # type: ignore[index]
                        run = 0
                    bucket = panes.get(pane)
                    if bucket is None:
                        store.watermark = w  # scheduling skips windows closed at w
                        bucket = flow.open_pane(inp, store, pane)
                        next_close = store.next_close
                    state = bucket.get(None)
                    if state is None:
                        state = bucket[None] = [0, events.token_at(i)]
                    run_pane = pane
                run += 1
                taken += 1
                if arr > clock:
                    clock = arr
                if t > newest:  # 5. the watermark (generation every event)
                    newest = t
                    if t - delay > w:
                        w = t - delay
                        if w >= next_close:  # 6. what it passed closes, with this run counted
                            state[0] += run
                            run = 0
                            mark.value, mark.max_timestamp, store.watermark = w, newest, w
                            flow.close([store], arr, out)
                            next_close, state = store.next_close, None
                continue
            # A time to refuse, or an event out of order under drop or accept: the
            # per-event way, from the state as it stands here.
            if run:
                state[0] += run  # type: ignore[index]
                run = 0
            mark.value, mark.max_timestamp, store.watermark, inp.clock = w, newest, w, clock
            ingest.run(flow, inp, [events.event_at(i)], out)  # sampled here, not again
            w, newest, clock, next_close, state = mark.value, mark.max_timestamp, inp.clock, store.next_close, None
    finally:
        if sampler is not None:
            sampler.due = at - n + 1 if at >= n else 1
    if run:
        state[0] += run  # type: ignore[index]
    mark.value, mark.max_timestamp, store.watermark, inp.clock = w, newest, w, clock
    counters = flow.counters
    counters.events += taken
    if adjusted:  # a rare count: its list is made, and read, only when there is one
        counters.adjusted += adjusted
        counters.out_of_order_adjusted += adjusted


def no_sample(arrival: float, event_time: float, newest: float, substream: Hashable = None) -> None:
    pass  # no sketch attached
