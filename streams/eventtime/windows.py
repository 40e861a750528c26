"""Windows: tumbling, hopping and session specs, the assigner, and the store of open windows.

Window ``j`` spans ``[origin + j*hop, origin + j*hop + size)``. State is kept per *pane*, the
largest slice every window is a whole number of: the window itself for tumbling windows and
for hopping windows with gaps (``hop >= size``), ``gcd(size, hop)`` for overlapping ones. An
event updates one pane whatever the overlap, and a window's result merges its panes
(the reducers' ``merge``). A pane is dropped when the last window containing it closes.

Closing is decided by one watermark: a window is closed once ``W >= end + allowed_lateness``.
Closed is therefore a fact about ``W`` and never about stored state, so a late record cannot
re-open (re-create) a window that was already emitted; it is dead-lettered instead.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Literal

from streams.core.errors import ConfigurationError
from streams.core.micros import to_micros, to_seconds
from streams.eventtime.watermark import FOREVER, NEVER


def _check(name: str, value: Any, *, positive: bool, optional: bool = False) -> None:
    if value is None and optional:
        return
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (to_micros(value) > 0 if positive else value >= 0)  # time is whole microseconds
    )
    if not ok:
        bound = "> 0 (at least 0.000001: time is whole microseconds)" if positive else ">= 0"
        raise ConfigurationError(
            f"{name} must be a number of seconds {bound}{' or None' if optional else ''}, not {value!r}"
        )


@dataclass(frozen=True, slots=True)
class Every:
    """How often a window emits updates before its final result (``emit=`` of a window):
    every ``seconds`` of processing time, or after every ``events`` events it accepted.

    An update is a :class:`~streams.eventtime.results.WindowResult` with ``final=False`` and
    the window's next ``revision`` (0, 1, 2, ...); the final result follows with
    ``final=True`` and the highest one. ``docs/event-time.md``, "Early and updated results",
    says when each fires.

    >>> Tumbling(60, emit=Every(10)).emit
    Every(seconds=10.0, events=None)
    >>> Every(events=100).events
    100
    >>> Every(5, events=3)
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: Every takes seconds or events=N, not both: Every(5, events=3)
    """

    seconds: float | None = None
    events: int | None = None

    def __post_init__(self) -> None:
        shown = f"Every({self.seconds!r}, events={self.events!r})"
        if (self.seconds is None) == (self.events is None):
            raise ConfigurationError(f"Every takes seconds or events=N, not both: {shown}")
        if self.seconds is not None:
            _check("Every's seconds", self.seconds, positive=True)
            object.__setattr__(self, "seconds", float(self.seconds))
        elif not (type(self.events) is int and self.events >= 1):
            raise ConfigurationError(f"Every's events must be a whole number >= 1, not {self.events!r}")


Emit = Literal["final"] | Every
"""A window's emission: its final result only (``"final"``), or updates too (:class:`Every`)."""


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Back-to-back windows of ``size`` seconds (Atlas ``$tumblingWindow``), or of
    ``events`` events of a key (Quix's count windows: ``Tumbling(events=100)``; see
    :mod:`streams.eventtime.counted`).

    ``allowed_lateness``: how long a window stays open after the watermark passes its end.
    ``idle_timeout``: processing time after which an idle source's window closes anyway.
    ``origin``: where window boundaries are aligned (0: the epoch).
    ``emit``: ``"final"`` (the result once, when the window closes) or :class:`Every` (updates
    while it is open, then the final result).

    >>> Tumbling(300).bounds(1)
    (300.0, 600.0)
    >>> Tumbling(events=3).events, Tumbling(events=3).every
    (3, 3)
    >>> Tumbling(300, allowed_lateness=60, emit=Every(30)).emit.seconds
    30.0
    """

    size: float = 0.0  # seconds; 0 for a window of events
    allowed_lateness: float = 0.0
    idle_timeout: float | None = None
    origin: float = 0.0
    events: int | None = None
    emit: Emit = "final"

    def __post_init__(self) -> None:
        if self.events is None:
            _validate(self)
        else:
            _check_counted(self, self.events, self.events)

    @property
    def every(self) -> int | None:
        """How many events apart counted windows start (``events``: back to back)."""
        return self.events

    @property
    def hop(self) -> float:
        return self.size

    def bounds(self, j: int) -> tuple[float, float]:
        """Start and end of window ``j``, in seconds (exact: :mod:`streams.core.micros`)."""
        return window_bounds(self, j)


@dataclass(frozen=True, slots=True)
class Hopping:
    """Windows of ``size`` seconds opening every ``hop`` seconds (Atlas ``$hoppingWindow``),
    or of ``events`` events of a key opening every ``every`` events (Quix's count windows:
    ``Hopping(events=10, every=5)``; see :mod:`streams.eventtime.counted`).

    ``hop < size`` overlaps windows; ``hop > size`` leaves gaps whose events belong to no
    window (likewise ``every`` and ``events``). Other fields as :class:`Tumbling`.

    >>> Hopping(20, 5).bounds(3)
    (15.0, 35.0)
    """

    size: float = 0.0  # seconds; 0 for windows of events
    hop: float = 0.0
    allowed_lateness: float = 0.0
    idle_timeout: float | None = None
    origin: float = 0.0
    events: int | None = None
    every: int | None = None
    emit: Emit = "final"

    def __post_init__(self) -> None:
        if self.events is None and self.every is None:
            _check("hop", self.hop, positive=True)
            _validate(self)
        else:
            _check_counted(self, self.events, self.every)

    def bounds(self, j: int) -> tuple[float, float]:
        """Start and end of window ``j``, in seconds (exact: :mod:`streams.core.micros`)."""
        return window_bounds(self, j)


@dataclass(frozen=True, slots=True)
class Session:
    """Sessions: an event opens ``[t, t + gap)``, and events of one key less than ``gap``
    apart merge into one session ``[earliest, latest + gap)`` (Flink, Spark and ASA session
    windows). A session closes when the watermark passes its end plus ``allowed_lateness``,
    or by ``idle_timeout`` (processing time, as :class:`Tumbling`); it is never reopened, and
    an event that would merge into an emitted one is dead-lettered ``window_closed``. The
    store of open sessions is :mod:`streams.eventtime.sessions`. A session emits its final
    result only: its bounds move as it grows and merges, so an update (``emit=Every(...)``
    of fixed windows) would name a window no later result replaces.

    >>> Session(30).gap, Session(30, allowed_lateness=5).allowed_lateness
    (30.0, 5.0)
    """

    gap: float
    allowed_lateness: float = 0.0
    idle_timeout: float | None = None

    def __post_init__(self) -> None:
        _check("gap", self.gap, positive=True)
        _check("allowed_lateness", self.allowed_lateness, positive=False)
        _check("idle_timeout", self.idle_timeout, positive=False, optional=True)
        object.__setattr__(self, "gap", float(self.gap))
        object.__setattr__(self, "allowed_lateness", float(self.allowed_lateness))


@dataclass(frozen=True, slots=True)
class Sliding:
    """Sliding windows of ``span`` seconds (Kafka Streams' ``SlidingWindows``, time
    difference ``span``, grace ``allowed_lateness``): one window per distinct set of a key's
    events at most ``span`` apart, both bounds included, each closed when the watermark
    passes its end plus ``allowed_lateness``. The store is :mod:`streams.eventtime.sliding`.

    >>> Sliding(300).span, Sliding(300, allowed_lateness=60).allowed_lateness
    (300.0, 60.0)
    """

    span: float
    allowed_lateness: float = 0.0

    def __post_init__(self) -> None:
        _check("span", self.span, positive=True)
        _check("allowed_lateness", self.allowed_lateness, positive=False)
        object.__setattr__(self, "span", float(self.span))
        object.__setattr__(self, "allowed_lateness", float(self.allowed_lateness))

    @property
    def idle_timeout(self) -> None:
        """None: a sliding window closes by the watermark only (docs/event-time.md)."""
        return None


FixedWindow = Tumbling | Hopping
"""Windows with bounds fixed in advance (whatever the events), kept in panes; or, with
``events`` set, windows of a count of events (:mod:`streams.eventtime.counted`)."""


def counted(spec: object) -> bool:
    """Whether ``spec`` declares windows of a count of events rather than of time.

    >>> counted(Tumbling(events=5)), counted(Tumbling(5)), counted(Session(5))
    (True, False, False)
    """
    return isinstance(spec, (Tumbling, Hopping)) and spec.events is not None


def _check_counted(spec: FixedWindow, events: int | None, every: int | None) -> None:
    """A window of ``events`` events opening every ``every``: whole numbers > 0, and none of
    the time settings (a counted window closes at its last event, not by the watermark)."""
    for name, n in (("events", events), ("every", every)):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigurationError(f"{name} must be a whole number of events > 0, not {n!r}")
    if spec.size or spec.hop or spec.origin:
        raise ConfigurationError("a window is of seconds (size, hop) or of events (events, every), not both")
    if spec.allowed_lateness or spec.idle_timeout is not None:
        raise ConfigurationError(
            "allowed_lateness and idle_timeout apply to windows of time: a window of events closes at its "
            "last event, or (partial) at the final watermark"
        )
    if spec.emit != "final":
        raise ConfigurationError(
            "emit=Every(...) applies to windows of time: a window of events emits once, at its last event "
            "(make it smaller for earlier results)"
        )


WindowSpec = Tumbling | Hopping | Session | Sliding


def with_timing(spec: WindowSpec, allowed_lateness: float, idle_timeout: float | None) -> WindowSpec:
    """``spec`` with these settings (what a configuration file or the command line gives);
    a sliding window closes by the watermark only, and takes no idle timeout.

    >>> with_timing(Sliding(60), 5.0, None).allowed_lateness
    5.0
    """
    if isinstance(spec, Sliding):
        if idle_timeout is not None:
            raise ConfigurationError("idle_timeout applies to tumbling, hopping and session windows, not sliding ones")
        return replace(spec, allowed_lateness=allowed_lateness)
    return replace(spec, allowed_lateness=allowed_lateness, idle_timeout=idle_timeout)


def window_bounds(spec: FixedWindow, j: int) -> tuple[float, float]:
    """Start and end of window ``j`` of ``spec``, in seconds, worked out in microseconds.

    >>> window_bounds(Tumbling(0.1), 3), window_bounds(Hopping(0.3, 0.1), 7)
    ((0.3, 0.4), (0.7, 1.0))
    """
    start = to_micros(spec.origin) + j * to_micros(spec.hop)
    return to_seconds(start), to_seconds(start + to_micros(spec.size))


def _validate(spec: FixedWindow) -> None:
    _check("size", spec.size, positive=True)
    _check("allowed_lateness", spec.allowed_lateness, positive=False)
    _check("idle_timeout", spec.idle_timeout, positive=False, optional=True)
    if not (isinstance(spec.origin, (int, float)) and math.isfinite(spec.origin)):
        raise ConfigurationError(f"origin must be a number of seconds, not {spec.origin!r}")
    if spec.emit != "final" and not isinstance(spec.emit, Every):
        raise ConfigurationError(f"emit is 'final' or Every(seconds) or Every(events=N), not {spec.emit!r}")


class WindowAssigner:
    """Pane and window arithmetic for one :data:`WindowSpec`, in integer microseconds
    (:mod:`streams.core.micros`): sizes, hops and the origin are converted once, so a
    timestamp on a window's edge is in the window that starts there.

    Pane and window indexes are integers. Sessions have no fixed bounds: they have no
    assigner (:mod:`streams.eventtime.sessions`).

    A timestamp ``t`` is in pane ``(t - origin) // step``, unless hopping windows leave a gap
    there (``gaps``: the offset into the hop is past ``size``); the per-event path works that
    out inline (:mod:`streams.eventtime.ingest`).

    >>> a = WindowAssigner(Hopping(size=20, hop=5))
    >>> a.step, list(a.windows_of_pane(3))
    (5000000, [0, 1, 2, 3])
    >>> list(a.panes_of_window(1)), a.bounds(1)
    ([1, 2, 3, 4], (5000000, 25000000))
    """

    __slots__ = ("spec", "size", "hop", "origin", "lateness", "step", "gaps", "per_window", "per_hop")

    def __init__(self, spec: FixedWindow) -> None:
        self.spec = spec
        self.size = to_micros(spec.size)
        self.hop = to_micros(spec.hop)
        self.origin = to_micros(spec.origin)
        self.lateness = to_micros(spec.allowed_lateness)
        self.gaps = self.hop > self.size
        # Pane length: the window itself when windows do not overlap, else gcd(size, hop).
        self.step = self.hop if self.hop >= self.size else math.gcd(self.size, self.hop)
        self.per_window = 1 if self.hop >= self.size else self.size // self.step
        self.per_hop = 1 if self.hop >= self.size else self.hop // self.step

    def windows_of_pane(self, pane: int) -> range:
        """The windows (indexes) containing ``pane``, oldest first."""
        last = pane // self.per_hop
        first = -((self.per_window - 1 - pane) // self.per_hop)  # ceil((pane - m + 1) / r)
        return range(first, last + 1)

    def panes_of_window(self, window: int) -> range:
        """The panes making up ``window``."""
        first = window * self.per_hop
        return range(first, first + self.per_window)

    def retired_by(self, window: int) -> range:
        """The panes no later window contains, once ``window`` has closed."""
        first = window * self.per_hop
        return range(first, first + self.per_hop)

    def bounds(self, window: int) -> tuple[int, int]:
        """Start and end of ``window``."""
        start = self.origin + window * self.hop
        return start, start + self.size

    def end(self, window: int) -> int:
        return self.origin + window * self.hop + self.size

    def close_time(self, window: int) -> int:
        """The watermark at which ``window`` closes: its end plus the allowed lateness."""
        return self.origin + window * self.hop + self.size + self.lateness

    def pane_closed(self, pane: int, watermark: float) -> bool:
        """True when every window containing ``pane`` has closed at ``watermark``."""
        return self.close_time(pane // self.per_hop) <= watermark


class KeyedStore:
    """What the stores of windows of events and of sliding windows share: their state per key
    (``keys``), and no idle timeout (a window of either closes by its events or the watermark)."""

    __slots__ = ()
    keys: dict[Hashable, Any]

    def earliest_end(self) -> float:
        return FOREVER

    def first_open_end(self, watermark: float) -> float:
        return FOREVER

    def has_data(self) -> bool:
        """A key with an open window, or state toward one: a restart would need it."""
        return bool(self.keys)


class WindowStore:
    """The open panes governed by one watermark (a partition, the merged inputs, or a
    substream), and the windows scheduled to close.

    ``panes[pane][key] = [accumulator, first_token]``: the first token any event of that key
    brought into the pane (the runtime must not checkpoint past the oldest one still held).
    """

    __slots__ = ("assigner", "panes", "watermark", "next_close", "_due", "_scheduled", "order", "early")

    def __init__(self, assigner: WindowAssigner, order: int = 0, watermark: float = NEVER) -> None:
        self.assigner = assigner
        self.panes: dict[int, dict[Hashable, list[Any]]] = {}
        self.watermark = watermark  # the watermark that closes these windows
        self.next_close = FOREVER  # close_time of the earliest scheduled window
        self._due: list[int] | None = None  # heap of scheduled window indexes (None: none)
        # The scheduled windows, as keys, where a pane is in several windows (hopping); None
        # while none is (a quiet stream's store, one per stream, holds no empty dict) and
        # for tumbling windows, whose heap of a window or two is searched instead.
        self._scheduled: dict[int, None] | None = None
        self.order = order  # creation order: ties between stores close in this order
        # With emit=Every(...): the updates' bookkeeping (streams.eventtime.early), else None.
        self.early: Any = None

    def open_pane(self, pane: int) -> dict[Hashable, list[Any]]:
        """Create ``pane`` and schedule every still-open window containing it."""
        bucket: dict[Hashable, list[Any]] = {}
        self.panes[pane] = bucket
        a = self.assigner
        due = self._due
        if due is None:
            due = self._due = []
        if a.per_window == 1:
            # A pane is one window (tumbling): the heap alone says what is scheduled, mostly
            # one window, and a dict for it would be 224 bytes an open window.
            if pane not in due and a.close_time(pane) > self.watermark:
                heapq.heappush(due, pane)
        else:
            scheduled = self._scheduled
            if scheduled is None:
                scheduled = self._scheduled = {}
            for window in a.windows_of_pane(pane):
                if window not in scheduled and a.close_time(window) > self.watermark:
                    scheduled[window] = None
                    heapq.heappush(due, window)
        self.next_close = a.close_time(due[0])
        return bucket

    def earliest_end(self) -> float:
        """End of the earliest open window (``inf`` when none is open)."""
        return self.assigner.end(self._due[0]) if self._due else FOREVER

    def pop_due(self) -> list[int]:
        """Unschedule and return the windows the watermark has closed, oldest first."""
        a, due, w, scheduled = self.assigner, self._due, self.watermark, self._scheduled
        closed: list[int] = []
        if due is None:
            self.next_close = FOREVER  # nothing scheduled (it may have been lowered: early results)
            return closed
        while due and a.close_time(due[0]) <= w:
            window = heapq.heappop(due)
            if scheduled is not None:
                scheduled.pop(window, None)
            closed.append(window)
        if due:
            self.next_close = a.close_time(due[0])
        else:
            self.next_close = FOREVER
            # Nothing scheduled: no dict or list (an emptied dict keeps its table). A worker
            # may hold 100,000 quiet stores.
            self._scheduled = self._due = None
        return closed

    def collect(self, window: int, merge: Callable[[Any, Any], Any], init: Callable[[], Any]) -> dict[Hashable, Any]:
        """Each key's accumulator over ``window``'s panes, then retire finished panes."""
        a, panes = self.assigner, self.panes
        if a.per_window == 1:
            bucket = panes.pop(window * a.per_hop, None) or {}
            if not panes:
                panes.clear()  # an emptied dict keeps its table: clear() gives it back
            return {key: state[0] for key, state in bucket.items()}
        accs: dict[Hashable, Any] = {}
        for p in a.panes_of_window(window):
            pane_bucket = panes.get(p)
            if pane_bucket:
                for key, state in pane_bucket.items():
                    accs[key] = merge(accs[key] if key in accs else init(), state[0])
        for p in a.retired_by(window):
            panes.pop(p, None)
        if not panes:
            panes.clear()
        return accs

    def open_windows(self) -> list[int]:
        """The scheduled (open, non-empty) windows, oldest first."""
        return sorted(self._due or ())

    def has_data(self) -> bool:
        """Some pane holds data: a restart would need this store."""
        return bool(self.panes)

    def tokens(self) -> list[Any]:
        """The first token of each key in each open pane (what holds the checkpoint)."""
        return [state[1] for bucket in self.panes.values() for state in bucket.values()]

    def first_open_end(self, watermark: float) -> float:
        """End of the earliest open window ``watermark`` has not closed (``inf``: none)."""
        a = self.assigner
        ends = [a.end(j) for j in self.open_windows() if a.close_time(j) > watermark]
        return ends[0] if ends else FOREVER

    def entries(self) -> list[tuple[float, Hashable, float]]:
        """``(end, key, start)`` of every open window holding data, oldest window first."""
        found: list[tuple[float, Hashable, float]] = []
        for j in self.open_windows():
            start, end = self.assigner.bounds(j)
            found.extend((end, key, start) for key in self.keys_of(j))
        return found

    def keys_of(self, window: int) -> list[Hashable]:
        """The keys with data in ``window``, in order of first appearance."""
        seen: dict[Hashable, None] = {}
        for p in self.assigner.panes_of_window(window):
            seen.update(dict.fromkeys(self.panes.get(p, ())))
        return list(seen)
