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
from collections.abc import Callable, Hashable, Iterable
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
    """Steps 1-6 for a batch of columns (see the module's docstring): a run of events
    into one pane adds its count once; an event out of order is adjusted here, as the
    ordering step would (the policy's ``adjust``); any other event goes the per-event way
    (``ingest.run`` of that event alone), from the state as the run left it.

    What an event costs here is kept to its time, its pane and the watermark: the clock
    (the newest arrival) is taken over the arrivals of the events taken since it was last
    needed, with ``max`` in C, and a run's count by where it began; and while an event's
    time (integer microseconds, converted here once) lies within the bounds of the run's
    pane, its pane is not worked out again."""
    store = flow.store
    a = flow.shape.assigner
    assert isinstance(store, WindowStore) and a is not None  # as in_runs says
    values, times, arrivals = events.columns()
    ts_of = ingest.timestamp_of
    field = getattr(ts_of, "field", None)
    # A field's number in its unit, or the event's own seconds, as integer microseconds.
    per_us = PER_SECOND // getattr(ts_of, "per_second", 1)
    step, origin, delay, earliest, latest = a.step, a.origin, flow.shape.delay, EARLIEST_US, LATEST_US
    adjusting = ingest.ordering.adjust
    mark, panes = inp, store.panes  # an input is its own watermark (its mark)
    w, newest, clock, next_close = mark.value, mark.max_timestamp, inp.clock, store.next_close
    state: list[Any] | None = None  # the current run's [count, first token] in its pane
    run_pane = adjusted = diverted = 0
    run_from = 0  # where the current run began: its events are those since, all taken
    clock_from = 0  # the arrivals from here on are not in ``clock`` yet (all taken)
    low, high = math.inf, -math.inf  # the run's pane's bounds (none while no run)
    # Sampled here by position, as run() samples by identity; the one-event runs below
    # (refusals, disorder under drop or accept) are this batch's positions too.
    n = len(values)
    at = every = n + 1  # never due: no sampler
    sample = no_sample
    if sampler is not None:
        at, every, sample = sampler.due - 1, sampler.every, sampler.record
    t: float  # integer microseconds, or NOT_A_TIME
    try:
        for i in range(n):
            # policy.micros_of for a number, inline; anything else goes the per-event way
            raw = times[i] if field is None else values[i].get(field) if type(values[i]) is dict else None
            if type(raw) is int:
                t = raw * per_us
            elif type(raw) is float and -MAX_SECONDS < raw < MAX_SECONDS:  # not NaN, nor huge
                t = round(raw * per_us)
            else:
                t = NOT_A_TIME
            if i == at:  # lateness and disorder, before the policy touches the event
                if earliest <= t < latest:
                    at += every
                    sample(arrivals[i], t / PER_SECOND, newest / PER_SECOND, None)
                else:  # a refused time: as in run(), the next batch's first is due instead
                    at = -1
            if earliest <= t < latest and (t >= w or adjusting):  # a valid time (not NaN)
                if t < w:  # 3. out of order: adjusted to the watermark (OrderingStep.judge)
                    t = w
                    adjusted += 1
                if not low <= t < high:  # 4. into the pane's state for the key
                    pane = int((t - origin) // step)  # t is a time here: an int
                    if state is None or pane != run_pane:
                        if state is not None:
                            state[0] += i - run_from
                        run_from = i
                        bucket = panes.get(pane)
                        if bucket is None:
                            store.watermark = w  # scheduling skips windows closed at w
                            bucket = flow.open_pane(inp, store, pane)
                            next_close = store.next_close
                        state = bucket.get(None)
                        if state is None:
                            state = bucket[None] = [0, events.token_at(i)]
                        run_pane = pane
                        low = origin + pane * step
                        high = low + step
                if t > newest:  # 5. the watermark (generation every event)
                    newest = t
                    if t - delay > w:
                        w = t - delay
                        if w >= next_close:  # 6. what it passed closes, with this run counted
                            state[0] += i + 1 - run_from  # type: ignore[index]
                            run_from = i + 1
                            mark.value, mark.max_timestamp, store.watermark = w, newest, w
                            flow.close([store], round(arrivals[i] * PER_SECOND), out)
                            next_close, state = store.next_close, None
                            low, high = math.inf, -math.inf
                continue
            # A time to refuse, or an event out of order under drop or accept: the
            # per-event way, from the state as it stands here.
            if state is not None:
                state[0] += i - run_from
            if i > clock_from:
                clock = max(clock, round(max(arrivals[clock_from:i]) * PER_SECOND))
            mark.value, mark.max_timestamp, store.watermark, inp.clock = w, newest, w, clock
            ingest.run(flow, inp, [events.event_at(i)], out)  # sampled here, not again
            w, newest, clock, next_close, state = mark.value, mark.max_timestamp, inp.clock, store.next_close, None
            low, high = math.inf, -math.inf
            clock_from = i + 1
            diverted += 1
    finally:
        if sampler is not None:
            sampler.due = at - n + 1 if at >= n else 1
    if state is not None:
        state[0] += n - run_from
    if n > clock_from:
        clock = max(clock, round(max(arrivals[clock_from:n]) * PER_SECOND))
    mark.value, mark.max_timestamp, store.watermark, inp.clock = w, newest, w, clock
    taken = n - diverted
    counters = flow.counters
    counters.events += taken
    if adjusted:  # a rare count: its list is made, and read, only when there is one
        counters.adjusted += adjusted
        counters.out_of_order_adjusted += adjusted


def no_sample(arrival: float, event_time: float, newest: float, substream: Hashable = None) -> None:
    pass  # no sketch attached
