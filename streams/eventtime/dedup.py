"""Deduplication: drop an event whose key was already seen within a horizon of event time.

As Spark's ``dropDuplicatesWithinWatermark``: the first event of a dedup key registers it
with its timestamp ``t``; the entry lives until the watermark reaches ``t + within``, and
every later event of that key meanwhile is dropped (reason ``duplicate``). A duplicate does
not extend the entry: the horizon runs from the first event. Expired entries are removed as
the watermark passes them, so the state holds only the keys first seen within the horizon.

It runs after the ordering policy (steps 1-3: an event dropped as early, late or out of
order registers nothing) and before the windows (``docs/event-time.md``, "Deduplication").

>>> seen = SeenKeys(10.0)
>>> seen.admit("a", 5.0, 0.0), seen.admit("a", 7.0, 3.0), seen.admit("b", 7.0, 3.0)
(None, 5.0, None)
>>> seen.admit("a", 16.0, 15.0), len(seen)  # W = 15 >= 5 + 10: "a" expired, registered anew
(None, 2)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigurationError
from streams.core.micros import to_micros
from streams.eventtime.policy import Extractor, key_extractor


@dataclass(frozen=True, slots=True)
class Dedup:
    """Drop an event whose ``key`` was already seen within ``within`` seconds of event time,
    measured against the watermark (Spark's ``dropDuplicatesWithinWatermark``).

    ``key`` is a field name of the event's value or a function of the event record (as
    ``group_by``). A key function that raises, or returns something unhashable,
    dead-letters that event alone (``invalid_value``).

    >>> from streams.eventtime import EventTime, OrderingPolicy
    >>> spec = EventTime(OrderingPolicy(timestamp_by="ts"), dedup=Dedup(key="id", within=600))
    >>> spec.dedup.within
    600.0
    >>> Dedup(key="id", within=0)
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: Dedup within must be a number of seconds > 0, not 0
    """

    key: str | Extractor
    within: float

    def __post_init__(self) -> None:
        w = self.within
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or to_micros(w) <= 0:
            raise ConfigurationError(f"Dedup within must be a number of seconds > 0, not {w!r}")
        if not (callable(self.key) or (isinstance(self.key, str) and self.key)):
            raise ConfigurationError(f"Dedup key is a field name or a function of the event, not {self.key!r}")
        object.__setattr__(self, "within", float(w))


class SeenKeys:
    """The dedup keys of one watermark (an input's, or a substream's) still within their
    horizon: ``first[key]`` is the timestamp its first event had, and a heap orders the
    entries by expiry (``first + within``) so the watermark removes them oldest first."""

    __slots__ = ("within", "first", "_expiry", "_n")

    def __init__(self, within: int) -> None:
        self.within = within  # integer microseconds, as every time here
        self.first: dict[Hashable, float] = {}
        # (expiry, order, key): the order keeps keys, which need not compare, out of ties.
        self._expiry: list[tuple[float, int, Hashable]] = []
        self._n = 0

    def __len__(self) -> int:
        return len(self.first)

    def admit(self, key: Hashable, ts: float, w: float) -> float | None:
        """None when ``key`` is new at watermark ``w`` (registered with ``ts``, unless its
        horizon has passed already, as an accepted late event's may); else the timestamp
        it was first seen with. Raises ``TypeError`` for an unhashable key."""
        heap, seen = self._expiry, self.first
        while heap and heap[0][0] <= w:  # expire(w), inline: this runs for every event
            del seen[heapq.heappop(heap)[2]]
        first = seen.get(key)
        if first is not None:
            return first
        expiry = ts + self.within
        if expiry > w:
            seen[key] = ts
            self._n = n = self._n + 1
            heapq.heappush(heap, (expiry, n, key))
        return None

    def expire(self, w: float) -> None:
        """Remove the entries watermark ``w`` has passed (``w >= first + within``)."""
        heap = self._expiry
        while heap and heap[0][0] <= w:
            del self.first[heapq.heappop(heap)[2]]

    def _register(self, key: Hashable, ts: float) -> None:
        self.first[key] = ts
        heapq.heappush(self._expiry, (ts + self.within, self._n, key))
        self._n += 1

    def state(self) -> list[list[Any]]:
        """``[key, first timestamp]`` of every entry, in expiry order (a snapshot)."""
        return [[key, self.first[key]] for _, _, key in sorted(self._expiry, key=lambda e: e[:2])]

    def set_state(self, entries: list[list[Any]], hashable: Callable[[Any], Hashable]) -> None:
        self.first.clear()
        self._expiry.clear()
        self._n = 0
        for key, ts in entries:
            self._register(hashable(key), ts)


class Deduplication:
    """A processor's dedup: the key function and the :class:`SeenKeys` of each watermark
    (one without substreams, lane None; one per substream key with them, as each substream
    has its own watermark)."""

    __slots__ = ("spec", "within", "key_of", "lanes")

    def __init__(self, spec: Dedup) -> None:
        self.spec = spec
        self.within = to_micros(spec.within)
        key_of = key_extractor(spec.key)
        assert key_of is not None  # a Dedup always has a key
        self.key_of: Callable[[Any], Hashable] = key_of
        self.lanes: dict[Hashable, SeenKeys] = {}

    def seen(self, lane: Hashable, rec: Any, ts: float, w: float) -> tuple[Hashable, float] | None:
        """``(dedup key, first timestamp)`` when the event ``rec`` (timestamp ``ts``, under
        watermark ``w``) is a duplicate; None when it is new. Raises what the key function
        raises, or ``TypeError`` for an unhashable key."""
        seen = self.lanes.get(lane)
        if seen is None:
            seen = self.lanes[lane] = SeenKeys(self.within)
        key = self.key_of(rec)  # the user's code: what it raises letters this event
        first = seen.admit(key, ts, w)
        return None if first is None else (key, first)

    def entries(self) -> int:
        """How many keys are held, over every watermark (the state's size)."""
        return sum(len(seen) for seen in self.lanes.values())

    def __iter__(self) -> Iterator[tuple[Hashable, SeenKeys]]:
        return iter(self.lanes.items())

    def state(self) -> list[list[Any]]:
        return [[lane, seen.state()] for lane, seen in self.lanes.items() if len(seen)]

    def set_state(self, state: list[list[Any]], hashable: Callable[[Any], Hashable]) -> None:
        self.lanes.clear()
        for lane, entries in state:
            seen = self.lanes[hashable(lane)] = SeenKeys(self.within)
            seen.set_state(entries, hashable)
