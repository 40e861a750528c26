"""Steps 1-3 of the contract for one event: early arrival, late arrival, out of order.

The processor checks the tolerances inline (most events break none) and hands an event that
breaks one to :meth:`OrderingStep.judge`, which applies the policy's action: adjust its
timestamp, accept it as is, or drop it as a dead letter.

>>> from types import SimpleNamespace as Ev
>>> from streams.eventtime.metrics import Counters
>>> from streams.eventtime.refusals import Refusals
>>> from streams.eventtime.results import Output
>>> counters = Counters()
>>> refusals = Refusals(counters, early=float("inf"), late=5.0, delay=0.0, reducer_name="Count", own_time=True, trace=False)
>>> step = OrderingStep(Action.ADJUST, counters, refusals)
>>> step.judge(0, Ev(value=None, token=None), None, 1.0, 9.0, 6.0, Output())  # 8 s late, below W
(6.0, 'adjusted', <Reason.OUT_OF_ORDER: 'out_of_order'>)
>>> counters.late_arrival_adjusted, counters.out_of_order_adjusted, counters.adjusted
(1, 1, 1)
"""

from __future__ import annotations

from collections.abc import Hashable

from streams.eventtime.metrics import Counters
from streams.eventtime.policy import Action, EventLike, Reason
from streams.eventtime.refusals import Refusals
from streams.eventtime.results import ADJUSTED, DROPPED, KEPT, Output

Verdict = tuple[float, str, Reason | None]
"""An event's timestamp, status and the rule that acted (None: none did)."""


class OrderingStep:
    """The ordering policy's decision for an event that breaks a tolerance, and its counts."""

    __slots__ = ("early", "late", "adjust", "accept", "counters", "refusals")

    def __init__(self, action: Action, counters: Counters, refusals: Refusals) -> None:
        self.early, self.late = refusals.early, refusals.late
        self.adjust, self.accept = action is Action.ADJUST, action is Action.ACCEPT
        self.counters = counters
        self.refusals = refusals

    def judge(
        self,
        partition: Hashable,
        rec: EventLike,
        key: Hashable,
        et: float,
        arr: float,
        w: float,
        out: Output,
    ) -> Verdict | None:
        """Steps 1-3 for an event of time ``et`` arriving at ``arr`` under watermark ``w``;
        None when it was dropped (and recorded as a dead letter)."""
        counters = self.counters
        ts, status, reason = et, KEPT, None
        # 1. early arrival
        if et - arr > self.early:
            self.refusals.refuse(partition, rec, key, et, Reason.EARLY_ARRIVAL, DROPPED, arr, out)
            return None
        # 2. late arrival
        if arr - et > self.late:
            reason = Reason.LATE_ARRIVAL
            if self.adjust:
                ts = arr - self.late
                status = ADJUSTED
                counters.late_arrival_adjusted += 1
                counters.adjusted += 1
            elif self.accept:
                counters.late_arrival_accepted += 1
            else:
                self.refusals.refuse(partition, rec, key, et, reason, DROPPED, arr, out)
                return None
        # 3. out of order: below the watermark before this event
        if ts < w:
            reason = Reason.OUT_OF_ORDER
            if self.adjust:
                ts = w
                if status != ADJUSTED:  # not already counted as late
                    counters.adjusted += 1
                status = ADJUSTED
                counters.out_of_order_adjusted += 1
            elif self.accept:
                counters.out_of_order_accepted += 1
            else:
                self.refusals.refuse(partition, rec, key, et, reason, DROPPED, arr, out)
                return None
        return ts, status, reason

    def forget(self, et: float, arr: float, status: str, reason: Reason | None) -> None:
        """Undo what :meth:`judge` counted for an event that is dead-lettered after all
        (its aggregate raised): each event has one fate."""
        counters = self.counters
        if arr - et > self.late:  # step 2 counted it
            if self.accept:
                counters.late_arrival_accepted -= 1
            else:
                counters.late_arrival_adjusted -= 1
        if reason is Reason.OUT_OF_ORDER:  # step 3 counted it
            if self.accept:
                counters.out_of_order_accepted -= 1
            else:
                counters.out_of_order_adjusted -= 1
        if status == ADJUSTED:
            counters.adjusted -= 1
