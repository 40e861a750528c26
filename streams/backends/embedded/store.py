"""The embedded store: one SQLite database under a directory, shared by every embedded table.

Queues, checkpoints, pub-sub, dead letters (and membership, leases, handoff bookkeeping) all
live in ``path/headrace.db``. SQLite in WAL mode gives transactions, lets several processes on
one machine open the file at once (producers write while a worker reads) and needs no server.

Connections: a small pool, each connection used by one thread at a time. sqlite3 calls block,
so the async methods run them in a worker thread (``anyio.to_thread``).

Durability: ``synchronous=NORMAL`` by default. In WAL mode a NORMAL commit is atomic and
survives a crash of the process (the WAL is in the operating system's cache); only an OS crash
or power loss can lose the last few commits, and then a *prefix* of the commits survives, so a
checkpoint never outlives the records before it. ``FULL`` fsyncs every commit, which caps a
producer at the disk's fsync rate (see ``bench/embedded_queue.py``); choose it when a power
loss must not lose an acknowledged ``on_next``.

Schemas: each area (``queue``, ``pubsub``, ``deadletter``, ...) declares the statements that
create its tables as they are; the store runs an area's on its first use, in one write
transaction (safe when processes race to create), and records the area in ``store_areas``.
The file's layout is ``PRAGMA user_version`` (:data:`LAYOUT`). A file of an older layout
this headrace reads (:data:`UPGRADED`) is brought up to date in place, area by area: a changed
area is declared under a new name whose statements turn the old tables into the new ones (the
old area is made empty first where there is none), so the upgrade is one transaction; the file
takes the new layout once no area it changes is left in the old one (a process that uses
none of them leaves the file to the build that wrote it). A file
of another layout is refused with what to do, never read or changed; so is this layout by an
older headrace, which would misread an upgraded area.

Writers of the embedded store take turns, across threads and processes.

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
itself). :class:`BusyRetry` retries what still finds SQLite busy (a writer that does not take
turns, such as the ``sqlite3`` shell) through the one retry helper: with growing pauses, saying
once that it is backing off, and never giving up.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

import anyio.lowlevel
import anyio.to_thread

from streams.core.errors import ConfigurationError, StoreError, StoreLayoutError
from streams.core.retry import Backoff, OutageLog, retry_blocking

T = TypeVar("T")

Synchronous = Literal["NORMAL", "FULL"]
Schema = Sequence[str]  # the SQL statements that create an area's tables, run in one transaction
LAYOUT = 2  # the store file's layout (PRAGMA user_version); 0: a new, empty file
# Older layouts this headrace reads, each with its areas that LAYOUT changes: those are brought
# to LAYOUT in place as their new areas are created, and the file is of LAYOUT once none is
# left (until then the build that wrote it still reads it). 1: activation states named their
# consumer type in each row.
UPGRADED: dict[int, frozenset[str]] = {1: frozenset({"activation_state"})}


def _has_area(conn: sqlite3.Connection, area: str) -> bool:
    return conn.execute("SELECT 1 FROM store_areas WHERE area = ?", (area,)).fetchone() is not None


PRIVATE = 0o600  # the store's files by default (its directories 0o700): its events are this user's alone


class EmbeddedStore:
    """The SQLite database ``path/headrace.db`` (created with its directory when missing).

    >>> import tempfile
    >>> store = EmbeddedStore(tempfile.mkdtemp())
    >>> store.require_schema("example", ["CREATE TABLE example_items(x INTEGER)"])
    >>> with store.transaction() as conn:
    ...     _ = conn.execute("INSERT INTO example_items VALUES (1)")
    >>> with store.connection() as conn:
    ...     conn.execute("SELECT count(*) FROM example_items").fetchone()[0]
    1
    >>> store.close()

    In async code use :meth:`read` and :meth:`write`, which run a function of a connection in
    a worker thread.
    """

    FILE_NAME = "headrace.db"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 10.0,
        file_mode: int = PRIVATE,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ConfigurationError(f"synchronous is 'NORMAL' or 'FULL', not {synchronous!r}")
        if busy_timeout <= 0:
            raise ConfigurationError(f"busy_timeout is positive seconds, not {busy_timeout!r}")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ConfigurationError(f"the embedded store path {str(self.path)!r} is a file; give a directory")
        # The directory is made by the first connection, not here: importing an app that
        # builds its provider at module level (a test, `headrace status --app`) makes none.
        self.database = self.path / self.FILE_NAME
        self.file_mode = check_file_mode(file_mode)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._generation = 0  # bumped by close(): connections of an older one are not reused
        self._schemas: dict[str, Schema] = {}
        self._uncreated: list[str] = []
        # Writers take turns (WriteTurns, below); what still finds SQLite busy after its own
        # busy_timeout (a writer that does not take turns) backs off and retries.
        self._turns = turns_for(self.database, self.file_mode)
        self._urgent_threads: tuple[anyio.lowlevel.EventLoopToken, anyio.CapacityLimiter] | None = None
        self._backoff = BusyRetry(f"the embedded store {str(self.database)!r}", busy_timeout=busy_timeout)

    def __repr__(self) -> str:
        return f"EmbeddedStore({str(self.path)!r})"

    # -- schemas ---------------------------------------------------------------------------

    def require_schema(self, area: str, schema: Schema) -> None:
        """Declare an area's tables; they are created on the store's next use.

        No I/O happens here, so components may call it from their constructors.
        """
        with self._lock:
            known = self._schemas.get(area)
            if known is not None:
                if list(known) != list(schema):
                    raise ConfigurationError(f"two different schemas declared for area {area!r}")
                return
            self._schemas[area] = schema
            self._uncreated.append(area)

    def _create_pending(self, conn: sqlite3.Connection) -> None:
        # One thread creates; the others wait here rather than use tables not yet made.
        with self._create_lock:
            for area in list(self._uncreated):
                self._create(conn, area, self._schemas[area])
                with self._lock:
                    self._uncreated.remove(area)

    def _create(self, conn: sqlite3.Connection, area: str, schema: Schema) -> None:
        with self._transaction_on(conn):
            layout = self.check_layout(conn)
            conn.execute("CREATE TABLE IF NOT EXISTS store_areas(area TEXT PRIMARY KEY)")
            if not _has_area(conn, area):
                for statement in schema:
                    conn.execute(statement)
                conn.execute("INSERT INTO store_areas(area) VALUES (?)", (area,))
            old = UPGRADED.get(layout, ())
            if layout != LAYOUT and not any(_has_area(conn, name) for name in old):
                conn.execute(f"PRAGMA user_version = {LAYOUT}")

    def check_layout(self, conn: sqlite3.Connection) -> int:
        """The file's layout; :class:`StoreLayoutError` unless it is :data:`LAYOUT`, one
        this headrace upgrades (:data:`UPGRADED`) or new (0)."""
        (layout,) = conn.execute("PRAGMA user_version").fetchone()
        if layout == LAYOUT or layout in UPGRADED:
            return int(layout)
        if layout > LAYOUT:
            raise StoreLayoutError(
                f"the store {str(self.database)!r} has layout {layout}, newer than this headrace "
                f"reads ({LAYOUT}): upgrade headrace, or give this worker another store directory"
            )
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'").fetchone():
            raise StoreLayoutError(
                f"the store {str(self.database)!r} was written by a development build of headrace "
                "in an older layout, which this one does not read: move its directory aside "
                f"({str(self.path)!r}) and start with an empty one"
            )
        return 0

    # -- files ------------------------------------------------------------------------------

    def make_dir(self, path: str | os.PathLike[str]) -> None:
        """Make directory ``path`` and its missing parents with the store's directory mode
        (:func:`dir_mode`); existing ones are left as they are."""
        path = Path(path)
        if path.is_dir():
            return
        self.make_dir(path.parent)
        try:
            path.mkdir()
        except FileExistsError:
            return  # another process made it
        path.chmod(dir_mode(self.file_mode))  # exactly: mkdir's mode is narrowed by the umask

    # -- connections -----------------------------------------------------------------------

    def _open_connection(self) -> sqlite3.Connection:
        # check_same_thread=False: the pool hands a connection to one thread at a time, but
        # not always the same thread. isolation_level=None: transactions are explicit.
        self.make_dir(self.path)
        if not self.database.exists():  # SQLite gives its -wal and -shm files the same mode
            create_file(self.database, self.file_mode)
        conn = sqlite3.connect(
            self.database,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigurationError(
                    f"cannot put {str(self.database)!r} in WAL mode (got {mode!r}); use a local file system"
                )
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for this thread until the block ends (autocommit: each statement is
        its own transaction). Blocking: call it from a worker thread in async code."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
            generation = self._generation
        try:
            if conn is None:
                conn = self._open_connection()
            if self._uncreated:
                self._create_pending(conn)
            yield conn
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        finally:
            if conn is not None:
                with self._lock:
                    keep = generation == self._generation
                    if keep:
                        self._idle.append(conn)
                if not keep:
                    conn.close()

    @contextmanager
    def _transaction_on(self, conn: sqlite3.Connection, urgent: bool = False) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front: a deferred transaction that later tries to
        # write can fail at once with SQLITE_BUSY in WAL mode. The turn comes first, so this
        # process's writers and other processes' queue fairly rather than race for the lock.
        with self._turns.turn(urgent):
            self._backoff.call(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite may already have rolled back (disk full, ...)
                    conn.execute("ROLLBACK")
                raise
            self._backoff.call(lambda: conn.execute("COMMIT"))

    @contextmanager
    def transaction(self, urgent: bool = False) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed when the block ends, rolled back if it raises.
        Writers from every process are serialized, so a block may read then write safely;
        an ``urgent`` one goes before this process's writers already waiting."""
        with self.connection() as conn, self._transaction_on(conn, urgent):
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement in the block sees the same committed state."""
        with self.connection() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    async def read(self, fn: Callable[[sqlite3.Connection], T], *, urgent: bool = False) -> T:
        """Run ``fn(conn)`` in a worker thread, in a read snapshot (``urgent``: in a thread
        kept for urgent work, see :meth:`write`)."""
        limiter = self._urgent_limiter() if urgent else None
        return await anyio.to_thread.run_sync(self._call_in_snapshot, fn, limiter=limiter)

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, urgent: bool = False) -> T:
        """Run ``fn(conn)`` in a worker thread, in one write transaction. An ``urgent`` write
        (a lease renewal: late, it costs the worker its queues) has threads of its own and
        goes before this process's writes already waiting for their turn."""
        limiter = self._urgent_limiter() if urgent else None
        return await anyio.to_thread.run_sync(self._call_in_transaction, fn, urgent, limiter=limiter)

    def _urgent_limiter(self) -> anyio.CapacityLimiter:
        """Threads for urgent work, which a backlog of other writes (each holding a thread of
        the default pool while it waits for its turn) cannot use up; one set per event loop."""
        loop = anyio.lowlevel.current_token()
        if self._urgent_threads is None or self._urgent_threads[0] != loop:
            self._urgent_threads = (loop, anyio.CapacityLimiter(4))
        return self._urgent_threads[1]

    def _call_in_snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            with self.connection() as conn:  # a busy reader (rare in WAL) reads again
                conn.execute("BEGIN")
                try:
                    return fn(conn)
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")

        return self._backoff.call(attempt)

    def _call_in_transaction(self, fn: Callable[[sqlite3.Connection], T], urgent: bool = False) -> T:
        with self.transaction(urgent) as conn:
            return fn(conn)

    def _error(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreError(
                f"the embedded store {str(self.database)!r} stayed locked by another writer "
                f"for more than busy_timeout={self.busy_timeout} s; retry or raise busy_timeout"
            )
        return StoreError(f"the embedded store {str(self.database)!r} failed: {text}")

    def close(self) -> None:
        """Release every connection (idle ones now, busy ones when their block ends).

        The store stays usable and reconnects on its next use, so one store can serve a
        provider that is entered again; when the last connection of every process is
        closed, SQLite folds the WAL back into the database file.
        """
        with self._lock:
            self._generation += 1
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> EmbeddedStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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

    def __init__(self, database: Path, file_mode: int = 0o600) -> None:
        self.path = database.with_name(database.name + "-turns")
        self.file_mode = file_mode
        self._local = _TicketLock()
        self._mine = threading.local()
        self._fd: int | None = None
        self._pid = -1

    def _file(self) -> int:
        # Locks are per process: a forked child opens its own descriptor.
        if self._fd is None or self._pid != os.getpid():
            self.path.parent.mkdir(mode=dir_mode(self.file_mode), parents=True, exist_ok=True)  # the store's
            if not self.path.exists():
                create_file(self.path, self.file_mode)
            self._fd = os.open(self.path, os.O_RDWR)
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


def turns_for(database: Path, file_mode: int = 0o600) -> WriteTurns:
    """The process-wide turns of ``database``: every store object on one file shares them
    (POSIX locks belong to the process, so two objects must not each think they hold one)."""
    key = database.resolve()
    with _registry_lock:
        turns = _registry.get(key)
        if turns is None:
            turns = _registry[key] = WriteTurns(key, file_mode)
        return turns


# -- the modes of the store's files ----------------------------------------------------------


# One query reads at most this many keys (SQLite's default limit on a statement's
# parameters is 32,766; small chunks keep each statement's plan cheap).
KEYS_PER_QUERY = 500


def in_chunks(keys: Sequence[str]) -> Iterator[tuple[str, Sequence[str]]]:
    """``keys`` in chunks of at most ``KEYS_PER_QUERY``, each with its placeholders for an
    ``IN (...)``.

    >>> [(marks, list(chunk)) for marks, chunk in in_chunks(["a", "b"])]
    [('?,?', ['a', 'b'])]
    """
    for start in range(0, len(keys), KEYS_PER_QUERY):
        chunk = keys[start : start + KEYS_PER_QUERY]
        yield ",".join("?" * len(chunk)), chunk


def check_file_mode(mode: int) -> int:
    """``mode`` if it is a file mode the store can use: read and write for its owner, and
    no more than read and write for anyone.

    >>> oct(check_file_mode(0o640))
    '0o640'
    >>> check_file_mode(0o400)
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: file_mode is read and write for the owner (0600) and at most read and write for group and others (0666), e.g. 0640; not 0400
    """
    if isinstance(mode, bool) or not isinstance(mode, int) or mode & ~0o666 or mode & 0o600 != 0o600:
        shown = f"{mode:04o}" if isinstance(mode, int) and not isinstance(mode, bool) else repr(mode)
        raise ConfigurationError(
            "file_mode is read and write for the owner (0600) and at most read and write for group and "
            f"others (0666), e.g. 0640; not {shown}"
        )
    return mode


def dir_mode(file_mode: int) -> int:
    """The mode of the store's directories for files of ``file_mode``: who may read a file
    may list the directory.

    >>> [oct(dir_mode(m)) for m in (0o600, 0o640, 0o644)]
    ['0o700', '0o750', '0o755']
    """
    return file_mode | (file_mode & 0o444) >> 2


def create_file(path: str | os.PathLike[str], mode: int) -> None:
    """Create the empty file ``path`` (unless it exists) with exactly ``mode``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, mode)  # exactly: open's mode is narrowed by the umask
    finally:
        os.close(fd)


def is_busy(exc: BaseException | None) -> bool:
    """Whether SQLite refused because another connection holds a lock (worth retrying);
    also when the store has wrapped that refusal in its own error."""
    if exc is not None and not isinstance(exc, sqlite3.OperationalError):
        exc = exc.__cause__
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc)
    return "locked" in text or "busy" in text


class BusyRetry:
    """Retries an operation that finds the store busy (after SQLite's own ``busy_timeout``),
    through the one retry helper (:func:`~streams.core.retry.retry_blocking`): pauses grow
    from 5 ms to 1 s (with jitter, so waiters do not retry in step), forever. The first
    refusal logs one warning, however many threads wait; the recovery logs one line too.

    >>> BusyRetry("demo", busy_timeout=1.0).call(lambda: 42)
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
