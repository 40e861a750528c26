"""Delivering a batch again after its consumer raised (Orleans retries a failed delivery with
back-off until ``MaxEventDeliveryTime``); what one that never succeeded leaves behind is in
:mod:`agents.letters`.

A consumer's error is often passing (a database restarting, a lock held a moment too long):
a retry a little later delivers the batch, with nothing dead-lettered and nothing reordered
(the consumer's cursor waits meanwhile; the other consumers do not). A bug fails every retry,
and the batch is dead-lettered once ``max_event_delivery_time`` is spent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from streams.core.batch import EventBatch
from streams.core.errors import DecodeError

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
) -> Exception | None:
    """:func:`redeliver` for any call of a consumer's hook (``call()`` failed with ``error``)."""
    delay = backoff
    while not stopped() and time.monotonic() + delay < deadline:
        await anyio.sleep(delay)
        try:
            await call()
            return None
        except DecodeError as exc:  # its values cannot be read: no retry makes them readable
            return exc
        except Exception as exc:
            error = exc
        delay *= 2
    return error
