"""What the status page shows, for a worker's endpoint and for ``headrace status --serve``.

The page's JSON is what ``headrace status --json`` prints, with one more key, ``page``:
the latest dead letters (id, reason, stream, position, detail and the ``headrace dlq``
command that replays each), ``--advise``'s advice per consumer type, and, on a worker's
endpoint, the worker's name and its history of the last hour
(:class:`~streams.runtime.history.StatusHistory`). Reading it changes nothing.
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from typing import Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel

from streams.adapters.status import ClusterStatus
from streams.cli.advice import advice_of
from streams.cli.dlq import as_json
from streams.core.deadletters import DeadLetterArchive, StoredDeadLetter
from streams.core.errors import StoreError
from streams.runtime.history import StatusHistory
from streams.runtime.metrics import serve_status_page
from streams.runtime.page import StatusDocument

LATEST_LETTERS = 10  # dead letters the page lists
FRESH = 1.0  # seconds a document is served again before the store is read anew
# A store or cluster that does not answer (a Kafka cluster down: its clients retry with
# back-off) is said on the page after this long, rather than a poll left hanging.
READ_WITHIN = 10.0


class StatusReader(Protocol):
    """Where the status is read from: a backend (a worker's, or a Kafka cluster's) or a
    local store (:class:`~streams.runtime.backends.LocalSide`)."""

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus: ...

    def dead_letter_archive(self) -> DeadLetterArchive: ...


def replay_command(letter: StoredDeadLetter, where: str) -> str | None:
    """The ``headrace dlq`` command replaying ``letter`` (``where``: the options naming the
    store, ``--path ./store``); None for one that cannot be replayed (never decoded).

    >>> from streams.core.deadletters import DeadLetter
    >>> replay_command(StoredDeadLetter(7, DeadLetter("late_arrival", "s/k")), "--path ./store")
    'headrace dlq replay --path ./store 7'
    """
    if letter.letter.reason == "undecodable":
        return None
    again = " --again" if letter.replayed_at is not None else ""
    return f"headrace dlq replay {where} {letter.letter_id}{again}".replace("  ", " ")


def letter_row(letter: StoredDeadLetter, where: str) -> dict[str, object]:
    """One dead letter as the page lists it: as ``headrace dlq list --json`` has it, without
    its value or bytes (the event itself stays off the page), with the command replaying it."""
    row = as_json(letter)
    del row["value"], row["payload"]
    return {**row, "event_index": letter.letter.event_index, "replay": replay_command(letter, where)}


class PageSource:
    """The page's JSON, read from ``reader`` on the event loop it was made on, at most once
    every :data:`FRESH` seconds whatever the number of viewers. ``where`` is how a
    ``headrace dlq`` command names the store (``--path ./store``, ``--config kafka.toml``)."""

    def __init__(
        self,
        reader: StatusReader,
        suspicion_timeout: float,
        where: str,
        history: StatusHistory | None = None,
        worker: str | None = None,
    ) -> None:
        self.reader = reader
        self.suspicion_timeout = suspicion_timeout
        self.where = where
        self.history = history
        self.worker = worker
        self._archive: DeadLetterArchive | None = None
        self._token = anyio.lowlevel.current_token()  # raises outside an event loop
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, object]] | None = None

    async def document(self) -> dict[str, object]:
        """The JSON object, read now (on the event loop); :class:`StoreError` when it is not
        read within :data:`READ_WITHIN` seconds."""
        with anyio.move_on_after(READ_WITHIN) as reading:
            status = await self.reader.read_status(suspicion_timeout=self.suspicion_timeout)
            latest = await self._latest()
        if reading.cancelled_caught:
            raise StoreError(
                f"the status was not read within {READ_WITHIN:g} s: the store or cluster does not answer "
                "(the log of headrace status --serve, or of the worker, says why)"
            )
        page: dict[str, object] = {
            "worker": self.worker,
            "latest_dead_letters": [letter_row(s, self.where) for s in latest],
            "advice": {a.consumer_type: a.as_dict() for a in advice_of(status)},
            "history": None if self.history is None else self.history.as_dict(),
        }
        return {**status.as_dict(), "page": page}

    async def _latest(self) -> list[StoredDeadLetter]:
        if self._archive is None:
            self._archive = self.reader.dead_letter_archive()
        return await self._archive.latest(LATEST_LETTERS)

    async def close(self) -> None:
        if self._archive is not None:
            await self._archive.close()
            self._archive = None

    def from_thread(self) -> dict[str, object]:
        """:meth:`document`, from the HTTP server's threads."""
        with self._lock:  # viewers at once share one read
            if self._last is not None and time.monotonic() - self._last[0] < FRESH:
                return self._last[1]
            document = anyio.from_thread.run(self.document, token=self._token)
            self._last = (time.monotonic(), document)
            return document

    @property
    def serve(self) -> StatusDocument:
        return self.from_thread


def store_options(path: str | None, config: str | None, app: str | None) -> str:
    """The ``headrace dlq`` options naming the same store as these.

    >>> store_options("./store", None, None), store_options(None, "kafka.toml", "m:p")
    ('--path ./store', '--config kafka.toml --app m:p')
    """
    parts = [*(["--path", path] if path else []), *(["--config", config] if config else [])]
    parts += ["--app", app] if app else []
    return " ".join(shlex.quote(p) for p in parts)


async def serve_page(
    reader: StatusReader,
    suspicion_timeout: float,
    where: str,
    host: str,
    port: int,
    tls: tuple[str, str] | None = None,
) -> None:
    """``headrace status --serve``: the page of ``reader``'s store or cluster on
    ``host:port`` until SIGINT or SIGTERM; with ``tls`` (a PEM certificate file and its
    key's), over HTTPS only."""
    source = PageSource(reader, suspicion_timeout, where)
    try:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            with serve_status_page(source.serve, port, host, tls) as server:
                shown = f"[{host}]" if ":" in host else host
                scheme = "http" if tls is None else "https"
                print(
                    f"headrace status: the status page at {scheme}://{shown}:{server.port}/ (Ctrl-C stops it)",
                    flush=True,
                )
                async for _ in signals:
                    break
    finally:
        with anyio.CancelScope(shield=True):
            await source.close()
