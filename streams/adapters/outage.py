"""Riding out an outage of the server that holds the queues.

Clients back off between retries (:class:`Backoff`), and the adapter logs an outage once when
it starts and once when it ends, however many retries and clients it involves
(:class:`OutageLog`). The client library's own record of each failed attempt is lowered to
DEBUG, and their number is given in the recovery line instead: the records of its connection
loggers always, those of its other loggers while an outage is under way. They are told by
logger and level, never by their wording, which changes between releases.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from streams.core.errors import QueueAdapterError

T = TypeVar("T")


class Backoff:
    """Growing delays between retries: ``initial``, then doubling up to ``maximum``, each
    with up to 20 % jitter so that many clients do not retry in step.

    >>> backoff = Backoff(initial=0.1, maximum=0.4)
    >>> delays = [backoff.next() for _ in range(4)]
    >>> [0.1 <= delays[0] <= 0.12, 0.2 <= delays[1] <= 0.24, 0.4 <= delays[3] <= 0.48]
    [True, True, True]
    """

    def __init__(self, initial: float = 0.05, maximum: float = 2.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._delay = initial

    def next(self) -> float:
        delay = self._delay
        self._delay = min(self.maximum, self._delay * 2)
        return delay * (1 + random.uniform(0, 0.2))

    def reset(self) -> None:
        self._delay = self.initial


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
    log lines, not hundreds.

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
    ) -> None:
        self.server = server
        self._log = logger
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
        self._log.warning(
            "%s is unreachable (%s); retrying with back-off, positions and data are kept",
            self.server,
            reason,
        )
        return True

    def recovered(self) -> None:
        """Report a successful attempt; ends (and logs the end of) an ongoing outage."""
        if self._started is None:
            return
        if self._announced:
            self._log.warning(
                "%s is reachable again after %.1f s (client retries logged at DEBUG: %d)",
                self.server,
                time.monotonic() - self._started,
                self._demoted() - self._demoted_at_start,
            )
        self._last_started, self._started = self._started, None
        self._last_ended = time.monotonic()
        if self._demoter is not None:
            self._demoter.outages -= 1

    def _demoted(self) -> int:
        return self._demoter.demoted if self._demoter is not None else 0


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    outage: OutageLog,
    is_transient: Callable[[BaseException], bool],
    give_up_after: float,
    attempt_timeout: float | None = None,
) -> T:
    """Run ``operation`` until it succeeds, backing off after transient failures (and
    attempts longer than ``attempt_timeout``); after ``give_up_after`` seconds of failures,
    raise :class:`QueueAdapterError` naming ``what`` failed and why."""
    began = time.monotonic()
    backoff = Backoff()
    while True:
        try:
            if attempt_timeout is None:
                result = await operation()
            else:
                with anyio.fail_after(attempt_timeout):
                    result = await operation()
        except Exception as exc:  # sorted into transient and not just below
            if not (isinstance(exc, TimeoutError) or is_transient(exc)):
                raise
            reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            outage.failed(reason, since=began)
            waited = time.monotonic() - began
            if waited >= give_up_after:
                raise QueueAdapterError(
                    f"{what} failed: {outage.server} has been unreachable for {waited:.0f} s "
                    f"({reason}); check that it is running and reachable from here"
                ) from None
            await anyio.sleep(min(backoff.next(), max(0.0, give_up_after - waited)))
        else:
            outage.recovered()
            return result
