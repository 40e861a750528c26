"""Calling a consumer's ``on_next`` where the data arrives, without a task switch per batch.

When ``on_next`` cannot suspend (a plain function, or a coroutine function with no
``await``), the agent calls it as soon as the data is cached (``agents.delivery``). These
helpers tell such an ``on_next`` apart and make the call: it runs to completion where it is
made and returns what is still to be awaited (an awaitable a plain function returned).
"""

from __future__ import annotations

import dis
import functools
import inspect
from collections.abc import Awaitable, Callable
from types import CodeType
from typing import Any

from agents.activation import Activation
from streams.core.batch import EventBatch
from streams.core.observer import is_coroutine_function


def inline_on_next(observer: Activation) -> Callable[[EventBatch], Awaitable[object] | None] | None:
    """``on_next`` as a call that runs to completion where it is made, returning what is
    still to be awaited (an awaitable a plain function returned), or ``None`` if ``on_next``
    may suspend (then only the consumer's task calls it). An activation that runs what it
    can of a delivery where it is made says so with a ``take_now(batch)`` of its own, which
    returns what is left for the task to await, if anything (:func:`steps_inline`).

    >>> from streams.core.observer import as_observer
    >>> seen = []
    >>> call = inline_on_next(as_observer(seen.extend))
    >>> call([1, 2]), seen
    (None, [1, 2])
    """
    take_now = getattr(observer, "take_now", None)  # an event-time activation's own (agents.timed)
    if take_now is not None:
        return take_now  # type: ignore[no-any-return]
    fn = observer.user_on_next  # the function as_observer adapted
    if fn is None:
        return None
    if is_coroutine_function(fn):
        return _completing(fn) if never_suspends(fn) else None
    return _calling(fn)


def steps_inline(observer: Activation) -> bool:
    """Whether the call :func:`inline_on_next` gives is the activation's own ``take_now``,
    which may return an awaitable for one delivery and finish the next where it is made
    (a plain function that returns an awaitable once is awaited by a task from then on).

    >>> from streams.core.observer import as_observer
    >>> steps_inline(as_observer(print))
    False
    """
    return getattr(observer, "take_now", None) is not None


def never_suspends(fn: Callable[..., Any]) -> bool:
    """A coroutine function whose body has no ``await`` (nor ``async for``/``async with``,
    which await too) runs to its end on the first step of its coroutine: every suspension
    point compiles to a YIELD_VALUE. Only the code that will run is read (a bound method's
    function, not what a decorator wraps); anything else counts as suspending.

    >>> async def counts(batch): pass
    >>> async def waits(batch): await counts(batch)
    >>> never_suspends(counts), never_suspends(waits)
    (True, False)
    """
    return _code_never_suspends(getattr(getattr(fn, "__func__", fn), "__code__", None))


@functools.lru_cache(maxsize=4096)  # per code object: once per consumer type, not per stream
def _code_never_suspends(code: CodeType | None) -> bool:
    return (
        code is not None
        and bool(code.co_flags & inspect.CO_COROUTINE)
        and _YIELD_VALUE not in code.co_code[::2]  # the opcodes, not their arguments
    )


_YIELD_VALUE = dis.opmap["YIELD_VALUE"]


def _calling(fn: Callable[..., Any]) -> Callable[[EventBatch], Awaitable[object] | None]:
    """A plain callable, called as ``streams.core.observer.lift`` calls it: an awaitable it
    returns has not started, so the task may await it."""

    def call(batch: EventBatch) -> Awaitable[object] | None:
        result = fn(batch)
        return result if result is not None and inspect.isawaitable(result) else None

    return call


def _completing(fn: Callable[..., Any]) -> Callable[[EventBatch], None]:
    def call(batch: EventBatch) -> None:
        # Iterating the coroutine runs its body to the end; it yields nothing, having no
        # suspension point. (Cheaper than send(None), which ends by raising StopIteration.)
        for _ in fn(batch).__await__():
            raise RuntimeError(f"{fn!r} suspended although it has no await")

    return call
