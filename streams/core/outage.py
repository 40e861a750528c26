"""Logging an outage of a server once when it starts and once when it ends, however many
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
import threading
import time


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
