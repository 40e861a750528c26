"""Sliding windows over time, as Kafka Streams' ``SlidingWindows``: one window per distinct
set of a key's events within ``span`` of each other.

A window is created each time an event enters or leaves the span as it slides along event
time: for each event at ``t``, the window ``[t - span, t]`` ending at it (its *left* window)
and, if any event falls in it, the window starting just after it, ``[t⁺, t⁺ + span]`` with
``t⁺`` the next float after ``t`` (its *right* window; Kafka's ``t + 1 ms``). Both bounds are
included, as Kafka's. A window closes, and is emitted, when the watermark passes its end
plus the allowed lateness: ``W > end + A`` (an event at ``end`` is still in order at
``W == end``). A window is never created closed: an event (only ``accept`` lets one below
``W`` through) joins the open windows containing it and creates those of its windows still
open; if every window containing it has closed, it is refused ``window_closed`` and changes
nothing (not even the right window it would start).

A key keeps its events while a window containing them can still be created (until
``W > t⁺ + span + A``), each window's running aggregate, and nothing else.

>>> from streams.eventtime.aggregates import Count
>>> store = SlidingStore(Sliding(5), Count())
>>> [store.add("A", t, None, token=i, w=float("-inf")) for i, t in enumerate([8.0, 9.2, 12.4])]
[True, True, True]
>>> store.watermark = 100.0
>>> [(round(w.start, 1), round(w.end, 1), w.value) for w in store.pop_due(None)]  # Kafka's example
[(3.0, 8.0, 1), (4.2, 9.2, 2), (7.4, 12.4, 3), (8.0, 13.0, 2), (9.2, 14.2, 1)]
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable
from typing import Any

from streams.eventtime.aggregates import Reducer
from streams.eventtime.results import WindowResult
from streams.eventtime.watermark import FOREVER, NEVER
from streams.eventtime.windows import KeyedStore, Sliding

LEFT, RIGHT = 0, 1  # a window ending at its event, or starting just after it


class OpenSlide:
    """One open sliding window: its bounds (both included) and running aggregate."""

    __slots__ = ("start", "end", "acc")

    def __init__(self, start: float, end: float, acc: Any) -> None:
        self.start, self.end, self.acc = start, end, acc


class KeySlides:
    """A key's events still needed (sorted by timestamp: ``(ts, seq, value, token)``) and
    its open windows by ``(LEFT or RIGHT, the event time they are of)``."""

    __slots__ = ("events", "open")

    def __init__(self) -> None:
        self.events: list[tuple[float, int, Any, Any]] = []
        self.open: dict[tuple[int, float], OpenSlide] = {}


class SlidingStore(KeyedStore):
    """The sliding windows of one watermark (an input, or a substream), per key.

    Same face to the watermark flow as :class:`~streams.eventtime.windows.WindowStore`:
    ``watermark``, ``next_close`` (the lowest watermark that closes a window: the next float
    above its ``end + A``), ``order``, :meth:`pop_due`, :meth:`tokens`.
    """

    __slots__ = ("span", "lateness", "reducer", "keys", "watermark", "next_close", "order", "_seq")

    def __init__(self, spec: Sliding, reducer: Reducer[Any, Any], order: int = 0, watermark: float = NEVER) -> None:
        self.span, self.lateness = spec.span, spec.allowed_lateness
        self.reducer = reducer
        self.keys: dict[Hashable, KeySlides] = {}
        self.watermark = watermark
        self.next_close = FOREVER
        self.order = order
        self._seq = 0

    def bounds(self, kind: int, t: float) -> tuple[float, float]:
        """The bounds of ``t``'s left or right window."""
        if kind == LEFT:
            return t - self.span, t
        start = math.nextafter(t, math.inf)
        return start, start + self.span

    def add(self, key: Hashable, ts: float, value: Any, token: Any, *, w: float) -> bool:
        """Step 4 for timestamp ``ts`` of ``key`` under the closing watermark ``w``: False
        when every window containing it has closed (``window_closed``; nothing changed).
        ``value`` is what the aggregate adds. What the aggregate raises changes nothing."""
        ks = self.keys.get(key)
        events = ks.events if ks is not None else []
        lateness = self.lateness
        joined = [s for s in ks.open.values() if s.start <= ts <= s.end] if ks is not None else []
        # The windows this event creates: its left one, its right one if an event is in it,
        # and the right ones of earlier events it is the first in; never one already closed.
        created: list[tuple[int, float]] = []
        times = {e[0] for e in events}
        for kind, t in [(LEFT, ts), (RIGHT, ts), *((RIGHT, t) for t in times if t < ts)]:
            start, end = self.bounds(kind, t)
            if w > end + lateness or (ks is not None and (kind, t) in ks.open) or (kind, t) in created:
                continue
            if kind == RIGHT and not (start <= ts <= end or any(start <= e <= end for e in times)):
                continue  # empty: no window
            created.append((kind, t))
        if not joined and not any(_holds(self.bounds(kind, t), ts) for kind, t in created):
            return False  # no open window holds it (its own right window does not): changes nothing
        reducer = self.reducer
        # Every new accumulator first: one that raises changes nothing.
        accs = [reducer.add(s.acc, value) for s in joined]
        fresh: list[tuple[tuple[int, float], float, float, Any]] = []
        for kind, t in created:
            start, end = self.bounds(kind, t)
            acc = reducer.init()
            for e_ts, _, e_value, _ in events:
                if start <= e_ts <= end:
                    acc = reducer.add(acc, e_value)
            if start <= ts <= end:
                acc = reducer.add(acc, value)
            fresh.append(((kind, t), start, end, acc))
        if ks is None:
            ks = self.keys[key] = KeySlides()
        for s, acc in zip(joined, accs, strict=True):
            s.acc = acc
        for name, start, end, acc in fresh:
            ks.open[name] = OpenSlide(start, end, acc)
            self.next_close = min(self.next_close, _after(end + lateness))
        self._seq += 1
        bisect.insort(ks.events, (ts, self._seq, value, token), key=lambda e: e[:2])
        return True

    def pop_due(self, clock: float | None) -> list[WindowResult]:
        """Emit every window the watermark has passed (``W > end + A``), in order of end,
        and forget the events no window can be created around any more."""
        w, lateness, span, result = self.watermark, self.lateness, self.span, self.reducer.result
        final = w == FOREVER
        due: list[tuple[float, float, int, Hashable, Any]] = []
        for i, (key, ks) in enumerate(self.keys.items()):
            for name, s in list(ks.open.items()):
                if w > s.end + lateness:
                    del ks.open[name]
                    due.append((s.end, s.start, i, key, s.acc))
            ks.events = [e for e in ks.events if not w > _after(e[0]) + span + lateness]
        for key in [k for k, ks in self.keys.items() if not ks.open and not ks.events]:
            del self.keys[key]
        due.sort(key=lambda d: d[:3])
        ends = [s.end for ks in self.keys.values() for s in ks.open.values()]
        self.next_close = _after(min(ends) + lateness) if ends else FOREVER
        return [WindowResult(key, start, end, result(acc), clock, final) for end, start, _, key, acc in due]

    def tokens(self) -> list[Any]:
        """The token of every event kept (a restart without a snapshot rebuilds from them)."""
        return [e[3] for ks in self.keys.values() for e in ks.events]

    def entries(self) -> list[tuple[float, Hashable, float]]:
        """``(end, key, start)`` of every open window, by end."""
        found = [(s.end, key, s.start) for key, ks in self.keys.items() for s in ks.open.values()]
        return sorted(found, key=lambda e: (e[0], e[2]))

    def state(self) -> list[Any]:
        """Plain values for a snapshot (:mod:`streams.eventtime.snapshot`)."""
        keys = [
            [key, [list(e) for e in ks.events], [[kind, t, s.acc] for (kind, t), s in ks.open.items()]]
            for key, ks in self.keys.items()
        ]
        return [keys, self.watermark, self.order, self._seq]

    def set_state(self, state: list[Any], key_of: Callable[[Any], Hashable]) -> None:
        """Take what :meth:`state` gave; ``key_of`` turns a decoded key back into a key."""
        keys, self.watermark, self.order, self._seq = state
        self.keys = {}
        ends = []
        for key, events, windows in keys:
            ks = self.keys[key_of(key)] = KeySlides()
            ks.events = [(ts, seq, value, token) for ts, seq, value, token in events]
            for kind, t, acc in windows:
                start, end = self.bounds(kind, t)
                ks.open[(kind, t)] = OpenSlide(start, end, acc)
                ends.append(end)
        self.next_close = _after(min(ends) + self.lateness) if ends else FOREVER


def _holds(bounds: tuple[float, float], ts: float) -> bool:
    return bounds[0] <= ts <= bounds[1]


def _after(t: float) -> float:
    """The next float above ``t``: a watermark at or above it is past ``t``."""
    return math.nextafter(t, math.inf)
