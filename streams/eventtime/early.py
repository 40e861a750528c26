"""Early and updated results: the updates of fixed windows declared with ``emit=Every(...)``.

The contract is ``docs/event-time.md``, "Early and updated results". Besides its final
result, such a window emits updates (``final=False``) with a revision ``0, 1, 2, ...`` of its
own:

- ``Every(seconds)``: at a tick at processing time ``t``, when its value changed since its
  last emission (or since it opened) and that emission (or its opening) was at least a period
  before ``t``;
- ``Every(events=N)``: after the step in which the N-th event since its last emission arrived,
  when its value changed;
- with allowed lateness ``A > 0``: once at the step where ``W >= end`` first holds (the
  on-time result), when its value changed.

The final result, at ``W >= end + A``, carries the next revision. "Changed" compares the
results (``==``), so an event that leaves a ``Max`` where it was brings no update.

One :class:`Revisions` per window store (:class:`~streams.eventtime.windows.WindowStore`'s
``early``) keeps, per open window and key, ``[next revision, time of the last emission (or of
the opening), emitted yet, last value emitted, events since]``: plain values, saved with the
store's snapshot, so a restart goes on with the revisions where the checkpoint left them.

>>> from streams.eventtime import Count, OrderingPolicy, Processor, Tumbling
>>> from streams.eventtime.windows import Every
>>> from types import SimpleNamespace as Ev
>>> p = Processor(OrderingPolicy(), Tumbling(10, emit=Every(events=2)))
>>> out = p.on_events([Ev(value=0, event_time=t, arrival_time=t, token=t) for t in (1.0, 2.0, 3.0, 4.0, 11.0)])
>>> [(w.start, w.value, w.final, w.revision) for w in out.windows]
[(0.0, 2, False, 0), (0.0, 4, False, 1), (0.0, 4, True, 2)]
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any

from streams.core.micros import optional_seconds, to_micros, to_seconds
from streams.eventtime.aggregates import Reducer
from streams.eventtime.results import Output, WindowResult
from streams.eventtime.watermark import FOREVER
from streams.eventtime.windows import Every, WindowAssigner, WindowStore

__all__ = ["Revisions"]

# An entry's fields (a list, as the snapshot stores it).
_REVISION, _SINCE, _EMITTED, _LAST, _COUNT = range(5)


class Revisions:
    """The update bookkeeping of one window store (see the module's docstring).

    ``books[window][key]`` is a window's entry for a key; ``ontime`` the heap of windows whose
    on-time result is still to come (``A > 0``); ``pending`` the entries whose N-th event
    arrived in the current step; ``next_due`` a lower bound of the processing time at which
    a tick has an update to emit.
    """

    __slots__ = ("assigner", "reducer", "period", "events", "books", "ontime", "waiting", "pending", "next_due")

    def __init__(self, every: Every, assigner: WindowAssigner, reducer: Reducer[Any, Any]) -> None:
        self.assigner = assigner
        self.reducer = reducer
        self.period = FOREVER if every.seconds is None else to_micros(every.seconds)
        self.events = every.events or 0
        self.books: dict[int, dict[Hashable, list[Any]]] = {}
        self.ontime: list[int] = []  # window indexes: their ends rise with them
        self.waiting: set[int] = set()  # the windows in ontime
        self.pending: list[tuple[int, Hashable]] = []
        self.next_due = FOREVER

    # -------------------------------------------------------------- the per-event path

    def opened(self, store: WindowStore, pane: int) -> None:
        """``pane`` opened: its windows' on-time results are scheduled (``A > 0``), and the
        store's ``next_close`` lowered to the earliest, so that the step reaching it runs
        the store's closing (:meth:`WatermarkFlow.close`)."""
        a = self.assigner
        if a.lateness <= 0:
            return
        for window in a.windows_of_pane(pane):
            # A window whose end the watermark had passed when it opened has no on-time step.
            if window not in self.waiting and a.end(window) > store.watermark:
                self.waiting.add(window)
                heapq.heappush(self.ontime, window)
        store.next_close = min(store.next_close, self.next_end())

    def touch(self, pane: int, key: Hashable, arrival: float, watermark: float) -> bool:
        """An event of ``key`` went into ``pane`` (at processing time ``arrival``, under the
        closing ``watermark``): each open window holding the pane counts it. True when one
        of them is due for an update after this step (``Every(events=N)``)."""
        a, books, events = self.assigner, self.books, self.events
        # Windows that do not overlap are their own panes: no list of them to make.
        for window in (pane,) if a.per_window == 1.0 else a.windows_of_pane(pane):
            if a.close_time(window) <= watermark:
                continue  # closed: the event is not in it
            book = books.get(window)
            if book is None:
                book = books[window] = {}
            entry = book.get(key)
            if entry is None:
                entry = book[key] = [0, arrival, False, None, 0]
            entry[_COUNT] += 1
            if events:
                if entry[_COUNT] >= events:
                    self.pending.append((window, key))
            elif entry[_SINCE] + self.period < self.next_due:
                self.next_due = entry[_SINCE] + self.period
        return bool(self.pending)

    def after_step(self, store: WindowStore, clock: float, out: Output, trace: bool) -> None:
        """The step of an event ended: the updates its N-th events made due (``events=N``)."""
        pending, self.pending = self.pending, []
        for window, key in dict.fromkeys(pending):
            entry = self.books.get(window, {}).get(key)
            if entry is not None and entry[_COUNT] >= self.events:  # still open, not emitted since
                self._emit(store, window, key, entry, clock, out, trace)

    # -------------------------------------------------------------- ticks and closing

    def tick(self, store: WindowStore, now: float, out: Output, *, strict: bool, trace: bool) -> None:
        """A tick at ``now``: every window (and key) with a change, whose last emission (or
        opening) was at least a period before, emits an update (``Every(seconds)``).
        ``strict``: the tick is a record's arrival, which counts first: due at ``now``
        waits for the next observation past it (as idle timeouts do)."""
        if self.next_due > now or (strict and self.next_due == now):
            return
        period, next_due = self.period, FOREVER
        for window in sorted(self.books):
            for key, entry in self.books[window].items():
                if not entry[_COUNT]:
                    continue
                due = entry[_SINCE] + period
                if due < now or (due == now and not strict):
                    if not self._emit(store, window, key, entry, now, out, trace):
                        entry[_COUNT] = 0  # back at the value last emitted: nothing to say
                    continue
                next_due = min(next_due, due)
        self.next_due = next_due

    def due_ontime(self, watermark: float) -> list[int]:
        """The windows whose end ``watermark`` has reached, oldest first (on-time results)."""
        a, ontime, due = self.assigner, self.ontime, []
        while ontime and a.end(ontime[0]) <= watermark:
            window = heapq.heappop(ontime)
            self.waiting.discard(window)
            due.append(window)
        return due

    def emit_ontime(self, store: WindowStore, window: int, clock: float | None, out: Output, trace: bool) -> None:
        """The on-time results of ``window``: each key's, unless already emitted at that value."""
        for key, entry in list(self.books.get(window, {}).items()):
            self._emit(store, window, key, entry, clock, out, trace)

    def next_end(self) -> float:
        """The end of the earliest window whose on-time result is to come (``inf``: none)."""
        return self.assigner.end(self.ontime[0]) if self.ontime else FOREVER

    def closed(self, window: int) -> dict[Hashable, int]:
        """``window`` closed: each key's revision for its final result (0 for a key with no
        entry, as a window that never emitted an update), and its entries go."""
        book = self.books.pop(window, None) or {}
        return {key: entry[_REVISION] for key, entry in book.items()}

    def _emit(
        self,
        store: WindowStore,
        window: int,
        key: Hashable,
        entry: list[Any],
        clock: float | None,
        out: Output,
        trace: bool,
    ) -> bool:
        """Emit ``key``'s update of ``window`` if its value changed since the last one."""
        value = self.reducer.result(self._accumulator(store, window, key))
        if entry[_EMITTED] and entry[_LAST] == value:
            return False
        start, end = self.assigner.bounds(window)
        result = WindowResult(
            key,
            to_seconds(start),
            to_seconds(end),
            value,
            optional_seconds(clock),
            final=False,
            revision=entry[_REVISION],
        )
        out.windows.append(result)
        if trace:
            out.trace.append(result)
        entry[_REVISION] += 1
        if clock is not None:
            entry[_SINCE] = clock
        entry[_EMITTED], entry[_LAST], entry[_COUNT] = True, value, 0
        return True

    def _accumulator(self, store: WindowStore, window: int, key: Hashable) -> Any:
        """``key``'s accumulator over ``window``'s panes, leaving the panes as they are (a
        reducer's ``merge`` may update its first argument: it gets a fresh one)."""
        a, reducer = self.assigner, self.reducer
        acc = reducer.init()
        for pane in a.panes_of_window(window):
            state = store.panes.get(pane, {}).get(key)
            if state is not None:
                acc = reducer.merge(acc, state[0])
        return acc

    # -------------------------------------------------------------- snapshot

    def state(self) -> list[Any]:
        """Plain values for a snapshot (:mod:`streams.eventtime.snapshot`)."""
        books = [[window, [[key, *entry] for key, entry in book.items()]] for window, book in self.books.items()]
        return [books, list(self.ontime), self.next_due]

    def set_state(self, state: list[Any], key_of: Any) -> None:
        """Take what :meth:`state` gave; ``key_of`` turns a decoded key back into a key."""
        books, ontime, self.next_due = state
        self.books = {window: {key_of(key): list(entry) for key, *entry in book} for window, book in books}
        self.ontime = list(ontime)
        heapq.heapify(self.ontime)
        self.waiting = set(self.ontime)
        self.pending = []
