"""Calling a consumer's ``on_window``: each closed window is one unit of work. A window
whose ``on_window`` raises is called again with the delivery back-off
(``delivery_retry_backoff``, doubling) within ``max_event_delivery_time``, each attempt cut
short if it would run past that (an ``on_window`` that awaits forever); if no attempt takes
it, the window itself is dead-lettered, reason ``window_failed``, and the activation goes on
with the next. The events counted into it are not dead-lettered: they were taken, and the
window says what they made.

A letter of a window names it (:attr:`~streams.core.deadletters.DeadLetter.unit`: consumer
type, key and bounds), so a restart that rebuilds the window from the queue and fails it
again records nothing new. Its ``value`` is what ``headrace dlq replay`` needs to deliver
the window to the consumer type once more: ``consumer``, ``key``, ``start``, ``end``,
``value``, ``closed_at``, ``final``, and ``from``/``through``, the queue positions
``[sequence, index]`` a replay of the queue rebuilds it from (the activation's hold before
the step that closed it) and the last event taken when it closed.

>>> from streams.eventtime.results import WindowResult
>>> window_unit("Totals", WindowResult("a", 0.0, 10.0, 3, closed_at=12.0))
"Totals 'a' [0.0, 10.0)"
>>> window_text(WindowResult(None, 0.0, 10.0, 3, closed_at=12.0))
'None [0.0, 10.0)'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from streams.core.deadletters import DeadLetter, DeadLetterStore
from streams.core.errors import DeliveryTimeoutError
from streams.core.tokens import SequenceToken
from streams.eventtime.results import WindowResult

from .letters import failure_detail
from .redelivery import call_again

log = logging.getLogger("headrace.agent")

WINDOW_FAILED = "window_failed"


@dataclass(frozen=True, slots=True)
class HookLimits:
    """How long a consumer's hook may take, and how it is retried (the provider's
    ``max_event_delivery_time`` and ``delivery_retry_backoff``); ``consumer`` names its type
    as the registry does (a replay builds it by that name)."""

    consumer: str
    max_time: float = 60.0
    backoff: float = 1.0


def window_text(result: WindowResult) -> str:
    """A window in a log line: its key and bounds."""
    return f"{result.key!r} [{result.start}, {result.end})"


def window_unit(consumer: str, result: WindowResult) -> str:
    """What makes a window's letter the same as another's (with its queue and reason)."""
    return f"{consumer} {window_text(result)}"


def _position(token: SequenceToken | None) -> list[int] | None:
    return None if token is None else [token.sequence_number, token.event_index]


class WindowHook:
    """An activation's ``on_window``, called one window at a time within its limits."""

    __slots__ = ("_call", "_limits", "_stream", "_dead_letters", "running")

    def __init__(
        self,
        call: Callable[[WindowResult], Awaitable[object]],
        limits: HookLimits,
        stream: str,
        dead_letters: DeadLetterStore,
    ) -> None:
        self._call = call
        self._limits = limits
        self._stream = stream
        self._dead_letters = dead_letters
        # In a call it times itself: the delivery's watchdog leaves it alone meanwhile.
        self.running = False

    async def __call__(
        self, result: WindowResult, held_from: SequenceToken | None, through: SequenceToken | None
    ) -> None:
        limits = self._limits
        deadline = time.monotonic() + limits.max_time

        async def attempt() -> None:
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as scope:
                await self._call(result)
            if scope.cancelled_caught:
                raise DeliveryTimeoutError(
                    f"on_window of {limits.consumer} on {self._stream} took longer than "
                    f"max_event_delivery_time ({limits.max_time}s)"
                )

        self.running = True  # until its letter is written too: the window's time, not the batch's
        try:
            try:
                await attempt()
                return
            except Exception as exc:
                error = exc
            log.warning(
                "%s: on_window of %s raised %r for the window %s; retrying with back-off for up to %ss, "
                "then dead-lettering it",
                self._stream,
                limits.consumer,
                error,
                window_text(result),
                limits.max_time,
                # the user's traceback; a timeout is the runtime's, not theirs
                exc_info=None if isinstance(error, DeliveryTimeoutError) else error,
            )
            last = await call_again(attempt, error, deadline, limits.backoff, lambda: False)
            if last is None:
                log.info("%s: on_window of %s took the window on a retry", self._stream, limits.consumer)
                return
            log.warning(
                "%s: on_window of %s failed for the window %s; dead-lettered (window_failed)",
                self._stream,
                limits.consumer,
                window_text(result),
            )
            await self._dead_letters.add([self._letter(result, held_from, through, last)])
        finally:
            self.running = False

    def _letter(
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
                "from": _position(held_from),
                "through": _position(through),
            },
            detail=failure_detail(f"on_window of {consumer}", error),
            unit=window_unit(consumer, result),
        )
