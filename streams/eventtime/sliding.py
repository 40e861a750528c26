"""Sliding windows over time, as Kafka Streams' ``SlidingWindows``: one window per distinct
set of a key's events within ``span`` of each other.

A window is created each time an event enters or leaves the span as it slides along event
time: for each event at ``t``, the window ``[t - span, t]`` ending at it (its *left* window)
and, if any event falls in it, the window starting just after it, ``[t⁺, t⁺ + span]`` with
``t⁺ = t + 1 µs``, the next instant after ``t`` (its *right* window; Kafka's ``t + 1 ms``,
in its resolution: times here are integer microseconds, :mod:`streams.core.micros`). Both bounds are
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
>>> [store.add("A", t, None, token=i, w=float("-inf")) for i, t in enumerate([8_000_000, 9_200_000, 12_400_000])]
[True, True, True]
>>> store.watermark = 100_000_000
>>> [(w.start, w.end, w.value) for w in store.pop_due(None)]  # Kafka's example, in seconds
[(3.0, 8.0, 1), (4.2, 9.2, 2), (7.4, 12.4, 3), (8.000001, 13.000001, 2), (9.200001, 14.200001, 1)]
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Hashable
from typing import Any

from streams.core.micros import optional_seconds, to_micros, to_seconds
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
    microsecond after its ``end + A``), ``order``, :meth:`pop_due`, :meth:`tokens`. A heap holds each
    open window at its close and each event at the time it may be forgotten, so a watermark
    step visits only what it passes.
    """

    __slots__ = ("span", "lateness", "reducer", "keys", "watermark", "next_close", "order", "_seq", "_due")

    def __init__(self, spec: Sliding, reducer: Reducer[Any, Any], order: int = 0, watermark: float = NEVER) -> None:
        self.span, self.lateness = to_micros(spec.span), to_micros(spec.allowed_lateness)
        self.reducer = reducer
        self.keys: dict[Hashable, KeySlides] = {}
        self.watermark = watermark
        self.next_close = FOREVER
        self.order = order
        self._seq = 0
        # (the lowest watermark it is due at, seq, key, window name or None for an event's
        # forgetting): W >= _after(x) is W > x.
        self._due: list[tuple[float, int, Hashable, tuple[int, float] | None]] = []

    def bounds(self, kind: int, t: float) -> tuple[float, float]:
        """The bounds of ``t``'s left or right window."""
        if kind == LEFT:
            return t - self.span, t
        return t + 1, t + 1 + self.span

    def add(self, key: Hashable, ts: float, value: Any, token: Any, *, w: float) -> bool:
        """Step 4 for timestamp ``ts`` of ``key`` under the closing watermark ``w``: False
        when every window containing it has closed (``window_closed``; nothing changed).
        ``value`` is what the aggregate adds. What the aggregate raises changes nothing."""
        ks = self.keys.get(key)
        events = ks.events if ks is not None else []
        lateness = self.lateness
        joined = [s for s in ks.open.values() if s.start <= ts <= s.end] if ks is not None else []
        # The windows this event creates, never one already closed: its left one (holding
        # it); the right ones of earlier events it is the first in (holding it); and its own
        # right one if an event is in it (not holding it).
        candidates = [(LEFT, ts)]
        j = _first_at(events, ts) - 1
        while j >= 0 and events[j][0] >= ts - 2 * self.span:  # a margin: the exact test follows
            t = events[j][0]
            if ts <= self.bounds(RIGHT, t)[1] and (not candidates or candidates[-1] != (RIGHT, t)):
                candidates.append((RIGHT, t))
            j -= 1
        start, end = self.bounds(RIGHT, ts)
        i = _first_at(events, start)
        if i < len(events) and events[i][0] <= end:
            candidates.append((RIGHT, ts))
        created = [
            name
            for name in candidates
            if not (w > self.bounds(*name)[1] + lateness or (ks is not None and name in ks.open))
        ]
        if not joined and all(name == (RIGHT, ts) for name in created):
            return False  # no open window holds it (its own right window does not): changes nothing
        reducer = self.reducer
        # Every new accumulator first: one that raises changes nothing.
        accs = [reducer.add(s.acc, value) for s in joined]
        fresh: list[tuple[tuple[int, float], float, float, Any]] = []
        for name in created:
            start, end = self.bounds(*name)
            acc = reducer.init()
            for e in events[_first_at(events, start) :]:
                if e[0] > end:
                    break
                acc = reducer.add(acc, e[2])
            if start <= ts <= end:
                acc = reducer.add(acc, value)
            fresh.append((name, start, end, acc))
        if ks is None:
            ks = self.keys[key] = KeySlides()
        for s, acc in zip(joined, accs, strict=True):
            s.acc = acc
        for name, start, end, acc in fresh:
            ks.open[name] = OpenSlide(start, end, acc)
            self._schedule(_after(end + lateness), key, name)
        self._seq += 1
        bisect.insort(ks.events, (ts, self._seq, value, token), key=_order)
        self._schedule(self._forget_at(ts), key, None)
        return True

    def _forget_at(self, ts: float) -> float:
        """When no window can be created around an event at ``ts`` any more (its right
        window, the last that could hold it, has closed)."""
        return _after(_after(ts) + self.span + self.lateness)

    def _schedule(self, at: float, key: Hashable, name: tuple[int, float] | None) -> None:
        self._seq += 1
        heapq.heappush(self._due, (at, self._seq, key, name))
        if at < self.next_close:
            self.next_close = at

    def pop_due(self, clock: float | None) -> list[WindowResult]:
        """Emit every window the watermark has passed (``W > end + A``), in order of end,
        and forget the events no window can be created around any more."""
        w, due, result = self.watermark, self._due, self.reducer.result
        closed: list[tuple[float, float, int, Hashable, Any]] = []
        while due and due[0][0] <= w:
            _, seq, key, name = heapq.heappop(due)
            ks = self.keys.get(key)
            if ks is None:
                continue
            if name is None:  # forget the events past their last window: the oldest ones
                events, n = ks.events, 0
                while n < len(events) and self._forget_at(events[n][0]) <= w:
                    n += 1
                del events[:n]
            else:
                s = ks.open.pop(name, None)
                if s is not None:
                    closed.append((s.end, s.start, seq, key, s.acc))
            if not ks.open and not ks.events:
                del self.keys[key]
        closed.sort(key=lambda c: c[:3])
        self.next_close = due[0][0] if due else FOREVER
        at = optional_seconds(clock)
        return [
            WindowResult(key, to_seconds(start), to_seconds(end), result(acc), at) for end, start, _, key, acc in closed
        ]

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
        due = [[at, seq, key, None if name is None else list(name)] for at, seq, key, name in self._due]
        return [keys, self.watermark, self.order, self._seq, due]

    def set_state(self, state: list[Any], key_of: Callable[[Any], Hashable]) -> None:
        """Take what :meth:`state` gave; ``key_of`` turns a decoded key back into a key."""
        keys, self.watermark, self.order, self._seq, due = state
        self.keys = {}
        for key, events, windows in keys:
            ks = self.keys[key_of(key)] = KeySlides()
            ks.events = [(ts, seq, value, token) for ts, seq, value, token in events]
            for kind, t, acc in windows:
                start, end = self.bounds(kind, t)
                ks.open[(kind, t)] = OpenSlide(start, end, acc)
        # The heap as it was (its order breaks ties between windows closing together).
        self._due = [(at, seq, key_of(key), None if name is None else (name[0], name[1])) for at, seq, key, name in due]
        heapq.heapify(self._due)
        self.next_close = self._due[0][0] if self._due else FOREVER


def _order(event: tuple[float, int, Any, Any]) -> tuple[float, int]:
    return event[0], event[1]


def _first_at(events: list[tuple[float, int, Any, Any]], t: float) -> int:
    """The index of the first event at or after ``t`` (events by timestamp)."""
    return bisect.bisect_left(events, t, key=_time)


def _time(event: tuple[float, int, Any, Any]) -> float:
    return event[0]


def _after(t: float) -> float:
    """The next microsecond after ``t``: a watermark at or above it is past ``t``."""
    return t + 1
