"""Where an activation's finalized output goes: the consumer's own hooks and the handoff sink. Each
unit (a window, the events of one step, a watermark) is tried, retried with back-off through
failures and outages, and dead-lettered with its reason when it cannot get through, so nothing
is lost in silence.

Calling an event-time consumer's own hooks, ``on_window``, ``on_events`` and
``on_watermark``, one unit of work at a time: a window, the events of one step, a
watermark. A call that raises is made again with the delivery back-off
(``delivery_retry_backoff``, doubling) within ``max_event_delivery_time``, each attempt cut
short if it would run past that (a hook that awaits forever); the first failure is logged at
warning with its traceback, the retries quietly. If no attempt succeeds the unit alone is
given up and the activation goes on with the next:

- a window is dead-lettered as the window, reason ``window_failed`` (the events counted
into it are not: they were taken, and the window says what they made);
- the events of a failed ``on_events`` are dead-lettered ``delivery_failed``, one each;
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

The dead letters the agents write: a record that does not decode, and the events of a
delivery that never succeeded (with the traceback, so the failure stays findable): reason
``activation_failed`` when the consumer's constructor raised, else ``delivery_failed``.

>>> failure_detail("sub-1", ValueError("boom"))
'sub-1: ValueError: boom'

Delivering a batch again after its consumer raised (Orleans retries a failed delivery with
back-off until ``MaxEventDeliveryTime``); what one that never succeeded leaves behind is in
:mod:`agents.output`.

A consumer's error is often passing (a database restarting, a lock held a moment too long):
a retry a little later delivers the batch, with nothing dead-lettered and nothing reordered
(the consumer's cursor waits meanwhile; the other consumers do not). A bug fails every retry,
and the batch is dead-lettered once ``max_event_delivery_time`` is spent.

Handing one activation's finalized output to its handoff sink, with nothing lost in silence.

An append that fails (a full disk, a locked store, a broker away) is retried with back-off
until it gets through; the activation waits meanwhile, so its checkpoint stays where it was
(``EventTimeObserver`` holds it until the emit completes), and the outage is logged once
when it begins and once when it ends, however many activations share the sink. What the
sink refuses (:class:`~streams.core.errors.HandoffRefusedError`: a value its declared columns
cannot hold, which no retry can fix) is dead-lettered as ``handoff_failed``, with the
window's key, bounds and value (or the event itself), and the rest is handed off.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import anyio

from spark_sink.protocols import HandoffSink  # the one interface of a handoff sink, owned by the log's side
from streams.core.batch import BatchContainer, Event, EventBatch, QueueMessage
from streams.core.deadletters import LETTER_PREFIX, DeadLetter, DeadLetterStore, event_position
from streams.core.errors import ActivationError, DecodeError, DeliveryTimeoutError, HandoffRefusedError, user_error
from streams.core.ids import SequenceToken
from streams.core.retry import Backoff, OutageLog, RetryStopped, retry
from streams.core.state import Timer
from streams.eventtime.release import Position
from streams.eventtime.results import EventOutcome, WindowResult
from streams.eventtime.timetext import instant_text


def failure_reason(error: BaseException) -> str:
    """``activation_failed`` for a constructor's error, else ``delivery_failed``."""
    return "activation_failed" if isinstance(error, ActivationError) else "delivery_failed"


def failure_detail(subscription_id: str, error: BaseException) -> str:
    """A failed delivery's dead-letter detail: the subscription, then the error with its
    traceback, as Python prints it (just the error when it was never raised, a timeout)."""
    return f"{subscription_id}: " + "".join(traceback.format_exception(user_error(error))).rstrip()


def failed_letters(
    subscription_id: str,
    stream: str,
    queue: int | None,
    events: Sequence[Event],
    error: BaseException,
    given: BatchContainer | None = None,
) -> list[DeadLetter]:
    """One letter per event of a batch no delivery attempt took (:func:`failure_reason`).
    Its event time is the one the producer gave (``given``: the container the events came
    in; None: none given), never the arrival time an event without one is delivered with: a letter
    says what is known of the event, and ``dlq list`` shows ``-`` for what is not."""
    detail = failure_detail(subscription_id, error)
    reason = failure_reason(error)
    letters = []
    for e in events:
        sequence_number, event_index = event_position(e)  # the same on every read
        letters.append(
            DeadLetter(
                reason,
                stream=stream,
                queue=queue,
                sequence_number=sequence_number,
                event_index=event_index,
                value=e.value,
                event_time=None if given is None else given.given_time(e),
                detail=detail,
            )
        )
    return letters


def undecodable_letter(message: QueueMessage, error: BaseException, stream: str | None = None) -> DeadLetter:
    """The raw record whose batch (or, with ``stream``, whose values) does not decode, or
    that is too large to (``too_large``: its first bytes only)."""
    offset = error.offset if isinstance(error, DecodeError) else None
    reason = error.reason if isinstance(error, DecodeError) else "undecodable"
    return DeadLetter(
        reason,
        stream=stream,
        queue=message.queue.number,
        # a foreign record's offset (the same on every read), else the message's position
        sequence_number=message.sequence_number if offset is None else offset,
        payload=message.payload[:LETTER_PREFIX] if reason == "too_large" else message.payload,
        detail=str(error),
    )


log = logging.getLogger("headrace.agent")


async def redeliver(
    on_next: Callable[[EventBatch], Awaitable[object]],
    batch: EventBatch,
    error: Exception,
    deadline: float,
    backoff: float,
    stopped: Callable[[], bool],
) -> Exception | None:
    """Call ``on_next(batch)`` again after ``backoff`` seconds, doubling the wait after each
    failure, while the next attempt would start before ``deadline`` (``time.monotonic()``)
    and ``stopped()`` is false. Returns ``None`` once a call succeeds, else the last error.

    >>> calls = []
    >>> async def flaky(batch):
    ...     calls.append(batch)
    ...     if len(calls) < 3:
    ...         raise ValueError("not yet")
    >>> anyio.run(redeliver, flaky, [1], ValueError("first"), time.monotonic() + 5, 0.001,
    ...           lambda: False), len(calls)
    (None, 3)
    """
    return await call_again(lambda: on_next(batch), error, deadline, backoff, stopped)


async def call_again(
    call: Callable[[], Awaitable[object]],
    error: Exception,
    deadline: float,
    backoff: float,
    stopped: Callable[[], bool],
    same_failures: int | None = None,
) -> Exception | None:
    """:func:`redeliver` for any call of a consumer's hook (``call()`` failed with ``error``),
    through the one retry helper: pauses of exactly ``backoff``, doubling (the documented
    ``delivery_retry_backoff``), and no attempt that would start past ``deadline``.

    ``same_failures``: give up once that many attempts in a row (the first, ``error``,
    included) raised the same exception type with the same message, which a retry will
    not change (a bug, a bad value); I/O errors and timeouts are retried until ``deadline``.

    >>> calls = []
    >>> async def broken():
    ...     calls.append(1)
    ...     raise KeyError("price")
    >>> anyio.run(call_again, broken, KeyError("price"), time.monotonic() + 60, 0.001, lambda: False, 3), len(calls)
    (KeyError('price'), 2)
    """
    last_kind = _failure_kind(error)
    in_a_row = 1  # failures of last_kind in a row, the first call's included

    async def attempt() -> None:
        nonlocal last_kind, in_a_row
        try:
            await call()
        except Exception as exc:
            kind = _failure_kind(exc)
            in_a_row = in_a_row + 1 if kind is not None and kind == last_kind else 1
            last_kind = kind
            if same_failures is not None and kind is not None and in_a_row >= same_failures:
                raise _SameFailure(exc) from exc
            raise

    try:
        await retry(
            attempt,
            what="a consumer's call",
            after=error,
            is_transient=_worth_retrying,
            give_up_after=deadline - time.monotonic(),
            backoff=Backoff(backoff, math.inf, jitter=0.0),
            give_up=_LastError,
            stop=lambda attempt: stopped(),
            shorten_last_pause=False,
        )
        return None
    except DecodeError as exc:  # its values cannot be read: no retry makes them readable
        return exc
    except (_LastError, _SameFailure) as gave_up:
        return gave_up.last
    except RetryStopped as stopped_early:
        last = stopped_early.__cause__
        return last if isinstance(last, Exception) else error


def _worth_retrying(exc: BaseException) -> bool:
    return not isinstance(exc, (DecodeError, _SameFailure))


def _failure_kind(error: BaseException) -> tuple[type, str] | None:
    """What makes two failures the same one, or None for a failure that may well pass on
    its own: an I/O error (a connection, a file) or a timeout."""
    if isinstance(error, (OSError, TimeoutError, DeliveryTimeoutError)):
        return None
    return type(error), str(error)


class _SameFailure(Exception):
    """How an attempt that failed as the ones before it ends the retry at once."""

    def __init__(self, last: Exception) -> None:
        super().__init__(f"raised {last!r} again")
        self.last = last


class _LastError(Exception):
    """How a redelivery's retry that ran out of time hands back the consumer's last error."""

    def __init__(self, last: BaseException, waited: float) -> None:
        super().__init__(f"gave up after {waited:.1f} s")
        self.last = last if isinstance(last, Exception) else Exception(last)


log = logging.getLogger("headrace.agent")

WINDOW_FAILED = "window_failed"
TIMER_FAILED = "timer_failed"
_RAISED = ("invalid_value", "invalid_timestamp")  # refusals a user's callable may cause
_TRACEBACK = "Traceback (most recent call last)"


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

    __slots__ = ("_limits", "_stream", "_dead_letters", "running", "_refusing", "_untimed", "_on_error")

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
        self._refusing = False  # in a run of steps whose callables raised for some event
        self._untimed = False  # in a run of steps with events whose time could not be read

    @property
    def idle(self) -> bool:
        """No call running and no run of refused steps going on: nothing to remember."""
        return not self.running and not self._refusing and not self._untimed

    def refused(self, letters: list[DeadLetter]) -> None:
        """The event-time core refused these events of one step. Those whose
        ``timestamp_by``, ``group_by``, ``select`` or aggregate raised are the consumer's
        bug (their letters keep a traceback): the first of a run of such steps is logged at
        warning with its detail; the steps after it quietly, until one has none. A run of
        steps with events whose time could not be read (``invalid_timestamp`` with no
        traceback: a time field missing or not a time) is logged the same way, apart."""
        raised = [x for x in letters if x.reason in _RAISED and _TRACEBACK in x.detail]
        if raised and not self._refusing:
            log.warning(
                "%s: %s refused %d event(s) its callables could not handle (dead-lettered %s); the first: %s",
                self._stream,
                self._limits.consumer,
                len(raised),
                ", ".join(sorted({x.reason for x in raised})),
                raised[0].detail,
            )
        self._refusing = bool(raised)
        # Events whose time could not be read, with no user code raising: the data's, or a
        # name in timestamp_by that no event has. A typo letters every event, so the first
        # step of such a run is logged too (then quietly, as above), naming the problem.
        untimed = [x for x in letters if x.reason == "invalid_timestamp" and _TRACEBACK not in x.detail]
        if untimed and not self._untimed:
            log.warning(
                "%s: %s could not read the event time of %d event(s) (dead-lettered invalid_timestamp); the first: %s",
                self._stream,
                self._limits.consumer,
                len(untimed),
                untimed[0].detail,
            )
        self._untimed = bool(untimed)

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


log = logging.getLogger("headrace.handoff")
T = TypeVar("T")
HANDOFF_FAILED = "handoff_failed"


@dataclass(frozen=True, slots=True)
class HandoffTarget:
    """Where one activation's finalized output goes: the sink of handoff stream ``handoff``,
    written as ``source`` (the stream) and ``consumer`` (the type) to ``partition`` (the queue)."""

    sink: HandoffSink
    source: str
    consumer: str
    partition: int
    handoff: str  # the handoff stream's name (named in the outage log lines)


# One outage log per sink: every activation writing to it reports to the same one.
_outages: weakref.WeakKeyDictionary[HandoffSink, OutageLog] = weakref.WeakKeyDictionary()


def _outage_of(target: HandoffTarget) -> OutageLog:
    outage = _outages.get(target.sink)
    if outage is None:
        outage = _outages[target.sink] = OutageLog(f"handoff stream {target.handoff!r}", log)
    return outage


class HandoffWrites:
    """One activation's appends to its handoff target, retried and never lost.

    Example (``EventTimeObserver`` does this)::

        writes = HandoffWrites(HandoffTarget(sink, "tolls/p1", "Totals", 3, "totals"), dead_letters)
        await writes.windows(output.windows)  # returns once appended or dead-lettered
    """

    def __init__(self, target: HandoffTarget, dead_letters: DeadLetterStore, *, max_backoff: float = 5.0) -> None:
        self.target = target
        self._dead_letters = dead_letters
        self._outage = _outage_of(target)
        self._max_backoff = max_backoff
        # True while an append is being retried: the delivery watchdog does not count that
        # time against the consumer (cancelling it would dead-letter a batch whose windows a
        # replay counts again).
        self.retrying = False

    async def windows(self, windows: Sequence[WindowResult]) -> None:
        t = self.target
        await self._write(
            list(windows), lambda items: t.sink.write(t.source, t.consumer, t.partition, items), self._window_letter
        )

    async def events(self, released: Sequence[EventOutcome], below: Position | None, source: str | None = None) -> None:
        """Append released events as ``source`` (the target's stream unless given: an
        activation with several inputs writes each input stream's events as their own)."""
        t = self.target
        await self._write(
            list(released),
            lambda items: t.sink.write_events(source or t.source, t.consumer, t.partition, items, below),
            self._event_letter,
        )

    async def _write(
        self, items: list[T], append: Callable[[list[T]], Awaitable[int]], letter: Callable[[T, str], DeadLetter]
    ) -> None:
        try:
            await self._append_all(items, append, letter)
        finally:
            self.retrying = False

    async def _append_all(
        self, items: list[T], append: Callable[[list[T]], Awaitable[int]], letter: Callable[[T, str], DeadLetter]
    ) -> None:
        remaining = items

        async def attempt() -> None:
            # What the sink refuses for good is dead-lettered at once; only the rest is retried.
            nonlocal remaining
            while remaining:
                try:
                    await append(remaining)
                    remaining = []
                except HandoffRefusedError as refused:
                    await self._dead_letters.add([letter(item, why) for item, why in refused.refused])
                    gone = {id(item) for item, _ in refused.refused}
                    remaining = [item for item in remaining if id(item) not in gone]

        def failed(exc: BaseException, attempt: int) -> None:
            self.retrying = True
            if attempt == 1:
                log.debug("handoff append to %s failed", self.target.source, exc_info=exc)

        await retry(
            attempt,
            what=f"handoff append to {self.target.source}",
            outage=self._outage,
            backoff=Backoff(maximum=self._max_backoff),
            on_failure=failed,
        )

    def _window_letter(self, window: WindowResult, why: str) -> DeadLetter:
        t = self.target
        return DeadLetter(
            HANDOFF_FAILED,
            stream=t.source,
            queue=t.partition,
            value={"key": window.key, "start": window.start, "end": window.end, "value": window.value},
            event_time=window.start,
            detail=f"{t.consumer}: window [{window.start:g}, {window.end:g}) of key {window.key!r} not handed off: {why}",
        )

    def _event_letter(self, outcome: EventOutcome, why: str) -> DeadLetter:
        t = self.target
        token = getattr(outcome.record, "token", None)
        sequence_number, event_index = event_position(outcome.record)  # one letter per event, not per record
        return DeadLetter(
            HANDOFF_FAILED,
            stream=t.source,
            queue=t.partition,
            sequence_number=sequence_number,
            event_index=event_index,
            value=getattr(outcome.record, "value", outcome.record),
            event_time=outcome.timestamp,
            detail=f"{t.consumer}: event not handed off: {why}; token {token}",
        )
