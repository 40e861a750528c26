"""Tolerances advised from observed lateness and disorder (``headrace status --advise``).

From a consumer type's :class:`~streams.eventtime.lateness.ObservedTimes` (a sample of its
events over the last hour), for a share ``q`` of the events (99 %, 99.9 %):

- ``out_of_order`` = the ``q`` quantile of disorder: the events at or below it are at or
  above their lane's ``newest − out_of_order``, so step 3 leaves them alone;
- ``late_arrival`` = the ``q`` quantile of lateness: step 2 leaves those alone.

Each quantile is its bucket's upper bound (:func:`~streams.eventtime.lateness.upper_of`), so
the share it covers is at least ``q`` of the sample, and it is at most 4.1 % (or 1 ms) above the
exact quantile. Each tolerance alone keeps at least ``q`` of the events unadjusted by its step;
set together, at least ``2q − 1`` of them (an event is unadjusted when it passes both).

What a setting costs is its **finalization delay**: how long after a window's end (in
processing time) the watermark reaches it, so the window can close (its allowed lateness
comes on top, the same for every setting). ``W = max(newest − O, arrival − L)`` reaches an end
``e`` when an event of time ``e + O`` arrives, typically ``O + λ`` after ``e`` (``λ`` the
median lateness), or at the latest at ``e + L``: the delay is ``min(O + λ, L)`` (``O + λ``
with ``L`` off).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from streams.eventtime.lateness import ObservedTimes

SHARES = (0.99, 0.999)  # the shares of events --advise keeps unadjusted


@dataclass(frozen=True, slots=True)
class Tolerances:
    """A setting of the two tolerances (``late_arrival`` None: off) and its finalization
    delay in seconds."""

    out_of_order: float
    late_arrival: float | None
    delay: float


def finalization_delay(out_of_order: float, late_arrival: float | None, median_lateness: float) -> float:
    """How long after a window's end the watermark typically passes it (module doc).

    >>> finalization_delay(5.0, None, 1.0), finalization_delay(5.0, 3.0, 1.0), finalization_delay(5.0, 30.0, 1.0)
    (6.0, 3.0, 6.0)
    """
    by_order = out_of_order + max(0.0, median_lateness)
    return by_order if late_arrival is None else min(by_order, late_arrival)


def current(seen: ObservedTimes) -> Tolerances:
    """The tolerances in force, with their delay on the observed lateness."""
    return Tolerances(
        seen.out_of_order,
        seen.late_arrival,
        finalization_delay(seen.out_of_order, seen.late_arrival, _median(seen)),
    )


def advise(seen: ObservedTimes, share: float) -> Tolerances:
    """The tolerances that keep ``share`` of the observed events unadjusted (module doc).

    >>> from streams.eventtime.lateness import LatenessSketch
    >>> sketch = LatenessSketch(every=1)
    >>> for i in range(100):  # 1 s late; every tenth 8 s late, 6 s behind the newest
    ...     t = float(i) - (7.0 if i % 10 == 9 else 0.0)
    ...     sketch.record(i + 1.0, t, max(float(i - 1), t))
    >>> a = advise(sketch.observed(100.0), 0.8)
    >>> round(a.out_of_order, 1), round(a.late_arrival or 0, 1), round(a.delay, 1)
    (0.0, 1.0, 1.0)
    >>> a = advise(sketch.observed(100.0), 0.99)
    >>> round(a.out_of_order, 1), round(a.late_arrival or 0, 1), round(a.delay, 1)
    (6.1, 8.1, 7.1)
    """
    if not seen.samples:
        raise ValueError("no events observed: nothing to advise from")
    out_of_order = seen.quantile("disorder", share, upper=True)
    late_arrival = seen.quantile("lateness", share, upper=True)
    return Tolerances(out_of_order, late_arrival, finalization_delay(out_of_order, late_arrival, _median(seen)))


def _median(seen: ObservedTimes) -> float:
    median = seen.quantile("lateness", 0.5)
    return 0.0 if math.isnan(median) else median
