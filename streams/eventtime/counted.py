"""Windows of a count of events: ``Tumbling(events=N)`` and ``Hopping(events=N, every=M)``.

As Quix's count windows: per key, in the order the events are accepted (past the ordering
policy and dedup), a window opens at the key's events number ``0, M, 2M, ...`` and holds
``N`` events; it closes and is emitted at step 4 of its ``N``-th event, whatever the
watermark. ``M > N`` leaves events that belong to no window; ``M < N`` overlaps windows.
A window's ``start`` and ``end`` are the earliest and latest timestamps of its events (both
included). A window still short of ``N`` events is emitted only by a final
watermark (``on_completed``, ``flush``): a watermark closes nothing else, so
``allowed_lateness`` and ``idle_timeout`` do not apply, and no event is ever refused
``window_closed``.

>>> from streams.eventtime.aggregates import Count
>>> store = CountStore(Hopping(events=3, every=2), Count())
>>> done = [store.add("k", t * 10**6, None, token=t, clock=t * 10**6) for t in range(5)]  # microseconds
>>> [[(w.start, w.end, w.value) for w in d] for d in done]
[[], [], [(0.0, 2.0, 3)], [], [(2.0, 4.0, 3)]]
>>> [(w.start, w.value, w.final) for w in store.pop_due()]  # open: the window from event 4 only
[]
>>> store.watermark = float("inf")
>>> [(w.start, w.value, w.final) for w in store.pop_due()]
[(4.0, 1, True)]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from streams.core.micros import to_seconds
from streams.eventtime.aggregates import Reducer
from streams.eventtime.results import WindowResult
from streams.eventtime.watermark import FOREVER, NEVER
from streams.eventtime.windows import Hopping, KeyedStore, Tumbling


class OpenCount:
    """One open counted window of a key: its aggregate, how many events it holds, their
    earliest and latest timestamps, and its first event's token (what holds the checkpoint)."""

    __slots__ = ("acc", "n", "start", "end", "token")

    def __init__(self, acc: Any, start: float, token: Any) -> None:
        self.acc, self.n, self.start, self.end, self.token = acc, 0, start, start, token


class KeyCount:
    """A key's accepted events so far, and its open windows, oldest first."""

    __slots__ = ("seen", "open")

    def __init__(self) -> None:
        self.seen = 0
        self.open: list[OpenCount] = []


class CountStore(KeyedStore):
    """The counted windows of one watermark (an input, or a substream), per key.

    Same face to the watermark flow as :class:`~streams.eventtime.windows.WindowStore`:
    ``watermark``, ``next_close`` (``inf``: only a final watermark closes anything),
    ``order``, :meth:`pop_due`, :meth:`tokens`.
    """

    __slots__ = ("size", "every", "reducer", "keys", "watermark", "next_close", "order")

    def __init__(self, spec: Tumbling | Hopping, reducer: Reducer[Any, Any], order: int = 0, watermark: float = NEVER):
        assert spec.events is not None and spec.every is not None  # counted(spec)
        self.size, self.every = spec.events, spec.every
        self.reducer = reducer
        self.keys: dict[Hashable, KeyCount] = {}
        self.watermark = watermark
        self.next_close = FOREVER
        self.order = order

    def add(self, key: Hashable, ts: float, value: Any, token: Any, clock: float) -> list[WindowResult]:
        """Step 4 for an accepted event of ``key`` (timestamp ``ts``, ``value`` what the
        aggregate adds): the windows it completed, emitted at ``clock``. What the aggregate
        raises leaves the store as it was (the event is refused by the caller)."""
        kc = self.keys.get(key)
        if kc is None:
            kc = self.keys[key] = KeyCount()
        reducer = self.reducer
        opens = kc.seen % self.every == 0
        # Every new accumulator first: one that raises changes nothing.
        accs = [reducer.add(w.acc, value) for w in kc.open]
        fresh = reducer.add(reducer.init(), value) if opens else None
        for w, acc in zip(kc.open, accs, strict=True):
            w.acc = acc
            w.n += 1
            if ts < w.start:
                w.start = ts
            elif ts > w.end:
                w.end = ts
        if opens:
            w = OpenCount(fresh, ts, token)
            w.n = 1
            kc.open.append(w)
        kc.seen += 1
        done: list[WindowResult] = []
        while kc.open and kc.open[0].n == self.size:
            w = kc.open.pop(0)
            done.append(
                WindowResult(key, to_seconds(w.start), to_seconds(w.end), reducer.result(w.acc), to_seconds(clock))
            )
        if not kc.open and kc.seen % self.every == 0:
            del self.keys[key]  # between windows with nothing open: a new key again
        return done

    def pop_due(self) -> list[WindowResult]:
        """At a final watermark, every window still open (short of its count), by key then
        age; before one, none."""
        if self.watermark < FOREVER:
            return []
        result = self.reducer.result
        due = [
            WindowResult(key, to_seconds(w.start), to_seconds(w.end), result(w.acc), None)
            for key, kc in self.keys.items()
            for w in kc.open
        ]
        self.keys.clear()
        return due

    def tokens(self) -> list[Any]:
        """The first token of every open window (what holds the checkpoint)."""
        return [w.token for kc in self.keys.values() for w in kc.open]

    def entries(self) -> list[tuple[float, Hashable, float]]:
        """``(end, key, start)`` of every open window."""
        return [(w.end, key, w.start) for key, kc in self.keys.items() for w in kc.open]

    def state(self) -> list[Any]:
        """Plain values for a snapshot (:mod:`streams.eventtime.snapshot`)."""
        keys = [
            [key, kc.seen, [[w.acc, w.n, w.start, w.end, w.token] for w in kc.open]] for key, kc in self.keys.items()
        ]
        return [keys, self.watermark, self.order]

    def set_state(self, state: list[Any], key_of: Callable[[Any], Hashable]) -> None:
        """Take what :meth:`state` gave; ``key_of`` turns a decoded key back into a key."""
        keys, self.watermark, self.order = state
        self.keys = {}
        for key, seen, windows in keys:
            kc = self.keys[key_of(key)] = KeyCount()
            kc.seen = seen
            for acc, n, start, end, token in windows:
                w = OpenCount(acc, start, token)
                w.n, w.end = n, end
                kc.open.append(w)
