"""Replaying a recorded sample through the core: what ``headrace simulate`` runs.

Pure like the rest of the core: rows in, the processor's trace out, plus the summary a
tolerance sweep prints. Reading files and printing are the CLI's business.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any, cast

from streams.eventtime.aggregates import Collect
from streams.eventtime.dedup import Dedup
from streams.eventtime.policy import EventLike, OrderingPolicy, Reason
from streams.eventtime.processor import Processor
from streams.eventtime.results import ADJUSTED, DEAD_LETTER, DROPPED, KEPT, EventOutcome, TraceItem, WindowResult
from streams.eventtime.windows import WindowSpec

_key = attrgetter("key")  # one object, so that ``over`` and ``group_by`` name the same key
_ROW_FIELDS = {"key": _key, "value": attrgetter("value")}


def row_dedup(by: str, within: float) -> Dedup:
    """A replay's dedup: rows with the same ``key`` or ``value`` (``by``) within ``within``.

    >>> row_dedup("value", 60).within
    60.0
    """
    return Dedup(key=_ROW_FIELDS[by], within=within)


_index = attrgetter("index")


@dataclass(frozen=True, slots=True)
class Row:
    """One observation of a sample: an event, or a tick when ``event_time`` is None.

    ``index`` is its position among the sample's rows; it is also the event's token.
    """

    index: int
    arrival_time: float
    event_time: float | None
    key: Hashable = None
    value: object = None

    @property
    def token(self) -> int:
        return self.index


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """The processor a replay builds: the policy, the window (its count per window lists
    event indexes), whether windows are per key, whether to flush at the end, and the
    dedup (its key a row's ``key`` or ``value``: :func:`row_dedup`)."""

    policy: OrderingPolicy = field(default_factory=OrderingPolicy)
    window: WindowSpec | None = None
    group_by_key: bool = False
    flush: bool = False
    dedup: Dedup | None = None

    def with_setting(self, name: str, value: float | None) -> ReplayOptions:
        """These options with one tolerance changed (what a sweep varies).

        >>> ReplayOptions().with_setting("out_of_order", 30.0).policy.out_of_order
        30.0
        """
        change: dict[str, Any] = {name: value}  # a field named at run time
        if name in ("allowed_lateness", "idle_timeout"):
            if self.window is None:
                raise ValueError(f"{name} needs a window")
            return replace(self, window=replace(self.window, **change))
        return replace(self, policy=replace(self.policy, **change))


def replay(rows: Iterable[Row], options: ReplayOptions) -> list[TraceItem]:
    """Run ``rows`` through a fresh processor; every outcome, window and watermark step, in
    causal order. Consecutive events go in one call, as a runtime batch would."""
    policy = options.policy
    if policy.over is not None:
        policy = replace(policy, over=_key)
    processor = Processor(
        policy,
        options.window,
        Collect(),
        select=_index,
        group_by=_key if options.group_by_key or policy.over is not None else None,
        trace=True,
        dedup=options.dedup,
    )
    trace: list[TraceItem] = []
    # Rows with an event time: EventLike, though Row's type allows None (a tick).
    batch: list[Row] = []
    for row in rows:
        if row.event_time is not None:
            batch.append(row)
            continue
        if batch:
            trace.extend(processor.on_events(cast("list[EventLike]", batch)).trace)
            batch = []
        trace.extend(processor.on_tick(row.arrival_time).trace)
    if batch:
        trace.extend(processor.on_events(cast("list[EventLike]", batch)).trace)
    if options.flush:
        trace.extend(processor.flush().trace)
    return trace


@dataclass(frozen=True, slots=True)
class Summary:
    """What a tolerance setting did to a sample (one line of a sweep).

    ``mean_delay``: mean processing time from an event's arrival until its result is final
    (its first window closed; without windows, its watermark passed its timestamp), over the
    events that became final before the end of the sample; NaN when none did.
    """

    events: int
    adjusted: int
    dropped: int
    dead_lettered: int
    windows: int
    mean_delay: float
    duplicates: int = 0  # of the dropped: by Dedup


def summarize(rows: Sequence[Row], trace: Iterable[TraceItem], options: ReplayOptions) -> Summary:
    """Count fates and measure output delay in the trace of ``replay(rows, options)``."""
    arrival = {row.index: row.arrival_time for row in rows}
    substreams, windowed = options.policy.over is not None, options.window is not None
    statuses: Counter[str] = Counter()
    duplicates = 0
    windows = 0
    final_at: dict[int, float] = {}  # event index -> processing time its result became final
    waiting: dict[Hashable, list[tuple[float, int]]] = {}  # lane -> heap of (timestamp, index)
    for item in trace:
        if isinstance(item, EventOutcome):
            statuses[item.status] += 1
            duplicates += item.reason == Reason.DUPLICATE
            if not windowed and item.status in (KEPT, ADJUSTED):
                assert item.timestamp is not None  # only a dropped event has none
                lane = item.key if substreams else None
                heapq.heappush(waiting.setdefault(lane, []), (item.timestamp, item.record.token))
        elif isinstance(item, WindowResult):
            windows += 1
            if item.closed_at is not None:
                for index in item.value:
                    final_at.setdefault(index, item.closed_at)
        elif not windowed and item.arrival_time is not None:
            # A timestamp equal to the watermark may still come: final only once it is passed.
            # With substreams, the partition's watermark (substream None) is every lane's floor.
            lanes = waiting.values() if substreams and item.substream is None else [waiting.get(item.substream)]
            for heap in lanes:
                while heap and heap[0][0] < item.watermark:
                    final_at.setdefault(heapq.heappop(heap)[1], item.arrival_time)
    delays = [t - arrival[i] for i, t in final_at.items()]
    return Summary(
        events=sum(statuses.values()),
        adjusted=statuses[ADJUSTED],
        dropped=statuses[DROPPED],
        dead_lettered=statuses[DEAD_LETTER],
        windows=windows,
        mean_delay=sum(delays) / len(delays) if delays else math.nan,
        duplicates=duplicates,
    )
