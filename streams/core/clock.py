"""The clock: where the runtime reads what time it is now, and waits for time to pass.

A worker stamps each published batch with its arrival time and ticks its event-time
activations (late arrival, idle timeouts) from it; balancers, leases and membership read and
wait on it too. Lease expiries and heartbeats are compared across processes, so it is the wall
clock (:data:`WALL_CLOCK`, ``time.time``), not a monotonic one, unless a provider is given
another: tests and ``streams.testing`` move a :class:`ManualClock` by hand, so a test is the
same on every run and never sleeps.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Protocol

import anyio
import anyio.lowlevel


class Clock(Protocol):
    """The time in POSIX seconds, and a way to wait for it to pass."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class WallClock:
    """The system's wall clock (``time.time``).

    >>> WallClock().now() > 1.6e9
    True
    """

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


WALL_CLOCK = WallClock()


class ManualClock:
    """A clock that moves only when told to; sleepers wake when :meth:`advance` passes their
    deadline. A test drives a loop round by round: wait until the loop sleeps
    (:meth:`until_sleeping`), advance, repeat.

    >>> clock = ManualClock(100.0)
    >>> clock.advance(5)
    >>> clock.now()
    105.0
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()  # ties wake in the order they slept
        self._fell_asleep: anyio.Event | None = None  # created in the event loop, when needed

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        wake = anyio.Event()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), wake))
        if self._fell_asleep is not None:
            self._fell_asleep.set()
            self._fell_asleep = None
        await wake.wait()

    async def until_sleeping(self, count: int = 1) -> None:
        """Wait until at least ``count`` tasks are asleep on this clock."""
        while len(self._sleepers) < count:
            if self._fell_asleep is None:
                self._fell_asleep = anyio.Event()
            await self._fell_asleep.wait()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError(f"a clock never goes back; advance by {seconds!r}?")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            heapq.heappop(self._sleepers)[2].set()
