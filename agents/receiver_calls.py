"""A pulling agent's calls to its queue receiver, retried while the queue fails: through the
one retry helper (:func:`streams.core.retry.retry`), with back-off up to ``max_read_backoff``
and one log line at each end of an outage, until the agent stops.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from streams.core.errors import QueueFailedError
from streams.core.ids import QueueId
from streams.core.outage import OutageLog
from streams.core.retry import Backoff, RetryStopped, retry

log = logging.getLogger("headrace.agent")

P = ParamSpec("P")
T = TypeVar("T")


class ReceiverCalls:
    """Calls to the receiver of ``queue``: each is retried until it answers, or until
    ``stopping()`` once a retry failed too (what was not acknowledged then is read again by the
    queue's next owner), and then gives ``None``. ``failures`` counts the failed calls. A
    :class:`QueueFailedError` (retrying cannot fix it) is raised at once, not retried.

    >>> import anyio
    >>> calls = ReceiverCalls(QueueId(0), max_backoff=0.001, stopping=lambda: False)
    >>> answers = [ConnectionRefusedError("refused"), ["a record"]]
    >>> async def read(n):
    ...     answer = answers.pop(0)
    ...     if isinstance(answer, Exception):
    ...         raise answer
    ...     return answer[:n]
    >>> anyio.run(calls, read, 10), calls.failures
    (['a record'], 1)
    """

    def __init__(self, queue: QueueId, *, max_backoff: float, stopping: Callable[[], bool]) -> None:
        self.failures = 0
        self._what = f"calling the receiver of {queue}"
        self._outage = OutageLog(str(queue), log)
        self._max_backoff = max_backoff
        self._stopping = stopping

    async def __call__(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T | None:
        try:
            return await retry(
                functools.partial(fn, *args, **kwargs),
                what=self._what,
                outage=self._outage,
                backoff=Backoff(min(0.05, self._max_backoff), self._max_backoff),
                is_transient=lambda exc: not isinstance(exc, QueueFailedError),
                on_failure=self._failed,
                stop=lambda attempt: attempt > 1 and self._stopping(),
            )
        except RetryStopped:
            return None

    def _failed(self, exc: BaseException, attempt: int) -> None:
        self.failures += 1
