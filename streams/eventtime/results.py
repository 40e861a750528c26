"""What the event-time core hands back: each event's fate, closed windows, watermark steps,
and the :class:`Output` of one call.

>>> out = Output()
>>> out.watermark, out.windows, out.joins, out.trace
(-inf, [], [], [])

What the event-time core makes observable (ASA's job metrics, at least).

:class:`Counters` are updated in place by the processor; :class:`EventTimeMetrics` is a
snapshot with the counters and the watermarks, taken by ``Processor.metrics()``.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from streams.core.deadletters import DeadLetter
from streams.eventtime.policy import EventLike
from streams.eventtime.watermark import NEVER


@dataclass(slots=True)
class Counters:
    """Event counts by fate. An event both late and out of order counts in both families
    (and once in ``adjusted``, when both moved its timestamp).

    ``*_accepted`` count events kept unchanged under ``action="accept"``.
    """

    events: int = 0  # every event observed
    early_arrival: int = 0  # dropped: too far ahead of its arrival time
    late_arrival_adjusted: int = 0
    late_arrival_dropped: int = 0
    late_arrival_accepted: int = 0
    out_of_order_adjusted: int = 0
    out_of_order_dropped: int = 0
    out_of_order_accepted: int = 0
    adjusted: int = 0  # events whose timestamp moved (late, out of order or both), once each
    window_closed: int = 0  # dead-lettered: every window for it had closed
    invalid_timestamp: int = 0  # dead-lettered: TIMESTAMP BY found no usable time
    invalid_value: int = 0  # dead-lettered: its key or aggregate raised
    windows_emitted: int = 0
    idle_timeouts: int = 0
    punctuations: int = 0
    duplicate: int = 0  # dropped: its dedup key was seen within the horizon (last: older snapshots lack it)

    def as_dict(self) -> dict[str, int]:
        """The counts by name (every field an int: no :func:`dataclasses.asdict`, whose deep
        copy costs microseconds an activation when a worker of 100,000 ends or reports).

        >>> Counters(events=3, adjusted=1).as_dict()["adjusted"]
        1
        """
        return {name: getattr(self, name) for name in _COUNTER_NAMES}


_COUNTER_NAMES = tuple(f.name for f in fields(Counters))


@dataclass(frozen=True, slots=True)
class EventTimeMetrics:
    """A snapshot of a processor's metrics.

    - ``watermark``: the merged watermark (the only one with a single input);
    - ``watermarks``: each input's (partition's) watermark;
    - ``substream_watermarks``: each substream's, when substreams are on;
    - ``delay``: processing clock minus the merged watermark (ASA's *watermark delay*);
    - ``holder``: the input holding the merged watermark back (None with a single input).
    """

    counters: dict[str, int]
    watermark: float
    watermarks: dict[Hashable, float]
    substream_watermarks: dict[Hashable, float] = field(default_factory=dict)
    delay: float = 0.0
    holder: Hashable | None = None
    open_windows: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# An event's fate (EventOutcome.status).
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
    ``record`` is the event as the processor was given it (an
    :class:`~streams.eventtime.policy.EventLike`; the runtime's carries ``stream_id`` too).
    """

    record: EventLike
    partition: Hashable
    key: Hashable
    event_time: float | None
    timestamp: float | None
    status: str
    reason: str | None

    def with_value(self, value: object) -> EventOutcome:
        """This outcome carrying ``value`` instead (an enriched event): same stream,
        position and timestamp, so a handoff recognises it on a replay.

        >>> from types import SimpleNamespace as NS
        >>> e = EventOutcome(NS(value={"axles": 2}, stream_id="tolls/k"), "tolls", None, 1.0, 1.0, KEPT, None)
        >>> e.with_value({"axles": 2, "price": 7.5}).record.value, e.record.value
        ({'axles': 2, 'price': 7.5}, {'axles': 2})
        """
        record: Any = copy.copy(self.record)  # a record whose value can be set: the runtime's Event
        record.value = value
        return replace(self, record=record)


@dataclass(frozen=True, slots=True)
class WindowResult:
    """One closed window of one key (``key`` None for global windows).

    ``closed_at`` is the processing clock when it closed (None when closed by ``flush``);
    ``final`` is True when a +infinity watermark (flush, completion) closed it.

    >>> WindowResult("a", 0.0, 10.0, 3, closed_at=12.0).final
    False
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


@dataclass(frozen=True, slots=True)
class JoinResult:
    """One pair of an interval join (``right`` None: a left event with no partner, with
    ``how="left"``), emitted once the merged watermark has passed ``left.timestamp +
    upper``. ``closed_at`` and ``final`` as :class:`WindowResult`.

    >>> from types import SimpleNamespace as NS
    >>> left = EventOutcome(NS(value={"page": "/a"}), "clicks", "u1", 1.0, 1.0, KEPT, None)
    >>> right = EventOutcome(NS(value={"total": 9.5}), "orders", "u1", 4.0, 4.0, KEPT, None)
    >>> JoinResult("u1", left, right, 20.0).columns()
    {'right_time': 4.0, 'left_page': '/a', 'right_total': 9.5}
    """

    key: Hashable
    left: EventOutcome
    right: EventOutcome | None
    closed_at: float | None
    final: bool = False

    def as_event(self) -> EventOutcome:
        """The pair as its left event carrying :meth:`columns`: what an ``EventHandoff``
        hands to Spark (``event_time`` the left's timestamp, ``stream_id`` its stream; every
        pair of a left event shares its queue position, so a replay skips them together)."""
        return self.left.with_value(self.columns())

    def columns(self) -> dict[str, Any]:
        """Both sides' fields as one flat row (what a handoff of pairs writes): the right
        event's timestamp as ``right_time``, each field of a side's mapping value as
        ``left_NAME`` / ``right_NAME`` (a value that is no mapping as ``left`` / ``right``)."""
        row: dict[str, Any] = {"right_time": None if self.right is None else self.right.timestamp}
        for side, outcome in (("left", self.left), ("right", self.right)):
            if outcome is None:
                continue
            value = getattr(outcome.record, "value", None)
            if isinstance(value, dict):
                row.update((f"{side}_{name}", v) for name, v in value.items())
            else:
                row[side] = value
        return row


TraceItem = EventOutcome | WindowResult | WatermarkAdvance
"""One step of a processor's trace, in causal order."""


@dataclass(slots=True)
class Output:
    """What one call to the processor produced.

    - ``windows``: closed windows, in order of end;
    - ``dead_letters``: everything dropped or refused, each with its reason and record;
    - ``events``: without a window or join, the events that passed the ordering policy
      with their timestamps (the stream a non-windowed consumer sees);
    - ``joins``: with an interval join, the pairs (and unmatched left events) it emitted;
    - ``watermark``: the processor's watermark after the call;
    - ``trace``: with ``trace=True``, every outcome, window and watermark step in causal order.
    """

    windows: list[WindowResult] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    events: list[EventOutcome] = field(default_factory=list)
    joins: list[JoinResult] = field(default_factory=list)
    watermark: float = NEVER
    trace: list[TraceItem] = field(default_factory=list)
