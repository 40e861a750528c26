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
from dataclasses import asdict, dataclass, field, replace
from typing import Any, overload

from streams.core.deadletters import DeadLetter
from streams.eventtime.policy import EventLike
from streams.eventtime.watermark import NEVER

# Every count, in the order snapshots keep them (a count added since goes last: an older
# snapshot leaves it 0).
COUNTER_NAMES = (
    "events",  # every event observed
    "early_arrival",  # dropped: too far ahead of its arrival time
    "late_arrival_adjusted",
    "late_arrival_dropped",
    "late_arrival_accepted",
    "out_of_order_adjusted",
    "out_of_order_dropped",
    "out_of_order_accepted",
    "adjusted",  # events whose timestamp moved (late, out of order or both), once each
    "window_closed",  # dead-lettered: every window for it had closed
    "invalid_timestamp",  # dead-lettered: TIMESTAMP BY found no usable time
    "invalid_value",  # dead-lettered: its key or aggregate raised
    "windows_emitted",
    "idle_timeouts",
    "punctuations",
    "duplicate",  # dropped: its dedup key was seen within the horizon
    "early_results",  # updates emitted before a window's final result (emit=Every)
    "joins_emitted",  # an interval join's results: pairs, and lonely events of an outer join
)
# The counts most streams never move: kept in a list made at the first of them.
_RARE = tuple(name for name in COUNTER_NAMES if name not in ("events", "windows_emitted"))


class _Rare:
    """One of the rare counts of :class:`Counters` (0 until its list is made)."""

    __slots__ = ("index",)

    def __init__(self) -> None:
        self.index = -1

    def __set_name__(self, owner: type, name: str) -> None:
        self.index = _RARE.index(name)

    @overload
    def __get__(self, counters: None, owner: type) -> _Rare: ...

    @overload
    def __get__(self, counters: Counters, owner: type) -> int: ...

    def __get__(self, counters: Counters | None, owner: type) -> int | _Rare:
        if counters is None:
            return self
        rare = counters._rare
        return 0 if rare is None else rare[self.index]

    def __set__(self, counters: Counters, value: int) -> None:
        rare = counters._rare
        if rare is None:
            if not value:
                return
            rare = counters._rare = [0] * len(_RARE)
        rare[self.index] = value


class Counters:
    """Event counts by fate. An event both late and out of order counts in both families
    (and once in ``adjusted``, when both moved its timestamp).

    ``*_accepted`` count events kept unchanged under ``action="accept"``.

    A stream's activation holds one: the two counts every stream moves (``events``,
    ``windows_emitted``) are its own, the others (an event refused or adjusted, an idle
    timeout) share a list made at the first of them (56 bytes where a slot for each count
    would take 160).

    >>> c = Counters(events=3, adjusted=1)
    >>> c.adjusted += 1
    >>> c.adjusted, c.duplicate, c == Counters(events=3, adjusted=2), c == Counters(events=3)
    (2, 0, True, False)
    >>> Counters(windows_emitted=1)
    Counters(events=0, early_arrival=0, ..., windows_emitted=1, idle_timeouts=0, punctuations=0, duplicate=0, early_results=0, joins_emitted=0)
    """

    __slots__ = ("events", "windows_emitted", "_rare")

    early_arrival = _Rare()
    late_arrival_adjusted = _Rare()
    late_arrival_dropped = _Rare()
    late_arrival_accepted = _Rare()
    out_of_order_adjusted = _Rare()
    out_of_order_dropped = _Rare()
    out_of_order_accepted = _Rare()
    adjusted = _Rare()
    window_closed = _Rare()
    invalid_timestamp = _Rare()
    invalid_value = _Rare()
    idle_timeouts = _Rare()
    punctuations = _Rare()
    duplicate = _Rare()
    early_results = _Rare()
    joins_emitted = _Rare()

    def __init__(self, events: int = 0, windows_emitted: int = 0, **rare: int) -> None:
        self.events = events
        self.windows_emitted = windows_emitted
        self._rare: list[int] | None = None
        for name, value in rare.items():
            if name not in _RARE:
                raise TypeError(f"Counters() got an unexpected keyword argument {name!r}")
            setattr(self, name, value)

    def as_dict(self) -> dict[str, int]:
        """The counts by name.

        >>> Counters(events=3, adjusted=1).as_dict()["adjusted"]
        1
        """
        return {name: getattr(self, name) for name in COUNTER_NAMES}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Counters):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        counts = ", ".join(f"{name}={value}" for name, value in self.as_dict().items())
        return f"Counters({counts})"


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
    """One window's result for one key (``key`` None for global windows).

    ``final`` is True for the result a window emits once, when it closes; False for an
    update of a window declared with ``emit=Every(...)`` (``docs/event-time.md``, "Early and
    updated results"), which holds what the window has accepted so far. ``revision`` counts
    a window's results, 0, 1, 2, ...: its final result has the highest (0 for a window that
    emitted no update). ``closed_at`` is the processing clock when it was emitted (None when
    closed by ``flush``, or by a completion that carries no clock).

    >>> WindowResult("a", 0.0, 10.0, 3, closed_at=12.0)
    WindowResult(key='a', start=0.0, end=10.0, value=3, closed_at=12.0, final=True, revision=0)
    """

    key: Hashable
    start: float
    end: float
    value: Any
    closed_at: float | None
    final: bool = True
    revision: int = 0


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
    upper``. ``closed_at`` as :class:`WindowResult`; ``final`` is True when a +infinity
    watermark (flush, completion) emitted it.

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

    - ``windows``: closed windows' results, in order of end, and updates (``final=False``)
      where they fall due;
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
