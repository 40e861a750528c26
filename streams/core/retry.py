"""Retrying what failed because a server is away: one helper for every client in headrace, and the
outage log that says so once when it starts and once when it ends.

Retrying what failed because a server is away: one helper for every client in headrace.

:func:`retry` runs an operation until it succeeds, sleeping a growing delay between attempts
(:class:`Backoff`: doubling up to a cap, with jitter), and reports each failure and the
first success to an :class:`~streams.core.retry.OutageLog`, which logs the outage once
when it starts and once when it ends. An error that retrying cannot mend (``is_transient``
says which) is raised at once; after ``give_up_after`` seconds of failures the retry raises
one clear error (:func:`retry_blocking` is the same for an operation that blocks its
thread). It is cancelled like any other awaitable (a cancel scope around it ends it
at once, also mid back-off), and ``stop`` ends it after a failed attempt, for a caller that
is shutting down (the pulling agents' reads and acknowledgements). It also paces a consumer's
redelivery (``after=`` the first failure, exact doubling, no attempt that would start past
the batch's deadline). Why not tenacity or stamina: docs/architecture.md, Dependencies.

Logging an outage of a server once when it starts and once when it ends, however many
retries and clients it involves (:class:`OutageLog`; the retries are
:func:`streams.core.retry.retry`'s). Any client of any server reports here: the Kafka
adapter, the handoff log, the handoff writes of the agents.

The client library's own record of each failed attempt is lowered to DEBUG, and their
number is given in the recovery line instead: the records of its connection loggers
always, those of its other loggers while an outage is under way. They are told by logger
and level, never by their wording, which changes between releases.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import anyio

from streams.core.errors import HeadraceError, QueueAdapterError

T = TypeVar("T")


class Backoff:
    """Growing delays between retries: ``initial``, then doubling up to ``maximum``, each
    with up to ``jitter`` (20 %) more so that many clients do not retry in step.

    >>> backoff = Backoff(initial=0.1, maximum=0.4)
    >>> delays = [backoff.next() for _ in range(4)]
    >>> [0.1 <= delays[0] <= 0.12, 0.2 <= delays[1] <= 0.24, 0.4 <= delays[3] <= 0.48]
    [True, True, True]
    >>> exact = Backoff(initial=1.0, maximum=math.inf, jitter=0.0)
    >>> [exact.next() for _ in range(4)]
    [1.0, 2.0, 4.0, 8.0]
    """

    def __init__(self, initial: float = 0.05, maximum: float = 2.0, *, jitter: float = 0.2) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._delay = initial

    def next(self) -> float:
        delay = self._delay
        self._delay = min(self.maximum, self._delay * 2)
        return delay * (1 + random.uniform(0, self.jitter)) if self.jitter else delay

    def reset(self) -> None:
        self._delay = self.initial


class PacedRetry:
    """A retry whose loop is its caller's: each of the caller's calls is one attempt (a
    queue receiver returns nothing to its agent after a failed read, and is called again).
    :meth:`failed` reports the attempt to ``outage`` and pauses the back-off's next delay;
    :meth:`succeeded` ends the outage and starts the delays over.

    >>> import anyio, logging
    >>> outage = OutageLog("server B", logging.getLogger("doc"))
    >>> paced = PacedRetry(outage, Backoff(0.001, 0.001))
    >>> anyio.run(lambda: paced.failed("ConnectionRefusedError", since=time.monotonic()))
    >>> outage.ongoing, paced.succeeded(), outage.ongoing
    (True, None, False)
    """

    def __init__(self, outage: OutageLog | None = None, backoff: Backoff | None = None) -> None:
        self.outage = outage
        self.backoff = Backoff() if backoff is None else backoff

    async def failed(self, reason: str, since: float) -> None:
        """An attempt failed (the failures began at monotonic ``since``): report it, and wait
        before the caller tries again."""
        if self.outage is not None:
            self.outage.failed(reason, since=since)
        await anyio.sleep(self.backoff.next())

    def succeeded(self) -> None:
        """An attempt succeeded: the server is reachable."""
        self.backoff.reset()
        if self.outage is not None:
            self.outage.recovered()


class RetryStopped(HeadraceError):
    """A retry ended by its ``stop`` callback; the last failure is its ``__cause__``."""


def reason_of(exc: BaseException) -> str:
    """How log lines and errors name a failure: its type and message.

    >>> reason_of(ConnectionRefusedError("refused")), reason_of(TimeoutError())
    ('ConnectionRefusedError: refused', 'TimeoutError')
    """
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def _always(exc: BaseException) -> bool:
    return True


class _Retrying:
    """One retry's bookkeeping after its first failure (a call that succeeds at once makes
    none), the same whether its pauses suspend a task (:func:`retry`) or block a thread
    (:func:`retry_blocking`)."""

    def __init__(
        self,
        began: float,
        what: str,
        outage: OutageLog | None,
        give_up_after: float,
        backoff: Backoff | None,
        give_up: Callable[[BaseException, float], Exception] | None,
        on_failure: Callable[[BaseException, int], None] | None,
        stop: Callable[[int], bool] | None,
        shorten_last_pause: bool = True,
    ) -> None:
        self.what, self.outage, self.give_up_after = what, outage, give_up_after
        self.shorten_last_pause = shorten_last_pause
        self.backoff = Backoff() if backoff is None else backoff
        self.give_up, self.on_failure, self.stop = give_up, on_failure, stop
        self.began = began
        self.attempt = 0

    def pause_after(self, exc: Exception) -> float:
        """Report the failed attempt ``exc``; return the pause before the next, or raise what
        ends the retry: :class:`RetryStopped`, or the give-up error."""
        self.attempt += 1
        if self.outage is not None:
            self.outage.failed(reason_of(exc), since=self.began)
        if self.on_failure is not None:
            self.on_failure(exc, self.attempt)
        if self.stop is not None and self.stop(self.attempt):
            raise RetryStopped(f"{self.what}: stopped after {self.attempt} failed attempt(s)") from exc
        waited = time.monotonic() - self.began
        if waited < self.give_up_after:
            pause = self.backoff.next()
            if self.shorten_last_pause:
                return min(pause, self.give_up_after - waited)
            if waited + pause < self.give_up_after:
                return pause
        raise (self.give_up or _gave_up(self.what, self.outage))(exc, waited) from None


async def retry(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    outage: OutageLog | None = None,
    is_transient: Callable[[BaseException], bool] = _always,
    give_up_after: float = math.inf,
    attempt_timeout: float | None = None,
    backoff: Backoff | None = None,
    give_up: Callable[[BaseException, float], Exception] | None = None,
    on_failure: Callable[[BaseException, int], None] | None = None,
    stop: Callable[[int], bool] | None = None,
    after: Exception | None = None,
    shorten_last_pause: bool = True,
) -> T:
    """Run ``operation`` until it succeeds; return what it returns.

    A failure ``is_transient`` accepts (any ``Exception`` unless told otherwise; an attempt over
    ``attempt_timeout`` always) goes to ``outage`` and ``on_failure(exc, attempt)`` (from 1); the next
    attempt comes after ``backoff``'s next delay. Others are raised as they are. Once failures have
    lasted ``give_up_after`` seconds it raises ``give_up(last failure, seconds)`` (by default a
    :class:`~streams.core.errors.QueueAdapterError` saying ``what`` failed and why); when ``stop(attempt)``
    is true after a failure, :class:`RetryStopped`.

    ``after``: the caller's first call failed with this error, so the retry begins with a pause (attempt
    1). The last pause is shortened so that one attempt starts as ``give_up_after`` ends; with
    ``shorten_last_pause=False`` it gives up when a whole pause would end past it (a redelivery's limit).

    >>> import anyio, logging
    >>> outage = OutageLog("server A", logging.getLogger("doc"))
    >>> answers = [ConnectionRefusedError("refused"), "ok"]
    >>> async def ask() -> str:
    ...     answer = answers.pop(0)
    ...     if isinstance(answer, Exception):
    ...         raise answer
    ...     return answer
    >>> anyio.run(lambda: retry(ask, what="asking", outage=outage, give_up_after=5))
    'ok'
    >>> outage.outages, outage.ongoing
    (1, False)
    """
    # The bookkeeping is made at a first failure: most calls succeed at once.
    made = partial(_Retrying, time.monotonic(), what, outage, give_up_after, backoff, give_up, on_failure, stop)
    state = None
    if after is not None:  # the caller's own call failed: a pause first
        state = made(shorten_last_pause)
        await anyio.sleep(state.pause_after(after))
    while True:
        try:
            result = await _attempt(operation, attempt_timeout)
        except Exception as exc:  # sorted into transient and not just below
            if not (isinstance(exc, TimeoutError) or is_transient(exc)):
                raise
            state = state or made(shorten_last_pause)
            await anyio.sleep(state.pause_after(exc))  # in here: what it raises has exc as context
        else:
            if outage is not None:
                outage.recovered()
            return result


async def _attempt(operation: Callable[[], Awaitable[T]], timeout: float | None) -> T:
    """One call of ``operation``, a ``TimeoutError`` if it lasts over ``timeout`` seconds."""
    if timeout is None:
        return await operation()
    with anyio.fail_after(timeout):
        return await operation()


def retry_blocking(
    operation: Callable[[], T],
    *,
    what: str,
    outage: OutageLog | None = None,
    is_transient: Callable[[BaseException], bool] = _always,
    give_up_after: float = math.inf,
    backoff: Backoff | None = None,
) -> T:
    """:func:`retry` for an ``operation`` that blocks its thread (a SQLite statement in a
    worker thread): its pauses block the thread too. Threads may share one ``outage``.

    >>> answers = [ConnectionRefusedError("refused"), "ok"]
    >>> def ask() -> str:
    ...     answer = answers.pop(0)
    ...     if isinstance(answer, Exception):
    ...         raise answer
    ...     return answer
    >>> retry_blocking(ask, what="asking", backoff=Backoff(0.001, 0.001))
    'ok'
    """
    began = time.monotonic()
    state: _Retrying | None = None
    while True:
        try:
            result = operation()
        except Exception as exc:  # sorted into transient and not just below
            if not is_transient(exc):  # no attempt timeout here: a TimeoutError is the operation's
                raise
            if state is None:
                state = _Retrying(began, what, outage, give_up_after, backoff, None, None, None)
            time.sleep(state.pause_after(exc))
        else:
            if outage is not None:
                outage.recovered()
            return result


def _gave_up(what: str, outage: OutageLog | None) -> Callable[[BaseException, float], Exception]:
    def error(exc: BaseException, waited: float) -> Exception:
        if outage is None:
            return QueueAdapterError(f"{what} failed for {waited:.0f} s ({reason_of(exc)})")
        return QueueAdapterError(
            f"{what} failed: {outage.server} has been unreachable for {waited:.0f} s "
            f"({reason_of(exc)}); check that it is running and reachable from here"
        )

    return error


class ClientLibraryLog(logging.Filter):
    """Lowers a client library's warnings and errors about reaching its server to DEBUG,
    and counts them: the outage log reports an outage once instead of once per attempt.

    The records of ``connection_loggers`` (those whose job is connecting) are lowered
    always; those of the library's other loggers while an outage is under way. A record
    with a traceback, or at CRITICAL, is never lowered: that is a bug or worse, not a retry.
    """

    def __init__(self, connection_loggers: frozenset[str]) -> None:
        super().__init__()
        self.connection_loggers = connection_loggers
        self.outages = 0  # outages under way, over every OutageLog of the library
        self.demoted = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            logging.DEBUG < record.levelno < logging.CRITICAL
            and record.exc_info is None
            and (self.outages > 0 or record.name in self.connection_loggers)
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            self.demoted += 1
        return True


_client_logs: dict[str, ClientLibraryLog] = {}


def quiet_client_library(library: str, connection_loggers: tuple[str, ...] = ()) -> ClientLibraryLog:
    """The filter of the library whose loggers are ``library`` and ``library.*`` (one per
    library), on every one of them that exists now.

    A filter on a logger sees only that logger's own records, so it goes on each logger of
    the library (libraries create theirs when imported).

    >>> connecting = logging.getLogger("doclib.conn")
    >>> quiet = quiet_client_library("doclib", ("doclib.conn",))
    >>> connecting.error("cannot connect to node 1"); quiet.demoted
    1
    """
    quiet = _client_logs.get(library)
    if quiet is None:
        quiet = _client_logs[library] = ClientLibraryLog(frozenset(connection_loggers))
    else:
        quiet.connection_loggers |= frozenset(connection_loggers)
    for name in [library, *logging.root.manager.loggerDict]:
        if name == library or name.startswith(library + "."):
            logger = logging.getLogger(name)
            if quiet not in logger.filters:
                logger.addFilter(quiet)
    return quiet


class OutageLog:
    """Whether ``server`` is reachable, as its clients report it; logs each outage once.

    Clients call :meth:`failed` on every failed attempt and :meth:`recovered` on success;
    only the first failure of an outage and its end are logged. A failure that began
    before the last recovery (a client that had not yet noticed) belongs to the outage
    that just ended, and is not logged as a new one.

    ``client_library`` names the client library's loggers and ``connection_loggers`` those
    of them that report each failed attempt to connect; see :class:`ClientLibraryLog`. What
    they log is lowered to DEBUG (and counted in the recovery line), so an outage makes two
    log lines, not hundreds. ``away`` and ``back`` word the two lines after the server's
    name (``{reason}`` in ``away`` is the failure). Clients in several threads may share it.

    >>> outage = OutageLog("Kafka at 127.0.0.1:9092", logging.getLogger("demo"))
    >>> outage.failed("connection refused"), outage.failed("connection refused")
    (True, False)
    >>> outage.ongoing
    True
    >>> outage.recovered(); outage.ongoing
    False
    """

    def __init__(
        self,
        server: str,
        logger: logging.Logger,
        client_library: str | None = None,
        connection_loggers: tuple[str, ...] = (),
        *,
        away: str = "is unreachable ({reason}); retrying with back-off, positions and data are kept",
        back: str = "is reachable again",
    ) -> None:
        self.server = server
        self._log = logger
        self._away, self._back = away, back
        self._lock = threading.Lock()
        self._demoter = quiet_client_library(client_library, connection_loggers) if client_library else None
        self._started: float | None = None  # monotonic; None: reachable
        self._announced = False
        self._last_started = self._last_ended = float("-inf")
        self._demoted_at_start = 0
        self.outages = 0  # outages announced so far (status and tests)

    @property
    def ongoing(self) -> bool:
        return self._started is not None

    def failed(self, reason: str, since: float | None = None) -> bool:
        """Report a failed attempt (``since``: when, on the monotonic clock, the failing
        began). Returns whether this started a new outage, which is then logged."""
        if self._started is not None:
            return False
        with self._lock:
            return self._failed(reason, since)

    def _failed(self, reason: str, since: float | None) -> bool:
        if self._started is not None:  # another thread started it meanwhile
            return False
        since = time.monotonic() if since is None else since
        straggler = since <= self._last_ended
        self._started = self._last_started if straggler else time.monotonic()
        if self._demoter is not None:
            self._demoter.outages += 1
        self._announced = not straggler
        self._demoted_at_start = self._demoted()
        if straggler:
            return False
        self.outages += 1
        self._log.warning("%s %s", self.server, self._away.format(reason=reason))
        return True

    def recovered(self) -> None:
        """Report a successful attempt; ends (and logs the end of) an ongoing outage."""
        if self._started is None:
            return
        with self._lock:
            self._recovered()

    def _recovered(self) -> None:
        if self._started is None:  # another thread ended it meanwhile
            return
        if self._announced:
            waited = time.monotonic() - self._started
            if self._demoter is None:  # no client library: no lines of its own to count
                self._log.warning("%s %s after %.1f s", self.server, self._back, waited)
            else:
                self._log.warning(
                    "%s %s after %.1f s (client retries logged at DEBUG: %d)",
                    self.server,
                    self._back,
                    waited,
                    self._demoted() - self._demoted_at_start,
                )
        self._last_started, self._started = self._started, None
        self._last_ended = time.monotonic()
        if self._demoter is not None:
            self._demoter.outages -= 1

    def _demoted(self) -> int:
        return self._demoter.demoted if self._demoter is not None else 0
