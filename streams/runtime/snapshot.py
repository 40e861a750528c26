"""A worker's live state, read in one pass into plain values.

Everything here is read on the worker's event loop, from counters the runtime keeps anyway
(agents, caches, consumers, event-time processors): taking a snapshot adds nothing to the
hot path. The Prometheus collector and the demo's status line both start from one.

>>> import anyio
>>> from streams import StreamProvider
>>> async def main():
...     async with StreamProvider.memory(queues=2, worker_name="w1") as provider:
...         return take_snapshot(provider)
>>> snapshot = anyio.run(main)
>>> snapshot.worker, [q.queue for q in snapshot.queues]
('w1', [0, 1])
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agents.counters import HistogramSnapshot
from agents.delivery import StreamConsumer
from agents.merged_inputs import holding_back
from agents.pulling_agent import PullingAgent
from streams.adapters.status import CheckpointHolder, CursorLag
from streams.core.clock import wall_time
from streams.core.deadletters import DeadLetterStore
from streams.eventtime.lateness import ObservedTimes
from streams.eventtime.policy import Reason
from streams.eventtime.results import Counters
from streams.runtime.provider import StreamProvider

# Every reason the runtime dead-letters with; an adapter's own reasons count as "other".
DEAD_LETTER_REASONS: tuple[str, ...] = (
    *(reason.value for reason in Reason),
    "undecodable",
    "too_large",
    "delivery_failed",
    "activation_failed",
    "window_failed",
    "timer_failed",
    "handoff_failed",
)


@dataclass(frozen=True, slots=True)
class EventTimeTotals:
    """The event-time activations of some streams, added up.

    ``counters``: the processors' :class:`~streams.eventtime.results.Counters`, summed.
    ``watermark``: the lowest watermark among activations still running (None when none has
    one: not started, or every stream completed); ``delay``: the highest watermark delay
    among them (processing clock minus watermark, ASA's *watermark delay*).
    ``inputs``: for activations with several inputs, the lowest watermark of each input
    among those that have one (``-inf`` while none has);
    ``holding``: how many of them each input holds back (it is their lowest input, behind
    another). ``slowest``: the :data:`SLOWEST` substreams with the lowest watermarks
    (``(stream/key, watermark)``, lowest first), not a metric label per key.
    """

    activations: int = 0
    counters: Mapping[str, int] = field(default_factory=lambda: Counters().as_dict())
    watermark: float | None = None
    delay: float | None = None
    open_windows: int = 0
    inputs: Mapping[str, float] = field(default_factory=dict)
    holding: Mapping[str, int] = field(default_factory=dict)
    slowest: tuple[tuple[str, float], ...] = ()

    @property
    def late(self) -> int:
        c = self.counters
        return c["late_arrival_adjusted"] + c["late_arrival_dropped"] + c["late_arrival_accepted"]

    @property
    def out_of_order(self) -> int:
        c = self.counters
        return c["out_of_order_adjusted"] + c["out_of_order_dropped"] + c["out_of_order_accepted"]

    @property
    def dropped(self) -> int:
        """Events the ordering policy dropped (early, or late/out of order under ``drop``),
        and duplicates (``Dedup``)."""
        c = self.counters
        return c["early_arrival"] + c["late_arrival_dropped"] + c["out_of_order_dropped"] + c["duplicate"]

    @property
    def refused(self) -> int:
        """Events the core dead-lettered itself: no usable timestamp, every window closed, or
        a key or aggregate that raised."""
        c = self.counters
        return c["window_closed"] + c["invalid_timestamp"] + c["invalid_value"]

    @classmethod
    def combine(cls, parts: Iterable[EventTimeTotals]) -> EventTimeTotals:
        parts = list(parts)
        counters = dict(Counters().as_dict())
        for part in parts:
            for name, value in part.counters.items():
                counters[name] += value
        marks = [p.watermark for p in parts if p.watermark is not None]
        delays = [p.delay for p in parts if p.delay is not None]
        inputs: dict[str, float] = {}
        holding: dict[str, int] = {}
        for part in parts:
            for name, mark in part.inputs.items():  # the lowest one that has a watermark
                known = inputs.get(name)
                if known is None or not math.isfinite(known) or (math.isfinite(mark) and mark < known):
                    inputs[name] = mark
            for name, n in part.holding.items():
                holding[name] = holding.get(name, 0) + n
        return cls(
            activations=sum(p.activations for p in parts),
            counters=counters,
            watermark=min(marks) if marks else None,
            delay=max(delays) if delays else None,
            open_windows=sum(p.open_windows for p in parts),
            inputs=inputs,
            holding=holding,
            slowest=_slowest(pair for p in parts for pair in p.slowest),
        )


SLOWEST_SHOWN = 3  # cursors per queue in a snapshot


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One pulling agent: its queue, cache, consumers and event-time activations.

    ``events_read``: events in the data records read; ``events_delivered``: events delivered,
    summed over the consumers (an event two consumers take counts twice); ``slowest``: the
    consumers furthest behind, at most :data:`SLOWEST_SHOWN`, slowest first (none caught up).
    ``observed``: per event-time consumer type, the lateness and disorder of a sample of its
    events over the last hour (``observed[name].quantiles("lateness")``: p50, p99, p99.9).
    """

    queue: int
    records_read: int
    read_failures: int
    pressure_skips: int
    read_latency: HistogramSnapshot
    cache_size: int
    cache_max_size: int
    under_pressure: bool
    streams: int
    consumers: int
    delivered_batches: int
    delivery_failures: int
    faulted: int
    event_time: EventTimeTotals
    events_read: int = 0
    events_delivered: int = 0
    slowest: tuple[CursorLag, ...] = ()
    # per consumer type: fates_of, and its activations here (active, parked)
    fates: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    failed: str | None = None  # why the queue cannot be read on (its agent stopped); None: reading
    # per consumer type: lateness and disorder sampled over the last hour (streams.eventtime.lateness)
    observed: Mapping[str, ObservedTimes] = field(default_factory=dict)
    checkpoint_holder: CheckpointHolder | None = None  # what holds the checkpoint back (checkpoint_holder)


def fates_of(counters: Mapping[str, int]) -> dict[str, int]:
    """What event time did to the events of some activations, from their counters: every
    event seen, and how many were adjusted, dropped by the ordering policy, and dead-lettered
    by the core (no usable timestamp or value, every window closed); and the results it
    emitted: windows' final results (``windows_emitted``), the updates before them
    (``early_results``, ``emit=Every(...)``) and an interval join's results (``joins_emitted``).

    >>> fates_of({**Counters(events=9, adjusted=2, early_arrival=1, invalid_timestamp=1, windows_emitted=3).as_dict()})
    {'events': 9, 'adjusted': 2, 'dropped': 1, 'dead_lettered': 1, 'windows_emitted': 3, 'early_results': 0, 'joins_emitted': 0}
    """
    totals = EventTimeTotals(counters={**Counters().as_dict(), **counters})
    return {
        "events": totals.counters["events"],
        "adjusted": totals.counters["adjusted"],
        "dropped": totals.dropped,
        "dead_lettered": totals.refused,
        "windows_emitted": totals.counters["windows_emitted"],
        "early_results": totals.counters["early_results"],
        "joins_emitted": totals.counters["joins_emitted"],
    }


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One worker's agents at ``taken_at`` (POSIX seconds)."""

    worker: str
    taken_at: float
    queues: tuple[QueueSnapshot, ...]

    @property
    def event_time(self) -> EventTimeTotals:
        return EventTimeTotals.combine(q.event_time for q in self.queues)

    @property
    def records_read(self) -> int:
        return sum(q.records_read for q in self.queues)


def take_snapshot(provider: StreamProvider) -> WorkerSnapshot:
    """Read ``provider``'s agents now. Call it on the provider's event loop (the state it
    reads changes there); a worker that is not running has no queues."""
    agents = sorted(provider.agents, key=lambda a: a.queue.number)
    return WorkerSnapshot(provider.worker_name, wall_time(), tuple(_queue(a) for a in agents))


def _queue(agent: PullingAgent) -> QueueSnapshot:
    consumers = [c for sid in agent.stream_ids() for c in agent.consumers(sid)]
    cache = agent.cache
    slowest = slowest_cursors(agent.last_read_sequence, consumers)
    return QueueSnapshot(
        queue=agent.queue.number,
        records_read=agent.read_messages,
        read_failures=agent.read_failures,
        pressure_skips=agent.pressure_skips,
        read_latency=agent.read_latency.snapshot(),
        cache_size=cache.size,
        cache_max_size=cache.max_size,
        under_pressure=cache.is_under_pressure(),
        streams=len(agent.stream_ids()),
        consumers=len(consumers),
        delivered_batches=sum(c.delivered_batches for c in consumers),
        delivery_failures=sum(c.failures for c in consumers),
        faulted=sum(1 for c in consumers if c.faulted),
        event_time=_event_time(agent),
        events_read=agent.read_events,
        events_delivered=sum(c.delivered_events for c in consumers),
        slowest=slowest,
        fates=_fates(agent),
        failed=agent.failure,
        observed=agent.observed_times(),
        checkpoint_holder=checkpoint_holder(agent, slowest),
    )


def checkpoint_holder(agent: PullingAgent, slowest: tuple[CursorLag, ...]) -> CheckpointHolder | None:
    """What holds ``agent``'s checkpoint back: the activation holding the oldest position
    activations hold, or the consumer furthest behind (``slowest[0]``), whichever needs the
    older position (the activation when both need the same: it says why); None when
    neither holds one."""
    held = agent.holding_activation()
    behind = slowest[0] if slowest else None
    if held is not None and (behind is None or held[2] <= behind.next_sequence):
        (consumer_type, stream), activation, position = held
        why, input_name = activation.holding()
        return CheckpointHolder(position, stream, consumer_type, None, input_name, why)
    if behind is not None:
        return CheckpointHolder(behind.next_sequence, behind.stream, None, behind.subscription, None, "behind")
    return None


def _fates(agent: PullingAgent) -> dict[str, dict[str, int]]:
    """Per consumer type: its events' fates, windows emitted, the events delivered to its
    consumers (``events_out``, plain consumers' too), and its activations here, ``active``
    and ``parked`` (state kept, no stream running)."""
    fates = {
        name: {**fates_of(counters), "events_out": counters.get("events_out", 0)}
        for name, counters in agent.fates_by_type().items()
    }
    for name, (active, parked) in agent.activations_by_type().items():
        fates.setdefault(name, fates_of({}))
        fates[name].update(active=active, parked=parked)
    return fates


def slowest_cursors(
    last_read: int | None, consumers: Iterable[StreamConsumer], n: int = SLOWEST_SHOWN
) -> tuple[CursorLag, ...]:
    """The ``n`` consumers furthest behind ``last_read`` (the newest record the agent read),
    slowest first; a caught-up consumer is not behind."""
    if last_read is None:
        return ()
    lags = []
    for consumer in consumers:
        cursor = consumer.cursor
        item = None if cursor.needs_fill else cursor.current()
        position = cursor.position if cursor.needs_fill else None if item is None else item.sequence
        if position is not None and position <= last_read:
            lags.append(
                CursorLag(str(consumer.stream_id), consumer.subscription_id, position, last_read - position + 1)
            )
    return tuple(heapq.nsmallest(n, lags, key=lambda lag: (-lag.behind, lag.stream, lag.subscription)))


def _event_time(agent: PullingAgent) -> EventTimeTotals:
    parts = []
    for activation in agent.event_time_activations():
        m = activation.processor.metrics()
        running = math.isfinite(m.watermark)  # not before the first event, not completed
        merged = activation.processor.merged
        inputs, holding = {}, {}
        if merged is not None:  # several inputs: each one's watermark, and who holds them back
            inputs = {str(k): v for k, v in m.watermarks.items()}  # -inf: none yet
            holder = holding_back(merged)
            holding = {} if holder is None else {str(holder): 1}
        slowest = _slowest((f"{activation.stream_id}:{key}", mark) for key, mark in m.substream_watermarks.items())
        parts.append(
            EventTimeTotals(
                activations=1,
                counters=m.counters,
                watermark=m.watermark if running else None,
                delay=m.delay if running and math.isfinite(m.delay) else None,
                open_windows=m.open_windows,
                inputs=inputs,
                holding=holding,
                slowest=slowest,
            )
        )
    return EventTimeTotals.combine(parts)


SLOWEST = 3  # substreams shown per queue: the ones holding their windows back the longest


def _slowest(pairs: Iterable[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    running = ((name, mark) for name, mark in pairs if math.isfinite(mark))
    return tuple(heapq.nsmallest(SLOWEST, running, key=lambda pair: (pair[1], pair[0])))


async def dead_letter_counts(store: DeadLetterStore) -> dict[str, int]:
    """Dead letters kept in ``store``, by reason (``other`` for reasons not listed in
    :data:`DEAD_LETTER_REASONS`). The store is shared: every worker of it sees the same."""
    total = await store.count()  # first: a letter added meanwhile is in a reason's count, not also in "other"
    counts = {reason: await store.count(reason) for reason in DEAD_LETTER_REASONS}
    counts["other"] = max(0, total - sum(counts.values()))
    return counts
