"""The processing clock: where the runtime reads what time it is now.

A worker stamps each published batch with its arrival time and ticks its event-time
activations (late arrival, idle timeouts) from this clock. It is the wall clock
(:data:`WALL_CLOCK`) unless a provider is given another: ``streams.testing`` moves one by hand,
so a test of a consumer is the same on every run and never sleeps.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """The processing time, in POSIX seconds."""

    def now(self) -> float: ...


class WallClock:
    """The system's wall clock (``time.time``).

    >>> WallClock().now() > 1.6e9
    True
    """

    __slots__ = ()

    def now(self) -> float:
        return time.time()


WALL_CLOCK = WallClock()
