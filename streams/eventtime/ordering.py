"""Steps 1-3 of the contract for one event: early arrival, late arrival, out of order.

The processor checks the tolerances inline (most events break none) and hands an event that
breaks one to :meth:`OrderingStep.judge`, which applies the policy's action: adjust its
timestamp, accept it as is, or drop it as a dead letter.

>>> from types import SimpleNamespace as Ev
>>> from streams.eventtime.results import Counters
>>> from streams.eventtime.ordering import Refusals
>>> from streams.eventtime.results import Output
>>> counters = Counters()
>>> S = 1_000_000  # times here are integer microseconds (streams.core.micros)
>>> refusals = Refusals(early=float("inf"), late=5 * S, delay=0, reducer_name="Count", own_time=True, trace=False)
>>> step = OrderingStep(Action.ADJUST, refusals)
>>> step.judge(counters, 0, Ev(value=None, token=None), None, 1 * S, 9 * S, 6 * S, Output())  # 8 s late, below W
(6000000, 'adjusted', <Reason.OUT_OF_ORDER: 'out_of_order'>)
>>> counters.late_arrival_adjusted, counters.out_of_order_adjusted, counters.adjusted
(1, 1, 1)

Dead letters for the events the core does not keep: each with its reason, counted once.

Every event has one fate: kept, adjusted, dropped or dead-lettered. A dropped or refused
event becomes a :class:`~streams.core.deadletters.DeadLetter` naming the rule that acted, its
stream and queue position, so it is never silently lost and can be found again.

>>> from types import SimpleNamespace as Ev
>>> from streams.eventtime.results import Counters
>>> from streams.eventtime.results import DROPPED, Output
>>> r = Refusals(early=float("inf"), late=5 * S, delay=S, reducer_name="Count", own_time=True, trace=False)
>>> out, counters = Output(), Counters()
>>> r.refuse(counters, 0, Ev(value=1, token=None), None, 1 * S, Reason.LATE_ARRIVAL, DROPPED, 9_250_000, out)
>>> letter = out.dead_letters[0]
>>> letter.reason, letter.detail, letter.event_time, counters.late_arrival_dropped
('late_arrival', '8.25 s behind its arrival (late_arrival 5 s)', 1.0, 1)
"""

from __future__ import annotations

import traceback
from collections.abc import Hashable

from streams.core.deadletters import DeadLetter, event_position
from streams.core.micros import optional_seconds, to_seconds
from streams.eventtime.policy import Action, EventLike, Reason, time_problem
from streams.eventtime.results import ADJUSTED, DEAD_LETTER, DROPPED, KEPT, Counters, EventOutcome, Output


class Refusals:
    """Records the events a processor drops or refuses (steps 1-4 of the contract), in the
    processor's ``counters`` each call is given: one per declaration, shared by its processors
    (a stream's activation holds none of its own).

    ``early``, ``late`` and ``delay`` are the policy's tolerances (``inf`` when off), named
    in each letter's detail; ``own_time``: event times are the events' own ``event_time``
    (no ``timestamp_by``).
    """

    __slots__ = ("early", "late", "delay", "reducer_name", "own_time", "trace")

    def __init__(
        self,
        *,
        early: float,
        late: float,
        delay: float,
        reducer_name: str,
        own_time: bool,
        trace: bool,
    ) -> None:
        self.early, self.late, self.delay = early, late, delay
        self.reducer_name = reducer_name
        self.own_time = own_time
        self.trace = trace

    def refuse(
        self,
        counters: Counters,
        partition: Hashable,
        rec: EventLike,
        key: Hashable,
        event_time: float | None,
        reason: Reason,
        status: str,
        arrival: float,
        out: Output,
        detail: str = "",
        ts: float | None = None,
    ) -> None:
        """Record a dropped or refused event as a dead letter (never silently lost). Times
        are given in microseconds; the letter holds them in seconds."""
        if reason is Reason.EARLY_ARRIVAL:
            assert event_time is not None
            counters.early_arrival += 1
            detail = f"{to_seconds(event_time - arrival):g} s ahead of its arrival (early_arrival {to_seconds(self.early):g} s)"
        elif reason is Reason.LATE_ARRIVAL:
            assert event_time is not None
            counters.late_arrival_dropped += 1
            detail = (
                f"{to_seconds(arrival - event_time):g} s behind its arrival (late_arrival {to_seconds(self.late):g} s)"
            )
        elif reason is Reason.OUT_OF_ORDER:
            counters.out_of_order_dropped += 1
            detail = f"event time below the watermark (out_of_order {to_seconds(self.delay):g} s)"
        elif reason is Reason.WINDOW_CLOSED:
            assert ts is not None
            counters.window_closed += 1
            detail = detail or f"every window containing timestamp {to_seconds(ts):g} has closed"
        elif reason is Reason.INVALID_VALUE:
            counters.invalid_value += 1
        elif reason is Reason.DUPLICATE:
            counters.duplicate += 1
        else:
            counters.invalid_timestamp += 1
        token = getattr(rec, "token", None)
        stream = getattr(rec, "stream_id", None)
        queue = partition if isinstance(partition, int) else getattr(partition, "number", None)
        sequence_number, event_index = event_position(rec)  # the same on every read
        letter = DeadLetter(
            reason=reason.value,
            stream=None if stream is None else str(stream),
            queue=queue,
            sequence_number=sequence_number,
            event_index=event_index,
            value=getattr(rec, "value", rec),
            event_time=optional_seconds(event_time),
            detail=f"{detail}; {_where(rec, token)}" if token is not None else detail,
            recorded_at=to_seconds(arrival),
        )
        out.dead_letters.append(letter)
        if self.trace:
            outcome = EventOutcome(
                rec, partition, key, optional_seconds(event_time), optional_seconds(ts), status, reason.value
            )
            out.trace.append(outcome)

    def invalid(
        self,
        counters: Counters,
        partition: Hashable,
        rec: EventLike,
        key: Hashable,
        event_time: float | None,
        arrival: float,
        exc: Exception,
        out: Output,
        what: str = "",
    ) -> None:
        """Dead-letter an event whose time or key (``event_time`` None) or aggregate raised
        (or ``what`` did: the dedup key); the caller has undone what the ordering policy
        counted for it."""
        if not what and event_time is None:
            own = getattr(rec, "event_time", None)
            if self.own_time and not isinstance(own, (int, float)):  # not comparable
                self.refuse(
                    counters,
                    partition,
                    rec,
                    None,
                    None,
                    Reason.INVALID_TIMESTAMP,
                    DEAD_LETTER,
                    arrival,
                    out,
                    time_problem(own),
                )
                return
            what = "its key (over or group_by)"
        elif not what:
            what = f"the aggregate {self.reducer_name}"
        trace = "".join(traceback.format_exception(exc)).rstrip()
        detail = f"{what} raised {type(exc).__name__}: {exc}\n{trace}"
        self.refuse(counters, partition, rec, key, event_time, Reason.INVALID_VALUE, DEAD_LETTER, arrival, out, detail)


def _where(rec: object, token: object) -> str:
    """How a letter's detail names its event: a foreign record's offset (see
    :func:`~streams.core.deadletters.event_position`), else its token."""
    offset = getattr(rec, "offset", None)
    return f"token {token}" if offset is None else f"record offset {offset}"


Verdict = tuple[float, str, Reason | None]
"""An event's timestamp, status and the rule that acted (None: none did)."""


class OrderingStep:
    """The ordering policy's decision for an event that breaks a tolerance, counted in the
    ``counters`` it is given (shared by a declaration's processors, as :class:`Refusals`)."""

    __slots__ = ("early", "late", "adjust", "accept", "refusals")

    def __init__(self, action: Action, refusals: Refusals) -> None:
        self.early, self.late = refusals.early, refusals.late
        self.adjust, self.accept = action is Action.ADJUST, action is Action.ACCEPT
        self.refusals = refusals

    def judge(
        self,
        counters: Counters,
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
        ts, status, reason = et, KEPT, None
        # 1. early arrival
        if et - arr > self.early:
            self.refusals.refuse(counters, partition, rec, key, et, Reason.EARLY_ARRIVAL, DROPPED, arr, out)
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
                self.refusals.refuse(counters, partition, rec, key, et, reason, DROPPED, arr, out)
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
                self.refusals.refuse(counters, partition, rec, key, et, reason, DROPPED, arr, out)
                return None
        return ts, status, reason

    def forget(self, counters: Counters, et: float, arr: float, status: str, reason: Reason | None) -> None:
        """Undo what :meth:`judge` counted for an event that is dead-lettered after all
        (its aggregate raised): each event has one fate."""
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
