"""A latency histogram with fixed buckets: what a pulling agent records of its queue reads.

Plain counts, no locks and no dependency: the agent adds one observation per read on its
event loop, and a metrics collector reads :meth:`LatencyHistogram.snapshot` on the same loop
(Orleans reports the same figure as its queue read duration).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

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

    >>> h = LatencyHistogram((0.01, 0.1))
    >>> for seconds in (0.002, 0.05, 3.0):
    ...     h.observe(seconds)
    >>> h.snapshot().cumulative
    (1, 2, 3)
    """

    __slots__ = ("bounds", "_counts", "_sum")

    def __init__(self, bounds: Sequence[float] = READ_BUCKETS) -> None:
        self.bounds = tuple(sorted(bounds)) + (float("inf"),)
        self._counts = [0] * len(self.bounds)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(self.bounds, seconds)] += 1
        self._sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        cumulative, running = [], 0
        for n in self._counts:
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self._sum)
