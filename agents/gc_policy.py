"""The worker's garbage-collector policy, for a worker with a stream per device.

A worker holds an activation per active stream, each a couple of dozen objects that live
for minutes or hours (until ``stream_inactivity_period``), and makes short-lived objects per
batch by the thousand. CPython's default collector fits neither: it collects the youngest
generation every 700 new objects, and a full collection, which walks every live object,
each time the objects promoted since the last one reach a quarter of those that survived
it; with 100,000 activations those full walks took more than a third of a worker's time.

The collector belongs to the process. A provider that runs pulling agents is a worker, a
process's long-running reader of queues, whatever started it, so by default
(``StreamProviderOptions.tune_gc=None``) a worker tunes the collector while it runs: under
``headrace worker`` (which calls :meth:`GcPolicy.own_process`), and in an application's own
process too, unless the application manages the collector itself: it has disabled it or
set thresholds other than CPython's (:meth:`GcPolicy.wanted`). ``tune_gc=True`` tunes it anyway and
``tune_gc=False`` never does. A provider that runs no agents (``provider.client()``, a
producer) never tunes it. While a worker runs (the first ``async with provider`` of a
process to its last), the tuned collector

- freezes what start-up left (modules, classes, the application's registrations): no
  collection walks it again (``gc.freeze()``);
- collects the youngest generation every ``YOUNG_THRESHOLD`` new objects instead of 700: a
  batch's objects die before a collection sees them, instead of being promoted and walked
  again;
- freezes what a read that opened streams made (:meth:`GcPolicy.settle`), and the survivors
  of each young collection at once, so each long-lived object is
  walked once at most, not again in the middle and the oldest generations (with 100,000
  activations made in a burst, those walks were a fifth of the worker's time, mostly cache
  misses).
  Frozen objects are still freed when their last reference goes (most are: an activation
  holds no reference cycle). A cycle among them waits for a *sweep*, a full collection that
  walks everything: the worker runs one (:meth:`GcPolicy.keep_swept`) once the heap (memory
  blocks in use, cheap to count, unlike the frozen objects, which counting walks) has grown
  to ``SWEEP_GROWTH`` times what the last sweep left, at most once every
  ``SWEEP_INTERVAL`` and no more than ``SWEEP_SHARE`` of the time (a sweep that took two
  seconds waits 100 s before the next). So a walk of everything comes each time the heap
  doubles, amortized two walks per object, and garbage cycles grow the heap at most twofold
  (or for a minute) before one. A ``gc.collect()`` of the application's is a sweep too.

When the last worker of the process stops, the collector's thresholds are restored and the
frozen objects are thawed (all of them: ``gc`` cannot tell whose they are).

>>> policy = GcPolicy()
>>> policy.enter(); policy.active
True
>>> policy.leave(); policy.active
False
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

import anyio

YOUNG_THRESHOLD = 200_000  # new objects (allocations less deallocations) between young collections
SWEEP_GROWTH = 2  # walk everything again once the heap has grown this much
SWEEP_SHARE = 0.02  # sweeps take at most this share of the time: the next waits 50 times the last
SWEEP_INTERVAL = 60.0  # seconds at least between sweeps
CHECK_PERIOD = 5.0  # seconds between looks at the size of the heap


class GcPolicy:
    """The collector's settings while workers run in this process, counted by worker."""

    def __init__(self, sweep_interval: float = SWEEP_INTERVAL, check_period: float = CHECK_PERIOD) -> None:
        self._sweep_interval = sweep_interval
        self._check_period = check_period
        self._workers = 0
        self._saved: tuple[int, int, int] | None = None
        self._swept = 0  # memory blocks in use after the last sweep
        self._sweep_started = 0.0
        self._next_sweep = 0.0  # time.monotonic() before which no sweep is due (SWEEP_SHARE)
        self.sweeps = 0  # full collections that walked everything
        self.owns_process = False  # set by a command that runs nothing but headrace

    def own_process(self) -> None:
        """Say this process runs nothing but headrace (``headrace worker``): workers whose
        ``tune_gc`` is unset then tune the collector whatever its settings."""
        self.owns_process = True

    def wanted(self, tune_gc: bool | None) -> bool:
        """Whether a worker with this ``tune_gc`` setting tunes the collector here: as
        told, and when unset (the default) unless the application manages the collector
        itself (:func:`managed_by_application`) in a process headrace does not own.

        >>> GcPolicy().wanted(None) == (not managed_by_application()), GcPolicy().wanted(False)
        (True, False)
        """
        if tune_gc is not None:
            return tune_gc
        return self.owns_process or self.active or not managed_by_application()

    @property
    def active(self) -> bool:
        return self._workers > 0

    def enter(self) -> None:
        """A worker starts: apply the policy if it is the process's first."""
        self._workers += 1
        if self._workers > 1:
            return
        self._saved = gc.get_threshold()
        # The young generations' garbage is freed before the freeze; the oldest's waits for
        # the next walk of everything (a sweep) as it would have waited for a full collection:
        # a full one here walked the whole process at every start (each test of a suite
        # that starts a worker paid for one).
        gc.collect(1)
        gc.freeze()
        self._swept = sys.getallocatedblocks()
        self._next_sweep = time.monotonic() + self._sweep_interval
        _, middle, old = self._saved
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
        gc.callbacks.append(self._collected)

    def leave(self) -> None:
        """A worker stopped: restore the collector if it was the process's last."""
        if self._workers == 0:
            return
        self._workers -= 1
        if self._workers:
            return
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)
        assert self._saved is not None
        gc.set_threshold(*self._saved)
        self._saved = None
        gc.unfreeze()

    def settle(self) -> None:
        """Long-lived objects were just made (a read opened streams: their activations stay
        for minutes or hours): freeze them now, before a young collection walks them once
        (what is frozen with them and dies is still freed by its reference count; a cycle
        waits for the next sweep)."""
        if self.active:
            gc.freeze()

    def sweep_due(self, now: float | None = None) -> bool:
        """Whether a sweep is due: the heap has grown to ``SWEEP_GROWTH`` times
        what the last one left, and ``sweep_interval`` and ``SWEEP_SHARE`` allow one
        ``now`` (``time.monotonic()`` by default)."""
        if not self.active or (time.monotonic() if now is None else now) < self._next_sweep:
            return False
        return sys.getallocatedblocks() > SWEEP_GROWTH * max(self._swept, 1)

    async def keep_swept(self) -> None:
        """Run a sweep whenever one is due, looking every ``check_period`` seconds (a worker
        runs this while it tunes the collector; cancel it to stop)."""
        while True:
            await anyio.sleep(self._check_period)
            if self.sweep_due():
                gc.collect()  # a sweep: see _collected

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] < 2:
            if phase == "stop":
                gc.freeze()  # a young collection's survivors: walked once, not again when older
            return
        if phase == "start":
            # A full collection (a sweep, or the application's gc.collect()) walks everything,
            # cycles among the frozen objects too.
            gc.unfreeze()
            self._sweep_started = time.perf_counter()
            return
        gc.freeze()
        self.sweeps += 1
        self._swept = sys.getallocatedblocks()
        took = time.perf_counter() - self._sweep_started
        self._next_sweep = time.monotonic() + max(self._sweep_interval, took / SWEEP_SHARE)


# CPython's own thresholds: an application that set others manages its collector itself.
CPYTHON_THRESHOLDS = (700, 10, 10) if sys.version_info < (3, 13) else (2000, 10, 0)


def managed_by_application() -> bool:
    """Whether the process's collector is set otherwise than CPython leaves it (disabled,
    or thresholds of its own) with no worker's policy applied: the application manages it,
    and a worker leaves it alone unless told ``tune_gc=True``. (Objects the application
    froze do not say so: freezing a set-up is what the policy does too. They are thawed
    with the rest when the last worker stops.)"""
    return not gc.isenabled() or gc.get_threshold() != CPYTHON_THRESHOLDS


# One per process: the collector is the process's.
POLICY = GcPolicy()
