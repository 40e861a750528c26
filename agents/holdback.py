"""Which input holds an activation's merged watermark back (ASA's
``InputPartitionNotProgressing``): one log line when an input starts holding it back, one
when it stops.

An input *holds back* the merged watermark while it is the lowest input and behind another
one. Inputs that take turns at being lowest (both moving) are normal; only an input that
stays behind for :data:`REPORT_AFTER` seconds of processing time is reported.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

from streams.eventtime.watermark import MergedWatermark

log = logging.getLogger("headrace.eventtime")

REPORT_AFTER = 5.0  # seconds an input stays behind before it is said to hold the others back


def holding_back(merged: MergedWatermark) -> Hashable | None:
    """The input holding ``merged`` back now (lowest and behind another), or None."""
    values = merged.values()
    holder = merged.holder
    return holder if values[holder] < max(values.values()) else None


class HoldBack:
    """Watches one activation's merge and logs the start and end of each hold-back.

    >>> from streams.eventtime.watermark import MergedWatermark
    >>> m = MergedWatermark(["tolls", "prices"])
    >>> watch = HoldBack("tolls/b1", after=5.0)
    >>> _ = m.update("prices", 1.0), m.update("tolls", 9.0)
    >>> watch.observe(m, now=100.0), watch.observe(m, now=106.0)   # held since 100: reported
    (None, 'prices')
    >>> _ = m.update("prices", 9.0)
    >>> watch.observe(m, now=107.0), watch.reported                 # caught up: ended
    (None, None)
    """

    __slots__ = ("name", "after", "_candidate", "_since", "reported")

    def __init__(self, name: str, after: float = REPORT_AFTER) -> None:
        self.name = name
        self.after = after
        self._candidate: Hashable | None = None
        self._since = 0.0
        self.reported: Hashable | None = None  # the input whose hold-back was logged

    def observe(self, merged: MergedWatermark, now: float) -> Hashable | None:
        """Look at the merge at processing time ``now``; the input just reported, if any."""
        holder = holding_back(merged)
        if holder != self._candidate:
            self._candidate, self._since = holder, now
        if self.reported is not None and holder != self.reported:
            log.info(
                "%s: input %r no longer holds the merged watermark back (now %s)",
                self.name,
                self.reported,
                merged.value,
            )
            self.reported = None
        if holder is not None and self.reported is None and now - self._since >= self.after:
            self.reported = holder
            values = merged.values()
            log.warning(
                "%s: input %r holds the merged watermark back at %s for %.0f s (inputs: %s)",
                self.name,
                holder,
                values[holder],
                now - self._since,
                ", ".join(f"{k}={v}" for k, v in values.items()),
            )
            return holder
        return None
