"""Interval joins of two inputs: the declaration and the state of one activation's join.

For each event ``l`` of the left input, every event ``r`` of the right input with the same
key and ``l.ts + lower <= r.ts <= l.ts + upper`` (timestamps after the ordering policy), each
pair emitted once; with ``how="left"`` a left event with no partner is emitted alone. Both
inputs keep their own watermark; ``W`` is their minimum (``docs/event-time.md``, "Interval
joins", is the contract):

- a left event's pairs are emitted when ``W > l.ts + upper + A`` (no later right can match);
- a right event leaves the state when ``W > r.ts - lower + A`` (no later left can match);
- an event below ``W - A`` (only ``accept`` lets one through) is refused ``window_closed``:
  its pairs may already be final, or its partners gone.

``A`` is the join's ``allowed_lateness``. State: the left events not emitted yet (each with
its partners so far) and the right events a future left can still match; both bounded by
the watermark, not by the length of the streams.

Times here are integer microseconds (:mod:`streams.core.micros`); the outcomes joined
carry their timestamps in seconds:

>>> from types import SimpleNamespace as Ev
>>> store = JoinStore(IntervalJoin(lower=0, upper=10), "clicks", "orders")
>>> def add(part, t, i, w=-10**9): return store.add(part, "u", Ev(timestamp=t, record=Ev(token=i)), ts=t * 10**6, w=w)
>>> add("clicks", 1, 0), add("orders", 5, 1)
(True, True)
>>> add("orders", 12, 2)  # 12 > 1 + 10: not a partner
True
>>> store.watermark = 11_500_000
>>> [(j.left.timestamp, j.right.timestamp) for j in store.pop_due(20_000_000)]
[(1, 5)]
>>> add("orders", 1, 3, w=11_500_000)  # below W: its join may be final
False
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigurationError
from streams.core.micros import optional_seconds, to_micros
from streams.eventtime.results import EventOutcome, JoinResult
from streams.eventtime.watermark import FOREVER, NEVER

__all__ = ["IntervalJoin", "JoinStore"]


@dataclass(frozen=True, slots=True)
class IntervalJoin:
    """Join each left event to the right events of its key whose timestamps fall in
    ``[l.ts + lower, l.ts + upper]`` (seconds; ``lower`` may be negative). ``how``:
    ``"inner"``, or ``"left"`` (a left event with no partner is emitted alone).
    ``allowed_lateness``: how far below the merged watermark an accepted event may still
    be joined completely (results wait that much longer).

    >>> IntervalJoin(lower=-5, upper=60, how="left").how
    'left'
    """

    lower: float
    upper: float
    how: str = "inner"
    allowed_lateness: float = 0.0

    def __post_init__(self) -> None:
        for name in ("lower", "upper", "allowed_lateness"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ConfigurationError(f"{name} must be a finite number of seconds, not {value!r}")
        if self.lower > self.upper:
            raise ConfigurationError(f"lower ({self.lower:g}) must not be above upper ({self.upper:g})")
        if self.allowed_lateness < 0:
            raise ConfigurationError(f"allowed_lateness must be >= 0, not {self.allowed_lateness!r}")
        if self.how not in ("inner", "left"):
            raise ConfigurationError(f"how is 'inner' or 'left', not {self.how!r}")


class _Left:
    """A left event waiting for its pairs to be final, with its partners so far."""

    __slots__ = ("key", "event", "seq", "lo", "hi", "partners")

    def __init__(self, key: Hashable, event: EventOutcome, seq: int, lo: float, hi: float) -> None:
        self.key, self.event, self.seq = key, event, seq
        self.lo, self.hi = lo, hi  # the right timestamps it matches: [l.ts + lower, l.ts + upper]
        self.partners: list[tuple[float, int, EventOutcome]] = []  # (timestamp, arrival, right)


class JoinStore:
    """One activation's interval join: its pending left events and its right events.

    Same face to the watermark flow as a window store: ``watermark`` (the merged one),
    ``next_close``, ``order``, :meth:`pop_due` and :meth:`tokens`.
    """

    __slots__ = (
        "spec",
        "lower",
        "upper",
        "lateness",
        "left",
        "right",
        "watermark",
        "next_close",
        "order",
        "_lefts",
        "_by_key",
        "_rights",
        "_evict",
        "_seq",
    )

    def __init__(self, spec: IntervalJoin, left: Hashable, right: Hashable) -> None:
        self.spec = spec
        # The bounds in integer microseconds, as every time here.
        self.lower, self.upper = to_micros(spec.lower), to_micros(spec.upper)
        self.lateness = to_micros(spec.allowed_lateness)
        self.left, self.right = left, right
        self.watermark = NEVER
        self.next_close = FOREVER  # the watermark must pass it (strictly) to emit a left
        self.order = 0
        self._lefts: list[tuple[float, int, _Left]] = []  # heap by l.ts + upper + A
        self._by_key: dict[Hashable, list[_Left]] = {}  # pending lefts per key
        # key -> right events a future left can match, by (timestamp, arrival)
        self._rights: dict[Hashable, list[tuple[float, int, EventOutcome]]] = {}
        self._evict: list[tuple[float, int, Hashable, float]] = []  # heap by r.ts - lower + A
        self._seq = 0

    def add(self, part: Hashable, key: Hashable, event: EventOutcome, *, ts: int, w: float) -> bool:
        """Join ``event`` (of input ``part``, timestamp ``ts``) under the merged watermark
        ``w`` it arrived at; False when it is refused (below ``w - A``)."""
        lower, upper, lateness = self.lower, self.upper, self.lateness
        if ts < w - lateness:
            return False
        self._seq += 1
        seq = self._seq
        if part == self.left:
            pending = _Left(key, event, seq, ts + lower, ts + upper)
            rights = self._rights.get(key)
            if rights:
                lo = bisect_left(rights, (pending.lo, -1))
                hi = bisect_right(rights, (pending.hi, math.inf))
                pending.partners.extend(rights[lo:hi])
            self._by_key.setdefault(key, []).append(pending)
            close = ts + upper + lateness
            heapq.heappush(self._lefts, (close, seq, pending))
            if close < self.next_close:
                self.next_close = close
            return True
        entry = (ts, seq, event)
        for pending in self._by_key.get(key, ()):
            if pending.lo <= ts <= pending.hi:
                pending.partners.append(entry)
        insort(self._rights.setdefault(key, []), entry)
        heapq.heappush(self._evict, (ts - lower + lateness, seq, key, ts))
        return True

    def pop_due(self, clock: float | None) -> list[JoinResult]:
        """Emit every left event the watermark has passed (``W > l.ts + upper + A``), in that
        order (ties in arrival order), each with its partners by timestamp; then forget the
        right events no later left can match. ``clock`` (microseconds) is each result's
        ``closed_at``, in seconds."""
        w, lefts, results = self.watermark, self._lefts, []
        final = w == FOREVER
        closed_at = optional_seconds(clock)
        while lefts and lefts[0][0] < w:
            _, _, pending = heapq.heappop(lefts)
            siblings = self._by_key[pending.key]
            siblings.remove(pending)
            if not siblings:
                del self._by_key[pending.key]
            if pending.partners:
                for _, _, right in sorted(pending.partners):  # (timestamp, arrival): unique
                    results.append(JoinResult(pending.key, pending.event, right, closed_at, final))
            elif self.spec.how == "left":
                results.append(JoinResult(pending.key, pending.event, None, closed_at, final))
        evict = self._evict
        while evict and evict[0][0] < w:
            _, seq, key, ts = heapq.heappop(evict)
            rights = self._rights[key]
            del rights[bisect_left(rights, (ts, seq))]  # mostly the first: evicted in order of ts
            if not rights:
                del self._rights[key]
        self.next_close = lefts[0][0] if lefts else FOREVER
        return results

    def has_data(self) -> bool:
        return bool(self._lefts or self._rights)

    def state(self) -> list[Any]:
        """What :meth:`set_state` puts back (events as the outcomes they are: the snapshot
        encodes them)."""
        lefts = [[close, p.seq, p.key, p.event, p.lo, p.hi, p.partners] for close, _, p in self._lefts]
        rights = [[key, entries] for key, entries in self._rights.items()]
        return [lefts, rights, self._evict, self.watermark, self.next_close, self.order, self._seq]

    def set_state(self, state: list[Any], hashable: Callable[[Any], Hashable]) -> None:
        lefts, rights, evict, self.watermark, self.next_close, self.order, self._seq = state
        self._lefts, self._by_key = [], {}
        for close, seq, key, event, lo, hi, partners in lefts:  # in heap order: still a heap
            pending = _Left(hashable(key), event, seq, lo, hi)
            pending.partners = [tuple(p) for p in partners]  # (ts, seq, outcome): tuples compare
            self._lefts.append((close, seq, pending))
            self._by_key.setdefault(pending.key, []).append(pending)
        self._rights = {hashable(key): [tuple(e) for e in entries] for key, entries in rights}
        self._evict = [(due, seq, hashable(key), ts) for due, seq, key, ts in evict]

    def tokens(self) -> list[dict[Hashable, Any]]:
        """What the state holds, per input: each pending left with its partners (a replay
        must bring them back together), and each right a future left may match."""
        held: list[dict[Hashable, Any]] = []
        for _, _, pending in self._lefts:
            token: dict[Hashable, Any] = {self.left: pending.event.record.token}
            if pending.partners:
                token[self.right] = min(r.record.token for _, _, r in pending.partners)
            held.append(token)
        held.extend({self.right: r.record.token} for rights in self._rights.values() for _, _, r in rights)
        return held

    def pending(self) -> list[EventOutcome]:
        """The left events whose pairs are not emitted yet."""
        return [pending.event for _, _, pending in self._lefts]

    def first_open_end(self, watermark: float) -> float:
        return FOREVER  # a join has no idle timeout

    def earliest_end(self) -> float:
        return FOREVER

    def entries(self) -> list[tuple[float, Hashable, float]]:
        return []  # no windows
