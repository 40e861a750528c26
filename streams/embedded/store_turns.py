"""Writers of the embedded store take turns, across threads and processes.

SQLite lets one writer in at a time and leaves the others to its busy handler, which polls
with growing sleeps (up to 100 ms each): a process that commits in a tight loop (a steady
producer) finds the lock free again before a sleeping waiter wakes, and can starve it past any
``busy_timeout``. Here a writer first queues for its turn:

- within a process, in arrival order (a ticket lock), except that an *urgent* writer (lease
  renewals and membership heartbeats, which lose the worker its queues if late) goes before
  the writes already queued: a backlog of handoff appends never delays a renewal by more than
  the one write in progress;
- across processes, through two byte-range locks on a side file ``headrace.db-turns``
  (a *turnstile*): a writer takes the gate, then the write lock, then lets go of the gate.
  A process that has just written and wants to write again must pass the gate, which the
  waiting process holds, so two busy processes alternate instead of one winning every race.
  The kernel releases a dead process's locks, so a SIGKILL never leaves the store stuck.

A turn is re-entrant within a thread (a write that calls another write does not wait on
itself). :class:`BackOff` retries what still finds SQLite busy (a writer that does not take
turns, such as the ``sqlite3`` shell) through the one retry helper: with growing pauses, saying
once that it is backing off, and never giving up.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from streams.core.outage import OutageLog
from streams.core.retry import Backoff, retry_blocking

T = TypeVar("T")

log = logging.getLogger("headrace.store")

_GATE, _WRITE = 0, 1  # byte offsets of the two locks in the side file


class _TicketLock:
    """A first-come, first-served lock for the threads of one process, which an urgent
    writer (a lease renewal) passes: it goes next, before every ticket already waiting."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next = 0
        self._serving = 0
        self._urgent = 0  # urgent writers waiting
        self._held = False

    def acquire(self, urgent: bool = False) -> None:
        with self._cond:
            if urgent:
                self._urgent += 1
                while self._held:
                    self._cond.wait()
                self._urgent -= 1
            else:
                ticket = self._next
                self._next += 1
                while self._held or self._urgent or ticket != self._serving:
                    self._cond.wait()
                self._serving += 1
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()


class WriteTurns:
    """The turns of one database file's writers (one per file per process: see :func:`turns_for`).

    >>> import tempfile, pathlib
    >>> turns = WriteTurns(pathlib.Path(tempfile.mkdtemp()) / "headrace.db")
    >>> with turns.turn():
    ...     with turns.turn():  # re-entrant in a thread
    ...         "writing"
    'writing'
    """

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + "-turns")
        self._local = _TicketLock()
        self._mine = threading.local()
        self._fd: int | None = None
        self._pid = -1

    def _file(self) -> int:
        # Locks are per process: a forked child opens its own descriptor.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._pid = os.getpid()
        return self._fd

    @contextmanager
    def turn(self, urgent: bool = False) -> Iterator[None]:
        """Wait for this writer's turn (blocking: call it from a worker thread in async code);
        an ``urgent`` one goes before the writers of this process already waiting."""
        depth = getattr(self._mine, "depth", 0)
        if depth:
            self._mine.depth = depth + 1
            try:
                yield
            finally:
                self._mine.depth -= 1
            return
        self._local.acquire(urgent)
        try:
            fd = self._file()
            fcntl.lockf(fd, fcntl.LOCK_EX, 1, _GATE)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX, 1, _WRITE)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, _GATE)
            self._mine.depth = 1
            try:
                yield
            finally:
                self._mine.depth = 0
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, _WRITE)
        finally:
            self._local.release()


_registry: dict[Path, WriteTurns] = {}
_registry_lock = threading.Lock()


def turns_for(database: Path) -> WriteTurns:
    """The process-wide turns of ``database``: every store object on one file shares them
    (POSIX locks belong to the process, so two objects must not each think they hold one)."""
    key = database.resolve()
    with _registry_lock:
        turns = _registry.get(key)
        if turns is None:
            turns = _registry[key] = WriteTurns(key)
        return turns


def is_busy(exc: BaseException | None) -> bool:
    """Whether SQLite refused because another connection holds a lock (worth retrying);
    also when the store has wrapped that refusal in its own error."""
    if exc is not None and not isinstance(exc, sqlite3.OperationalError):
        exc = exc.__cause__
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc)
    return "locked" in text or "busy" in text


class BackOff:
    """Retries an operation that finds the store busy (after SQLite's own ``busy_timeout``),
    through the one retry helper (:func:`~streams.core.retry.retry_blocking`): pauses grow
    from 5 ms to 1 s (with jitter, so waiters do not retry in step), forever. The first
    refusal logs one warning, however many threads wait; the recovery logs one line too.

    >>> BackOff("demo", busy_timeout=1.0).call(lambda: 42)
    42
    """

    def __init__(self, what: str, *, busy_timeout: float) -> None:
        self.what = what
        self._outage = OutageLog(
            what,
            log,
            away=f"stayed locked by another writer for more than busy_timeout={busy_timeout} s; "
            "backing off and retrying until it is free",
            back="is writable again",
        )

    def call(self, fn: Callable[[], T]) -> T:
        return retry_blocking(
            fn, what=self.what, outage=self._outage, is_transient=is_busy, backoff=Backoff(0.005, 1.0)
        )
