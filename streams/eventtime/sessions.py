"""The open sessions governed by one watermark (a partition, the merged inputs, or a substream).

A session of a key is ``[start, end)``: ``start`` its earliest timestamp, ``end`` its latest
plus the gap ``G``. The open sessions of one key never intersect. Step 4 of the contract for a
kept timestamp ``t`` (``docs/event-time.md``, "Session windows"): the candidate ``[t, t + G)``
merges with every open session of its key it intersects (half-open: touching is not
intersecting) into one. It is refused (``window_closed``) when it intersects an emitted
session, or when it joins no open session and ``W >= t + G + A`` (closed on arrival).

A session's state is its running aggregate and its first token, never its events.

Only the last emitted session of a key is remembered, and only while it can matter. Emitted
sessions are disjoint, end at or below ``W - A``, and every open session ends above it, so:
a candidate that intersects an older emitted session but not the last one lies wholly below
the last one's start and is closed on arrival anyway; a candidate that joins an open session
and intersects an emitted one intersects the last one. The last one ``[s, e)`` is forgotten
once ``W >= e + 2G + A`` and every open session of the key starts at ``e + G`` or later: a
candidate below ``e`` is then closed on arrival and reaches no open session, as every session
opened from then on starts above ``W - G - A >= e + G``. So state is bounded by what is open.

Times are integer microseconds (:mod:`streams.core.micros`), here 1 s = 10**6:

>>> from streams.eventtime.aggregates import Count
>>> S = 1_000_000
>>> store = SessionStore(Session(10), Count())
>>> from types import SimpleNamespace as Ev
>>> [store.add("k", t * S, None, Ev(token=t), w=-S) for t in (0, 5, 30, 12)] == [OPENED, JOINED, OPENED, JOINED]
True
>>> store.entries() == [(22 * S, 'k', 0), (40 * S, 'k', 30 * S)]
True
>>> store.watermark = 25 * S
>>> [(key, s.start, s.end // S, s.acc) for key, s in store.pop_due()]
[('k', 0, 22, 3)]
>>> store.add("k", 21 * S, None, Ev(token=21), w=25 * S) == REFUSED  # would merge into the emitted [0, 22)
True
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any

from streams.core.micros import to_micros
from streams.eventtime.aggregates import Reducer
from streams.eventtime.watermark import FOREVER, NEVER
from streams.eventtime.windows import Session

__all__ = ["JOINED", "OPENED", "REFUSED", "KeySessions", "OpenSession", "SessionStore"]

# What became of a timestamp (SessionStore.add).
REFUSED = 0  # window_closed: it intersects an emitted session, or would be closed on arrival
JOINED = 1  # it merged into an open session (or joined several into one)
OPENED = 2  # it opened a new session


class OpenSession:
    """One open session of one key: its bounds, running aggregate, first token (per input,
    a dict, with several inputs) and its creation number (ties in the close heap)."""

    __slots__ = ("start", "end", "acc", "token", "seq")

    def __init__(self, start: float, end: float, acc: Any, token: Any, seq: int) -> None:
        self.start, self.end, self.acc, self.token, self.seq = start, end, acc, token, seq


Candidate = tuple[float, float, Any, Any, Hashable]
"""One event's session before it is placed: ``(ts, end, value, rec, part)``, its span
``[ts, end)``, what the aggregate adds, the event (for its token) and its input (see
:meth:`SessionStore.add`). A plain tuple: one is made per event."""


class KeySessions:
    """A key's open sessions, by start (never intersecting), and its last emitted session."""

    __slots__ = ("open", "emitted_start", "emitted_end")

    def __init__(self) -> None:
        self.open: list[OpenSession] = []
        self.emitted_start = NEVER
        self.emitted_end = NEVER


class SessionStore:
    """Open sessions per key, and the heap that closes them in order of end.

    Same face to the watermark flow as :class:`~streams.eventtime.windows.WindowStore`:
    ``watermark`` (the one that closes these sessions), ``next_close`` (the earliest close
    time), ``order`` (ties between stores), :meth:`pop_due`, :meth:`tokens`.
    """

    __slots__ = ("gap", "lateness", "reducer", "keys", "watermark", "next_close", "order", "_due", "_forget", "_seq")

    def __init__(self, spec: Session, reducer: Reducer[Any, Any], order: int = 0, watermark: float = NEVER) -> None:
        self.gap = to_micros(spec.gap)  # integer microseconds, as every time here
        self.lateness = to_micros(spec.allowed_lateness)
        self.reducer = reducer
        self.keys: dict[Hashable, KeySessions] = {}
        self.watermark = watermark
        self.next_close = FOREVER
        self.order = order
        # (close time, seq, key, session), one a session: stale once its session merged away
        # (end set to -inf) or grew (end + lateness above the entry's close time).
        self._due: list[tuple[float, int, Hashable, OpenSession]] = []
        # (time the last emitted session may be forgotten, seq, key, its end)
        self._forget: list[tuple[float, int, Hashable, float]] = []
        self._seq = 0

    def add(self, key: Hashable, ts: float, value: Any, rec: Any, *, w: float, part: Hashable = None) -> int:
        """Step 4 for timestamp ``ts`` of ``key`` under the closing watermark ``w``:
        :data:`JOINED`, :data:`OPENED`, or :data:`REFUSED` (``window_closed``; nothing
        changed). ``value`` is what the aggregate adds (``select``); ``rec.token`` is read
        only when it may be a session's first (an input's tokens rise in arrival order);
        ``part`` not None: first tokens are kept per input (several inputs). What the
        aggregate raises leaves the store as it was."""
        end = ts + self.gap
        ks = self.keys.get(key)
        if ks is not None:
            if ts < ks.emitted_end and ks.emitted_start < end:
                return REFUSED  # never reopen or extend an emitted session
            sessions = ks.open
            if sessions:
                last = sessions[-1]
                # The common case: the candidate reaches the key's latest session alone.
                if ts < last.end and last.start < end and (len(sessions) == 1 or sessions[-2].end <= ts):
                    self._join((ts, end, value, rec, part), ks, [last], 0)
                    return JOINED
        hit, at = _intersecting(ks, ts, end)
        if hit:
            assert ks is not None
            self._join((ts, end, value, rec, part), ks, hit, at)
            return JOINED
        if w >= end + self.lateness:
            return REFUSED  # closed on arrival
        self._open((ts, end, value, rec, part), ks, key, at)
        return OPENED

    def _open(self, candidate: Candidate, ks: KeySessions | None, key: Hashable, at: int) -> None:
        """The candidate as a new session of ``key``, at index ``at`` of its open ones."""
        ts, end, value, rec, part = candidate
        reducer = self.reducer
        acc = reducer.add(reducer.init(), value)  # may raise: nothing changed yet
        if ks is None:
            ks = self.keys[key] = KeySessions()
        self._seq += 1
        token = rec.token
        session = OpenSession(ts, end, acc, {part: token} if part is not None else token, self._seq)
        ks.open.insert(at, session)
        heapq.heappush(self._due, (end + self.lateness, session.seq, key, session))
        if end + self.lateness < self.next_close:
            self.next_close = end + self.lateness

    def _join(self, candidate: Candidate, ks: KeySessions, hit: list[OpenSession], at: int) -> None:
        """Merge the candidate and the open sessions it intersects (``hit``, from index
        ``at`` of the key's, in order) into the first of them."""
        ts, end, value, rec, part = candidate
        reducer = self.reducer
        first = hit[0]
        acc = first.acc
        for other in hit[1:]:
            acc = reducer.merge(acc, other.acc)
        first.acc = reducer.add(acc, value)  # may raise: nothing changed yet
        first.end = max(end, hit[-1].end)  # its heap entry is rescheduled when it comes up
        if ts < first.start:
            first.start = ts
        for other in hit[1:]:
            first.token = _earliest(first.token, other.token)
            other.end = -FOREVER  # merged away: its heap entry is dropped when it comes up
        if part is not None and part not in first.token:
            first.token[part] = rec.token
        if len(hit) > 1:
            del ks.open[at + 1 : at + len(hit)]

    def pop_due(self) -> list[tuple[Hashable, OpenSession]]:
        """Close every session the watermark has closed (``W >= end + A``): ``(key,
        session)``. The heap keeps one entry a session, at most its close time (a session
        that grew is put back at its new one when its entry comes up), so ``next_close`` is
        a lower bound of the earliest close."""
        due, w, lateness, closed = self._due, self.watermark, self.lateness, []
        while due and due[0][0] <= w:
            close, seq, key, s = heapq.heappop(due)
            if s.end == -FOREVER:
                continue  # merged into another
            if s.end + lateness > close:
                heapq.heappush(due, (s.end + lateness, seq, key, s))  # it grew since
                continue
            ks = self.keys[key]
            ks.open.remove(s)
            if s.end > ks.emitted_end:
                ks.emitted_start, ks.emitted_end = s.start, s.end
                heapq.heappush(self._forget, (s.end + 2 * self.gap + lateness, seq, key, s.end))
            closed.append((key, s))
        forget = self._forget
        while forget and forget[0][0] <= w:
            _, _, key, end = heapq.heappop(forget)
            known = self.keys.get(key)
            if known is None or known.emitted_end != end:
                continue  # a later session was emitted since: its own entry decides
            if all(s.start >= end + self.gap for s in known.open):
                if known.open:
                    known.emitted_start = known.emitted_end = NEVER
                else:
                    del self.keys[key]
        self.next_close = due[0][0] if due else FOREVER
        return closed

    def earliest_end(self) -> float:
        """End of the session that closes first (``inf`` when none is open)."""
        return self.next_close - self.lateness if self.next_close < FOREVER else FOREVER

    def has_data(self) -> bool:
        """An open session, or an emitted one still remembered: a restart would need it."""
        return bool(self.keys)

    def tokens(self) -> list[Any]:
        """The first token of every open session (what holds the checkpoint)."""
        return [s.token for ks in self.keys.values() for s in ks.open]

    def first_open_end(self, watermark: float) -> float:
        """End of the earliest open session ``watermark`` has not closed (``inf``: none)."""
        lateness = self.lateness
        ends = [s.end for ks in self.keys.values() for s in ks.open if s.end + lateness > watermark]
        return min(ends, default=FOREVER)

    def entries(self) -> list[tuple[float, Hashable, float]]:
        """``(end, key, start)`` of every open session, by end."""
        return sorted(
            ((s.end, key, s.start) for key, ks in self.keys.items() for s in ks.open), key=lambda e: (e[0], e[2])
        )

    def state(self) -> list[Any]:
        """Plain values for a snapshot (:mod:`streams.eventtime.snapshot`)."""
        keys = [
            [key, [[s.start, s.end, s.acc, s.token, s.seq] for s in ks.open], ks.emitted_start, ks.emitted_end]
            for key, ks in self.keys.items()
        ]
        return [keys, self.watermark, self.order, self._seq, [list(f) for f in self._forget]]

    def set_state(self, state: list[Any], key_of: Any) -> None:
        # Each session's entry is put back at its close time; the original's entries may
        # lie lower (sessions grown since), which only makes it look earlier, never later.
        """Take what :meth:`state` gave; ``key_of`` turns a decoded key back into a key."""
        keys, self.watermark, self.order, self._seq, forget = state
        self.keys, self._due = {}, []
        for key, sessions, emitted_start, emitted_end in keys:
            key = key_of(key)
            ks = self.keys[key] = KeySessions()
            ks.emitted_start, ks.emitted_end = emitted_start, emitted_end
            for start, end, acc, token, seq in sessions:
                s = OpenSession(start, end, acc, token, seq)
                ks.open.append(s)
                self._due.append((end + self.lateness, seq, key, s))
        heapq.heapify(self._due)
        self._forget = [(t, seq, key_of(key), end) for t, seq, key, end in forget]
        heapq.heapify(self._forget)
        self.next_close = self._due[0][0] if self._due else FOREVER


def _intersecting(ks: KeySessions | None, ts: float, end: float) -> tuple[list[OpenSession], int]:
    """The open sessions of a key that the candidate ``[ts, end)`` intersects, in order,
    and the index of the first (or where a new session goes, when none)."""
    hit: list[OpenSession] = []
    at = 0
    if ks is not None:
        for i, s in enumerate(ks.open):
            if s.start >= end:
                break
            if ts < s.end:
                if not hit:
                    at = i
                hit.append(s)
            elif not hit:
                at = i + 1
    return hit, at


def _earliest(a: Any, b: Any) -> Any:
    """The earlier of two first tokens (None: none; a dict: per input)."""
    if isinstance(a, dict):
        merged = dict(a)
        for part, token in b.items():
            if part not in merged or token < merged[part]:
                merged[part] = token
        return merged
    if a is None:
        return b
    return a if b is None or a <= b else b
