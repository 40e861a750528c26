"""Calling an event-time consumer's own hooks, ``on_window``, ``on_events``,
``on_watermark`` and ``on_timer``, one unit of work at a time: a window, the events of one
step, a watermark, a timer. A call that raises is made again with the delivery back-off
(``delivery_retry_backoff``, doubling) within ``max_event_delivery_time``, each attempt cut
short if it would run past that (a hook that awaits forever); the first failure is logged at
warning with its traceback, the retries quietly. If no attempt succeeds the unit alone is
given up and the activation goes on with the next:

- a window is dead-lettered as the window, reason ``window_failed`` (the events counted
  into it are not: they were taken, and the window says what they made);
- the events of a failed ``on_events`` are dead-lettered ``delivery_failed``, one each;
- a timer's firing is dead-lettered ``timer_failed``;
- a watermark is skipped with a warning (it carries no event; the next one follows).

The consumer's ``on_error``, if it has one, is told of a window or events given up, after
their letters are kept.

A window's letter names it (:attr:`~streams.core.deadletters.DeadLetter.unit`: consumer
type, key and bounds), so a restart that rebuilds the window from the queue and fails it
again records nothing new. Its ``value`` is what ``headrace dlq replay`` needs to deliver
the window to the consumer type once more: ``consumer``, ``key``, ``start``, ``end``,
``value``, ``closed_at``, ``final``, ``revision``, and ``from``/``through``, the queue positions
``[sequence, index]`` a replay of the queue rebuilds it from (the activation's hold before
the step that closed it) and the last event taken when it closed.

>>> from streams.eventtime.results import WindowResult
>>> window_unit("Totals", WindowResult("a", 0.0, 10.0, 3, closed_at=12.0))
"Totals 'a' [0.0, 10.0)"
>>> window_text(WindowResult(None, 1_700_000_040.0, 1_700_000_100.0, 3, closed_at=1_700_000_112.0))
'None [2023-11-14T22:14:00Z, 2023-11-14T22:15:00Z)'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import anyio

from agents.failure_letters import failed_letters, failure_detail
from agents.redelivery import call_again
from streams.core.batch import Event
from streams.core.deadletters import DeadLetter, DeadLetterStore
from streams.core.errors import (
    DeliveryTimeoutError,
)
from streams.core.ids import SequenceToken
from streams.core.state import Timer
from streams.eventtime.results import EventOutcome, WindowResult
from streams.eventtime.timetext import instant_text

log = logging.getLogger("headrace.agent")

WINDOW_FAILED = "window_failed"
TIMER_FAILED = "timer_failed"
_RAISED = ("invalid_value", "invalid_timestamp")  # refusals a user's callable may cause
_TRACEBACK = "Traceback (most recent call last)"
_COUNTED = " (the next of this consumer type are counted, not logged: headrace status, headrace dlq)"


SAME_FAILURES = 3  # attempts raising the same exception before a hook's unit is given up


@dataclass(frozen=True, slots=True)
class HookLimits:
    """How long a consumer's hook may take, and how it is retried (the provider's
    ``max_event_delivery_time`` and ``delivery_retry_backoff``); ``consumer`` names its type
    as the registry does (a replay builds it by that name)."""

    consumer: str
    max_time: float = 60.0
    backoff: float = 1.0
    # A hook that raised the same exception (type and message) this many times in a row on
    # one unit is given up then, not retried for the whole max_time: the same error on the
    # same window is a bug or a bad value, and its stream waits while it is retried.
    same_failures: int | None = SAME_FAILURES
    # The kinds of refusal warned of for the type in this run, shared by the worker's queues:
    # each is logged once, the rest counted (metrics, status, dead letters), not logged.
    warned: set[str] = field(default_factory=set, compare=False)


def window_text(result: WindowResult) -> str:
    """A window in a log line: its key and bounds, as ISO-8601 times (a person reads them)."""
    return f"{result.key!r} [{instant_text(result.start)}, {instant_text(result.end)})"


def window_unit(consumer: str, result: WindowResult) -> str:
    """What makes a window's letter the same as another's (with its queue and reason).
    Stored with the letter, so its form stays as letters already written have it (the
    bounds as numbers), whatever log lines show. An update (``final=False``) is a unit of its
    own, by its revision: its letter and the final result's are two.

    >>> window_unit("Totals", WindowResult("a", 0.0, 10.0, 3, closed_at=8.0, final=False, revision=1))
    "Totals 'a' [0.0, 10.0) revision 1"
    """
    unit = f"{consumer} {result.key!r} [{result.start}, {result.end})"
    return unit if result.final else f"{unit} revision {result.revision}"


def _position(token: SequenceToken | None) -> list[int] | None:
    return None if token is None else [token.sequence_number, token.event_index]


class HookCalls:
    """One activation's calls of its own hooks, each unit within its limits (``running``
    while a call times itself: the delivery's watchdog leaves the batch alone meanwhile)."""

    __slots__ = ("_limits", "_stream", "_dead_letters", "running", "_on_error")

    def __init__(
        self,
        limits: HookLimits,
        stream: str,
        dead_letters: DeadLetterStore,
        on_error: Callable[[BaseException], Awaitable[object]] | None = None,
    ) -> None:
        self._limits = limits
        self._stream = stream
        self._dead_letters = dead_letters
        self._on_error = on_error  # the consumer's, told of each unit given up
        self.running = False

    @property
    def idle(self) -> bool:
        """No call running: nothing to remember."""
        return not self.running

    def refused(self, letters: list[DeadLetter]) -> None:
        """The event-time core refused these events of one step. Those whose
        ``timestamp_by``, ``group_by``, ``select`` or aggregate raised are the consumer's
        bug (their letters keep a traceback): the type's first such step of the worker's run
        is logged at warning with its detail, the others only counted. Steps with events
        whose time could not be read (``invalid_timestamp`` with no traceback: a time field
        missing or not a time) are logged the same way, apart."""
        raised = [x for x in letters if x.reason in _RAISED and _TRACEBACK in x.detail]
        if raised and self._first("raised"):
            log.warning(
                "%s: %s refused %d event(s) its callables could not handle (dead-lettered %s); the first: %s%s",
                self._stream,
                self._limits.consumer,
                len(raised),
                ", ".join(sorted({x.reason for x in raised})),
                raised[0].detail,
                _COUNTED,
            )
        # Events whose time could not be read, with no user code raising: the data's, or a
        # name in timestamp_by that no event has (a typo letters every event): the first
        # is logged too, naming the problem.
        untimed = [x for x in letters if x.reason == "invalid_timestamp" and _TRACEBACK not in x.detail]
        if untimed and self._first("untimed"):
            log.warning(
                "%s: %s could not read the event time of %d event(s) (dead-lettered invalid_timestamp); the first: %s%s",
                self._stream,
                self._limits.consumer,
                len(untimed),
                untimed[0].detail,
                _COUNTED,
            )

    def _first(self, kind: str) -> bool:
        """Whether this is the type's first refusal of ``kind`` in this run (then noted)."""
        warned = self._limits.warned
        if kind in warned:
            return False
        warned.add(kind)
        return True

    async def call(
        self,
        hook: str,
        unit: str,
        call: Callable[[], Awaitable[object]],
        begun: Exception | Awaitable[object] | None = None,
    ) -> Exception | None:
        """``call()`` (the hook ``hook`` on ``unit``, as log lines name them), retried and
        timed; None once an attempt succeeds, else the last error (already logged).
        ``begun``: the first attempt was made already (where the step ran), and raised this,
        or returned this awaitable, which is awaited as its end."""
        limits = self._limits
        deadline = time.monotonic() + limits.max_time

        async def attempt(first: Awaitable[object] | None = None) -> None:
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as scope:
                await (call() if first is None else first)
            if scope.cancelled_caught:
                raise DeliveryTimeoutError(
                    f"{hook} of {limits.consumer} on {self._stream} took longer than "
                    f"max_event_delivery_time ({limits.max_time}s)"
                )

        running, self.running = self.running, True
        try:
            try:
                if isinstance(begun, Exception):
                    raise begun
                await attempt(begun)
                return None
            except Exception as exc:
                error = exc
            same = "" if limits.same_failures is None else f" ({limits.same_failures} attempts if it raises the same)"
            log.warning(
                "%s: %s of %s raised %r for %s; retrying with back-off for up to %ss%s",
                self._stream,
                hook,
                limits.consumer,
                error,
                unit,
                limits.max_time,
                same,
                # the user's traceback; a timeout is the runtime's, not theirs
                exc_info=None if isinstance(error, DeliveryTimeoutError) else error,
            )
            last = await call_again(attempt, error, deadline, limits.backoff, lambda: False, limits.same_failures)
            if last is None:
                log.info("%s: %s of %s took %s on a retry", self._stream, hook, limits.consumer, unit)
            return last
        finally:
            self.running = running

    async def window(
        self,
        on_window: Callable[[WindowResult], Awaitable[object]],
        result: WindowResult,
        held_from: SequenceToken | None,
        through: SequenceToken | None,
        begun: Exception | Awaitable[object] | None = None,
    ) -> None:
        """Call ``on_window(result)``; dead-letter the window if no attempt takes it
        (``begun``: as :meth:`call` says)."""
        await self._unit(
            "on_window",
            f"the window {window_text(result)}",
            lambda: on_window(result),
            WINDOW_FAILED,
            lambda error: [self._window_letter(result, held_from, through, error)],
            begun,
        )

    async def events(
        self, on_events: Callable[[list[EventOutcome]], Awaitable[object]], outcomes: list[EventOutcome]
    ) -> None:
        """Call ``on_events(outcomes)``; dead-letter its events if no attempt takes them."""

        def letters(error: Exception) -> list[DeadLetter]:
            events = [o.record for o in outcomes if isinstance(o.record, Event)]
            failed = failed_letters(f"on_events of {self._limits.consumer}", self._stream, None, events, error)
            # each with its event time as the consumer's policy read it (timestamp_by's)
            return [replace(x, event_time=o.event_time) for x, o in zip(failed, outcomes, strict=True)]

        await self._unit(
            "on_events", f"{len(outcomes)} event(s)", lambda: on_events(outcomes), "delivery_failed", letters
        )

    async def watermark(self, on_watermark: Callable[[float], Awaitable[object]], watermark: float) -> None:
        """Call ``on_watermark(watermark)``; skip it (with a warning) if no attempt takes it."""
        error = await self.call(
            "on_watermark", f"the watermark {instant_text(watermark)}", lambda: on_watermark(watermark)
        )
        if error is not None:
            log.warning(
                "%s: on_watermark of %s failed for the watermark %s; skipped (it carries no event)",
                self._stream,
                self._limits.consumer,
                instant_text(watermark),
            )

    async def timer(self, on_timer: Callable[[Timer], Awaitable[object]], timer: Timer) -> None:
        """Call ``on_timer(timer)``; dead-letter the firing (``timer_failed``) if no attempt
        takes it: the timer is gone either way, as a window given up is."""
        consumer = self._limits.consumer
        unit = f"the {timer.kind}-time timer {timer.name!r} at {instant_text(timer.time)}"

        def letters(error: Exception) -> list[DeadLetter]:
            value = {"consumer": consumer, "name": timer.name, "time": timer.time, "kind": timer.kind}
            detail = failure_detail(f"on_timer of {consumer}", error)
            return [
                DeadLetter(TIMER_FAILED, stream=self._stream, value=value, detail=detail, unit=f"{consumer} {unit}")
            ]

        await self._unit("on_timer", unit, lambda: on_timer(timer), TIMER_FAILED, letters)

    async def _unit(
        self,
        hook: str,
        unit: str,
        call: Callable[[], Awaitable[object]],
        reason: str,
        letters: Callable[[Exception], list[DeadLetter]],
        begun: Exception | Awaitable[object] | None = None,
    ) -> None:
        """One unit of work for ``hook`` (:meth:`call`'s retries and limits): if no attempt
        takes it, its ``letters`` are kept, then the consumer's ``on_error`` is told. Running
        until the letters are written too."""
        running, self.running = self.running, True
        try:
            error = await self.call(hook, unit, call, begun)
            if error is None:
                return
            log.warning(
                "%s: %s of %s failed for %s; dead-lettered (%s)",
                self._stream,
                hook,
                self._limits.consumer,
                unit,
                reason,
            )
            await self._dead_letters.add(letters(error))
            await self._tell(error)
        finally:
            self.running = running

    async def _tell(self, error: Exception) -> None:
        """Tell the consumer's ``on_error`` of a unit given up (its letter is kept already),
        within a limit of its own; what it raises is logged."""
        if self._on_error is None:
            return
        limit = self._limits.max_time
        try:
            with anyio.move_on_after(limit) as scope:
                await self._on_error(error)
            if scope.cancelled_caught:
                log.warning(
                    "%s: on_error of %s took longer than %ss; abandoned", self._stream, self._limits.consumer, limit
                )
        except Exception:
            log.exception("%s: on_error of %s raised", self._stream, self._limits.consumer)

    def _window_letter(
        self, result: WindowResult, held_from: SequenceToken | None, through: SequenceToken | None, error: Exception
    ) -> DeadLetter:
        consumer = self._limits.consumer
        return DeadLetter(
            WINDOW_FAILED,
            stream=self._stream,
            sequence_number=None if held_from is None else held_from.sequence_number,
            value={
                "consumer": consumer,
                "key": result.key,
                "start": result.start,
                "end": result.end,
                "value": result.value,
                "closed_at": result.closed_at,
                "final": result.final,
                "revision": result.revision,
                "from": _position(held_from),
                "through": _position(through),
            },
            detail=failure_detail(f"on_window of {consumer}", error),
            unit=window_unit(consumer, result),
        )
