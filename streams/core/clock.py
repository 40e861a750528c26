"""The clock: where the runtime reads what time it is now, and waits for time to pass.

This module is the only place product code reads the wall clock (a test holds it). Two
readings, for two uses (docs/event-time.md, "Which clock decides what"):

- :meth:`Clock.now`, the wall clock in POSIX seconds: stamps what is written down for other
  processes and people (a batch's arrival time, a lease's expiry in the shared table, a dead
  letter's time). It may step: NTP corrects it, a VM resumes, someone sets it by hand.
- :meth:`Clock.monotonic`, seconds that only ever pass: everything a worker judges for
  itself (how long since a queue's newest arrival was read, how long since a lease was
  renewed) is measured on it, so a step of the wall clock moves none of it.

:class:`StepWatch` notices when the two part (a step) and says so once. Tests and
``streams.testing`` move a :class:`ManualClock` by hand, and can step its wall clock alone.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol

import anyio
import anyio.lowlevel

log = logging.getLogger("headrace.clock")

# A wall clock that parts from the monotonic one by more than this has stepped.
STEP_THRESHOLD = 1.0


# The system's wall clock in POSIX seconds, for code with no :class:`Clock` at hand (a row's
# timestamp, a status snapshot's time); judge no duration by it. ``time.time`` itself, not a
# function around it: a handoff's append reads it on every event's path.
wall_time: Callable[[], float] = time.time


class Clock(Protocol):
    """The wall-clock time in POSIX seconds, the monotonic time, and a way to wait."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class WallClock:
    """The system's wall clock (``time.time``) and monotonic clock (``time.monotonic``).

    >>> WallClock().now() > 1.6e9, WallClock().monotonic() > 0
    (True, True)
    """

    __slots__ = ()

    # The system's clock functions themselves: every event is stamped with ``now`` and every
    # read checks its lease on ``monotonic``, where a method around each was a call of its own.
    now = staticmethod(time.time)
    monotonic = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


WALL_CLOCK = WallClock()


class ManualClock:
    """A clock that moves only when told to; sleepers wake when :meth:`advance` passes their
    deadline. A test drives a loop round by round: wait until the loop sleeps
    (:meth:`until_sleeping`), advance, repeat. :meth:`step` moves the wall clock alone, as
    NTP or a resumed VM does; sleepers wait on the monotonic time.

    >>> clock = ManualClock(100.0)
    >>> clock.advance(5)
    >>> clock.step(-60)
    >>> clock.now(), clock.monotonic()
    (45.0, 105.0)
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._monotonic = float(start)
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()  # ties wake in the order they slept
        self._fell_asleep: anyio.Event | None = None  # created in the event loop, when needed

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        wake = anyio.Event()
        heapq.heappush(self._sleepers, (self._monotonic + seconds, next(self._order), wake))
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
        self._monotonic += seconds
        while self._sleepers and self._sleepers[0][0] <= self._monotonic:
            heapq.heappop(self._sleepers)[2].set()

    def step(self, seconds: float) -> None:
        """Step the wall clock by ``seconds`` (either way); no time passes."""
        self._now += seconds


class StepWatch:
    """Notices a step of ``clock``'s wall clock against its monotonic one: the wall time
    minus the monotonic time (the offset) moving by more than :data:`STEP_THRESHOLD` since
    the last look. Each step is one warning line with its size; :attr:`step` is the sum of
    the steps seen (0.0 once the clock is back; slow drift is not counted); :attr:`count`,
    :attr:`last` and :attr:`last_at` (the wall time it was seen at) are what
    ``headrace status`` shows. ``say=False`` watches without the warning (a second watch
    of a clock another one already speaks for).

    >>> clock = ManualClock(1000.0)
    >>> watch = StepWatch(clock)
    >>> clock.advance(5); watch.check()
    0.0
    >>> clock.step(600); watch.check()
    600.0
    >>> clock.step(-600); watch.check()
    0.0
    >>> watch.count, watch.last, watch.last_at
    (2, -600.0, 1005.0)
    """

    __slots__ = ("_clock", "_offset", "_say", "count", "last", "last_at", "step")

    def __init__(self, clock: Clock, *, say: bool = True) -> None:
        self._clock = clock
        self._say = say
        self._offset = clock.now() - clock.monotonic()
        self.step = 0.0
        self.count = 0  # steps seen
        self.last = 0.0  # the last one's size, s (either way)
        self.last_at: float | None = None  # the wall time it was seen at

    def check(self) -> float:
        """Look at the clock now; the wall clock's total step since the watch started."""
        now = self._clock.now()
        offset = now - self._clock.monotonic()
        moved, self._offset = offset - self._offset, offset  # slow drift (NTP slewing) is no step
        if abs(moved) > STEP_THRESHOLD:
            self.step += moved
            if abs(self.step) <= STEP_THRESHOLD:
                self.step = 0.0
            self.count, self.last, self.last_at = self.count + 1, moved, now
        if abs(moved) > STEP_THRESHOLD and self._say:
            log.warning(
                "the wall clock stepped %+.1f s against the monotonic clock (%+.1f s in all); "
                "processing time and leases follow elapsed time and are unaffected",
                moved,
                self.step,
            )
        return self.step
