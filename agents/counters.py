"""What a pulling agent counts for ``headrace status`` and the metrics: each consumer type's event
fates, and the latency of its queue reads.

What event time did to the events of each consumer type, counted for ``headrace status``.

Each event-time activation counts the fates of its events (its processor's
:class:`~streams.eventtime.results.Counters`: kept, adjusted, dropped, dead-lettered). An
activation ends (its stream went quiet) but its events' fates should stay counted: a queue's
:class:`FateCounts` keeps the counters of the activations that ended, per consumer type, and
adds the live ones when asked. An activation parked with open windows carries its counters in
its saved state and brings them back when its stream has data again: it is counted once.

A latency histogram with fixed buckets: what a pulling agent records of its queue reads.

Plain counts, no locks and no dependency: the agent records one duration per read on its
event loop, and a metrics collector reads :meth:`LatencyHistogram.snapshot` on the same loop
(Orleans reports the same figure as its queue read duration).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from streams.eventtime.results import Counters


class FateCounts:
    """Counters per consumer type name, of activations that ended on one queue.

    >>> counts = FateCounts()
    >>> c = Counters(events=3, adjusted=1)
    >>> counts.ended("Totals", c)
    >>> counts.by_type([("Totals", Counters(events=2))])["Totals"]["events"]
    5
    >>> counts.ended("Totals", Counters(events=4), parked="k")  # parked, then back: once
    >>> counts.restored("k")
    >>> counts.by_type([("Totals", Counters(events=4))])["Totals"]["events"]
    7
    """

    def __init__(self) -> None:
        self._ended: dict[str, dict[str, int]] = {}
        self._parked: dict[Hashable, tuple[str, dict[str, int]]] = {}
        self._delivered: dict[str, Tally] = {}  # per type: events its consumers were delivered

    def ended(self, type_name: str, counters: Counters, parked: Hashable | None = None) -> None:
        """An activation of ``type_name`` ended; ``parked``: its state's key, when its state
        was kept here to be restored (its counters then come back with it)."""
        values = counters.as_dict()
        _add(self._ended.setdefault(type_name, {}), values)
        if parked is not None:
            self._parked[parked] = (type_name, values)

    def restored(self, key: Hashable) -> None:
        """The state parked under ``key`` is live again, with its counters."""
        parked = self._parked.pop(key, None)
        if parked is not None:
            type_name, values = parked
            _add(self._ended[type_name], values, sign=-1)

    def by_type(self, live: Iterable[tuple[str, Counters]]) -> dict[str, dict[str, int]]:
        """Counters per type name: the ended activations' plus ``live`` ones', and the events
        delivered to each type's consumers (``events_out``, plain consumers' too)."""
        totals = {name: dict(values) for name, values in self._ended.items()}
        for name, counters in live:
            _add(totals.setdefault(name, {}), counters.as_dict())
        for name, tally in self._delivered.items():
            totals.setdefault(name, {})["events_out"] = tally.events
        return totals

    def tally(self, type_name: str | None) -> Tally:
        """What the consumers of ``type_name`` count their delivered events in (one per type;
        a fresh one, counted nowhere, for a consumer of no registered type)."""
        if type_name is None:
            return Tally()
        tally = self._delivered.get(type_name)
        if tally is None:
            tally = self._delivered[type_name] = Tally()
        return tally


class Tally:
    """Events delivered to the consumers of one consumer type on one queue since its agent
    started: each of them adds what it delivers (a queue's events out, per type).

    >>> counts = FateCounts()
    >>> counts.tally("app.Audit").events += 3
    >>> counts.by_type([])
    {'app.Audit': {'events_out': 3}}
    """

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events = 0


def _add(into: dict[str, int], values: Mapping[str, int], sign: int = 1) -> None:
    for name, value in values.items():
        into[name] = into.get(name, 0) + sign * value


# Seconds: a read of the embedded store takes about a millisecond, a Kafka fetch that waits
# for records up to its poll timeout (100 ms), an outage's back-off several seconds.
READ_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Cumulative counts per upper bound (the last bound is +infinity), their sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return self.cumulative[-1] if self.cumulative else 0


class LatencyHistogram:
    """Durations in seconds, counted in buckets.

    Each duration is recorded as it is (:attr:`record`: an append to an array, a call into C,
    made on every read) and counted into its bucket by :meth:`count_recorded`, on the agent's
    timer and before each :meth:`snapshot`.

    >>> h = LatencyHistogram((0.01, 0.1))
    >>> for seconds in (0.002, 0.05, 3.0):
    ...     h.record(seconds)
    >>> h.snapshot().cumulative
    (1, 2, 3)
    """

    __slots__ = ("bounds", "_counts", "_sum", "_recorded", "record")

    def __init__(self, bounds: Sequence[float] = READ_BUCKETS) -> None:
        self.bounds = tuple(sorted(bounds)) + (float("inf"),)
        self._counts = [0] * len(self.bounds)
        self._sum = 0.0
        self._recorded = array("d")  # durations recorded, not yet counted
        self.record: Callable[[float], None] = self._recorded.append

    def count_recorded(self) -> None:
        """Count the durations recorded since the last count into their buckets."""
        bounds, counts, recorded = self.bounds, self._counts, self._recorded
        for seconds in recorded:
            counts[bisect_left(bounds, seconds)] += 1
            self._sum += seconds
        del recorded[:]

    def snapshot(self) -> HistogramSnapshot:
        self.count_recorded()
        cumulative, running = [], 0
        for n in self._counts:
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self._sum)
