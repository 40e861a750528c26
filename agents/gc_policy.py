"""The worker's garbage-collector policy (issue 15: a stream per device).

A worker holds an activation per active stream, each a couple of dozen objects that live
for minutes or hours (until ``stream_inactivity_period``), and makes short-lived objects per
batch by the thousand. CPython's default collector fits neither: it collects the youngest
generation every 700 new objects, and a full collection, which walks every live object,
each time the objects promoted since the last one reach a quarter of those that survived
it; with 100,000 activations those full walks took more than a third of a worker's time.

The collector belongs to the process, not to the library: a worker tunes it only in a process
headrace owns (``headrace worker`` calls :meth:`GcPolicy.own_process`), or where the
application asks with ``StreamProviderOptions.tune_gc=True``; ``False`` never tunes it.
While a worker runs (the first ``async with provider`` of a process to its last), the tuned
collector

- freezes what start-up left (modules, classes, the application's registrations): no
  collection walks it again (``gc.freeze()``);
- collects the youngest generation every ``YOUNG_THRESHOLD`` new objects instead of 700: a
  batch's objects die before a collection sees them, instead of being promoted, walked
  again and counted towards the next full collection;
- freezes the survivors of each full collection, so the next one walks only what was
  promoted since (its cost follows the objects made, not the activations held). Frozen
  objects are still freed when their last reference goes (most are: an activation holds
  no reference cycle); a cycle among them is not collected until the frozen objects have
  grown to ``SWEEP_GROWTH`` times what the last whole sweep left, when the next full
  collection walks them all again. So a full walk of everything comes each time the
  long-lived objects double, amortized two walks per object.

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
from typing import Any

YOUNG_THRESHOLD = 50_000  # new objects (allocations less deallocations) between young collections
SWEEP_GROWTH = 2  # walk everything again once the frozen objects have grown this much


class GcPolicy:
    """The collector's settings while workers run in this process, counted by worker."""

    def __init__(self) -> None:
        self._workers = 0
        self._saved: tuple[int, int, int] | None = None
        self._swept = 0  # frozen objects after the last full collection that walked them all
        self.sweeps = 0  # full collections that walked everything (not only the new)
        self.owns_process = False  # set by a command that runs nothing but headrace

    def own_process(self) -> None:
        """Say this process runs nothing but headrace (``headrace worker``): workers whose
        ``tune_gc`` is unset then tune the collector."""
        self.owns_process = True

    def wanted(self, tune_gc: bool | None) -> bool:
        """Whether a worker with this ``tune_gc`` setting tunes the collector here.

        >>> GcPolicy().wanted(None), GcPolicy().wanted(True)
        (False, True)
        """
        return self.owns_process if tune_gc is None else tune_gc

    @property
    def active(self) -> bool:
        return self._workers > 0

    def enter(self) -> None:
        """A worker starts: apply the policy if it is the process's first."""
        self._workers += 1
        if self._workers > 1:
            return
        self._saved = gc.get_threshold()
        gc.collect()
        gc.freeze()
        self._swept = gc.get_freeze_count()
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

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        swept_all = gc.get_freeze_count() == 0  # nothing was frozen: this one walked everything
        gc.freeze()
        frozen = gc.get_freeze_count()
        if swept_all:
            self.sweeps += 1
            self._swept = frozen
        elif frozen > SWEEP_GROWTH * max(self._swept, 1):
            gc.unfreeze()  # the next full collection walks all, cycles among old objects too


# One per process: the collector is the process's.
POLICY = GcPolicy()
