"""Delivering a batch again after its consumer raised (Orleans retries a failed delivery with
back-off until ``MaxEventDeliveryTime``); what one that never succeeded leaves behind is in
:mod:`agents.failure_letters`.

A consumer's error is often passing (a database restarting, a lock held a moment too long):
a retry a little later delivers the batch, with nothing dead-lettered and nothing reordered
(the consumer's cursor waits meanwhile; the other consumers do not). A bug fails every retry,
and the batch is dead-lettered once ``max_event_delivery_time`` is spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

from streams.core.batch import EventBatch
from streams.core.errors import (
    DecodeError,
    DeliveryTimeoutError,
    HeadraceError,
)
from streams.core.retry import Backoff, RetryStopped, retry


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

    >>> import anyio
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

    >>> import anyio
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


class _SameFailure(HeadraceError):
    """How an attempt that failed as the ones before it ends the retry at once."""

    def __init__(self, last: Exception) -> None:
        super().__init__(f"raised {last!r} again")
        self.last = last


class _LastError(HeadraceError):
    """How a redelivery's retry that ran out of time hands back the consumer's last error."""

    def __init__(self, last: BaseException, waited: float) -> None:
        super().__init__(f"gave up after {waited:.1f} s")
        self.last = last if isinstance(last, Exception) else Exception(last)
