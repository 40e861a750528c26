"""A Kafka worker's local state store: its queues' saved states on this machine's disk, each
queue's the copy of one changelog partition up to the offset it records
(:class:`~streams.backends.kafka.changelog.KafkaChangelog` keeps it in step with the changelog).

**Why SQLite.** The embedded backend's store already does what this needs: it serves one state
by key in well under a millisecond and the new streams of one read in a query per consumer type
(:func:`~streams.backends.embedded.queue_tables.saved_states`), writes a commit's states and
the changelog offset in one transaction, keeps a prefix of its commits through a SIGKILL (WAL),
and needs no server and no new dependency. RocksDB (Kafka Streams, Quix Streams) writes faster,
but a state write here follows a changelog write that waits for every replica, which bounds the
rate anyway.

**One file per worker.** Under ``<state_dir>/<changelog topic>/`` a worker takes the first slot
``worker-<n>`` whose lock file it can lock (``flock``): two workers on one machine never share a
file, and a worker restarted after a SIGKILL (the kernel lets go of a dead process's locks) takes
its old slot back, with the states it left there. A file that SQLite cannot read or whose
integrity check fails is moved out of the way and started empty: its queues are rebuilt from the
changelog. Damage SQLite finds later, in a read or a write, is handled alike: the file is moved
aside, an empty one started, and the call raises
:class:`~streams.core.errors.LocalStoreDamagedError` for the changelog to rebuild from.

**The check at open reads the whole file** (``PRAGMA quick_check``: about a second a million
states), so it is made only when it can find something: a worker that closes its store leaves
a note of the files' sizes and times (``closed-cleanly``, Kafka Streams' ``.checkpoint`` of a
clean shutdown), taken away as the store is opened again. Files just as they were left (a
restart after a clean stop) are opened at once. So are the files of a worker that died (a
SIGKILL, a crash) while the machine stayed up: each open notes the kernel's boot id
(``opened-on-boot``), and a process's death loses nothing the kernel was given, so SQLite's
write-ahead log leaves the file whole. After a reboot (a power cut can lose what the disk had
not stored) the file is checked. Damage from elsewhere (a failing disk, another program) that
a skipped check would have found is found in use instead, as any read or write of a damaged
page is (see :meth:`ChangelogCopy._guard`).

>>> import anyio, tempfile
>>> from streams.core.ids import SequenceToken
>>> async def main():
...     copy = open_changelog_copy(tempfile.mkdtemp())
...     await copy.apply(0, ([("Counts", "m/1", 41, 0, b"s")], []), next_offset=5)
...     return copy.offset(0), copy.saved_state(0, ("Counts", "m/1")), copy.close()
>>> anyio.run(main)
(5, (SequenceToken(sequence_number=41, event_index=0), b's'), None)
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from streams.adapters.protocols import StateKey, StateRows
from streams.backends.embedded.queue_tables import (
    CONSUMER_ID,
    STATE_AREA,
    STATE_SCHEMA,
    read_states,
    saved_state,
    saved_states,
    write_states,
)
from streams.backends.embedded.store import EmbeddedStore, Schema
from streams.core.clock import wall_time
from streams.core.errors import LocalStoreDamagedError, StoreError, StoreLayoutError
from streams.core.ids import SequenceToken

log = logging.getLogger("headrace.kafka")

OFFSET_SCHEMA: Schema = [
    # The next changelog offset a queue's states reflect (every record before it is applied),
    # and when the copy was last brought there (POSIX seconds).
    "CREATE TABLE changelog_offsets(queue INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL, synced REAL)",
]
# Tombstones found idle at once are sent in writes of at most this many, one per sweep: a
# backlog of expiries never makes one write that outlasts a request's timeout.
EXPIRED_A_SWEEP = 10_000
SLOTS = 1024  # workers of one changelog on one machine, at most
DAMAGED = (11, 26)  # SQLite's primary result codes for a damaged file: SQLITE_CORRUPT, SQLITE_NOTADB
CLEAN = "closed-cleanly"  # a slot's note of the files as a clean close left them
BOOT = "opened-on-boot"  # a slot's note of the boot its file was last opened in
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # Linux's id of this boot


class ChangelogCopy:
    """One worker's local state store (see the module): by queue, the states (key ->
    position, state) and the changelog offset they reflect."""

    def __init__(self, store: EmbeddedStore, lock: int) -> None:
        self.store = store
        self.path = store.database
        self._lock = lock  # the slot's lock file, held while this worker lives
        self.set_aside = 0  # files found damaged while in use, moved aside

    @contextmanager
    def _guard(self) -> Iterator[EmbeddedStore]:
        """The store, for one call; damage SQLite finds meanwhile (a page that no longer
        reads) sets the file aside as at open, starts an empty one, and raises
        :class:`~streams.core.errors.LocalStoreDamagedError`: every queue's copy is gone."""
        store = self.store
        try:
            yield store
        except (StoreError, sqlite3.DatabaseError) as exc:
            if not is_damage(exc):
                raise
            if store is self.store:  # not already set aside by a call that found it first
                store.close()
                self.store = _set_aside(self.path.parent, exc)
                self.set_aside += 1
            raise LocalStoreDamagedError(
                f"the local state store {str(self.path)!r} was damaged ({exc}); set aside and started empty"
            ) from exc

    def offset(self, queue: int) -> int | None:
        """The changelog offset ``queue``'s states reflect; ``None``: none recorded."""
        found = self.synced(queue)
        return None if found is None else found[0]

    def synced(self, queue: int) -> tuple[int, float] | None:
        """``(the changelog offset queue's states reflect, when the copy was brought there)``;
        ``None``: none recorded."""
        with self._guard() as store, store.connection() as conn:
            row = conn.execute(
                "SELECT next_offset, COALESCE(synced, 0) FROM changelog_offsets WHERE queue = ?", (queue,)
            ).fetchone()
        return None if row is None else (int(row[0]), float(row[1]))

    async def apply(
        self,
        queue: int,
        rows: StateRows,
        *,
        next_offset: int,
        after: int | None = None,
        written_at: float | None = None,
    ) -> None:
        """Apply ``rows`` to ``queue``'s states and record ``next_offset``, in one transaction.
        With ``after`` (where the changelog records that carried ``rows`` begin), the offset moves
        only if the store's is ``after``: a write with changelog records of others before it
        (a failed write's, another writer's) leaves the offset where it is, so a restart reads
        those records again."""
        with self._guard() as store:
            await store.write(partial(_apply, queue, rows, next_offset, after, written_at))

    async def forget(self, queue: int) -> int:
        """Drop ``queue``'s states and offset (before it is rebuilt); how many states went."""
        with self._guard() as store:
            return await store.write(partial(_forget, queue))

    async def read_states(self, queue: int) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The states a worker restores as their activations are made (every window state, the
        durable ones with a timer); the other durable ones stay here, read by key."""
        with self._guard() as store:
            return await store.read(partial(read_states, queue))

    def saved_state(self, queue: int, key: StateKey) -> tuple[SequenceToken, bytes] | None:
        """One state, read now (a point read by primary key)."""
        with self._guard() as store, store.connection() as conn:
            return saved_state(queue, key, conn)

    def saved_states(self, queue: int, keys: Collection[StateKey]) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The states of ``keys`` (a key without one left out), read now in a few queries."""
        with self._guard() as store, store.connection() as conn:
            return saved_states(queue, keys, conn)

    async def idle_keys(self, queue: int, consumer: str, before: float) -> list[StateKey]:
        """The keys of ``consumer``'s durable states on ``queue`` last written before ``before``
        (at most :data:`EXPIRED_A_SWEEP`)."""
        with self._guard() as store:
            return await store.read(partial(_idle_keys, queue, consumer, before))

    def count(self, queue: int) -> int:
        """How many states ``queue`` has here."""
        with self._guard() as store, store.connection() as conn:
            (found,) = conn.execute("SELECT count(*) FROM activation_states WHERE queue = ?", (queue,)).fetchone()
        return int(found)

    def read_note(self, name: str) -> bytes | None:
        """The note ``name`` this slot keeps beside its store (a worker's own small facts,
        such as its consumer group membership); ``None``: none."""
        try:
            return (self.path.parent / f"{name}.note").read_bytes()
        except FileNotFoundError:
            return None

    def write_note(self, name: str, data: bytes | None) -> None:
        """Keep ``data`` as the note ``name`` (``None``: delete it), replaced whole. Only while
        this worker holds the slot's lock: a note is then never another process's."""
        if self._lock < 0:
            raise StoreError(
                f"the local state store {str(self.path)!r} is closed: its notes are no longer this worker's"
            )
        note = self.path.parent / f"{name}.note"
        if data is None:
            note.unlink(missing_ok=True)
            return
        written = note.with_name(note.name + ".new")
        written.write_bytes(data)
        written.replace(note)  # a SIGKILL midway leaves the old note or the new one

    def close(self) -> None:
        """Close the store and leave a note of its files as they are now (see the module)."""
        self.store.close()
        try:
            (self.path.parent / CLEAN).write_text(json.dumps(_files_now(self.path.parent)))
        except OSError as exc:  # the next open checks the file: slower, never wrong
            log.debug("no note of a clean close of %s: %r", self.path, exc)
        lock, self._lock = self._lock, -1
        os.close(lock)


def open_changelog_copy(directory: str | os.PathLike[str]) -> ChangelogCopy:
    """The local state store of this worker under ``directory``: the first free slot (see the
    module), checked; a damaged file is moved aside (``<file>.damaged``) and started empty."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for n in range(SLOTS):
        lock = _locked(root / f"worker-{n}.lock")
        if lock is not None:
            try:
                return _checked(root / f"worker-{n}", lock)
            except BaseException:
                os.close(lock)
                raise
    raise StoreError(f"{SLOTS} workers already hold a local state store under {str(root)!r}")


def _locked(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _checked(path: Path, lock: int) -> ChangelogCopy:
    left = _clean_close(path)  # read before the store is opened (which writes)
    untouched = left is True
    boot = _boot()
    # No note of a clean close: the last process died. A note that does not match: the
    # files changed since, and are checked.
    same_boot = left is None and boot is not None and _read(path / BOOT) == boot
    store: EmbeddedStore | None = None
    try:
        store = _store(path)
        if untouched:
            log.debug("the local state store %s is as a clean close left it: not checked", store.database)
        elif same_boot:
            log.debug("the local state store %s was last open in this boot: not checked", store.database)
        else:
            with store.connection() as conn:
                (result,) = conn.execute("PRAGMA quick_check").fetchone()
            if result != "ok":
                raise StoreError(f"integrity check: {result}")
    # A file of another layout (another headrace version's) is a copy this one cannot use
    # either: the changelog, not the copy, is the truth, so it is set aside like a damaged one.
    except (StoreError, StoreLayoutError, sqlite3.Error) as exc:
        if store is not None:
            store.close()
        store = _set_aside(path, exc)
    if boot is not None:
        try:
            (path / BOOT).write_text(boot)
        except OSError as exc:  # the next open checks the file: slower, never wrong
            log.debug("no note of this boot in %s: %r", path, exc)
    return ChangelogCopy(store, lock)


def _boot() -> str | None:
    """This boot's id (Linux); ``None`` where the system gives none: every open is checked."""
    return _read(BOOT_ID)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` (or the SQLite error it wraps) says the file is damaged, not busy
    or full: a copy to set aside.

    >>> import pathlib, tempfile
    >>> bad = pathlib.Path(tempfile.mkdtemp(), "headrace.db")
    >>> _ = bad.write_bytes(b"not a database " * 300)
    >>> try:
    ...     sqlite3.connect(bad).execute("SELECT * FROM sqlite_master").fetchall()
    ... except sqlite3.DatabaseError as exc:
    ...     is_damage(exc), is_damage(sqlite3.OperationalError("database is locked"))
    (True, False)
    """
    cause = exc if isinstance(exc, sqlite3.Error) else exc.__cause__
    code = getattr(cause, "sqlite_errorcode", None)
    return isinstance(cause, sqlite3.DatabaseError) and code is not None and code & 0xFF in DAMAGED


def _set_aside(path: Path, why: BaseException) -> EmbeddedStore:
    """Move the store's directory ``path`` aside (``<path>.damaged``, replacing an older one)
    and start an empty store there; logged in one line."""
    damaged = path.with_name(path.name + ".damaged")
    shutil.rmtree(damaged, ignore_errors=True)
    path.rename(damaged)
    log.warning(
        "the local state store %s is damaged (%s): moved to %s; its queues are rebuilt from the changelog",
        path / EmbeddedStore.FILE_NAME,
        why,
        damaged,
    )
    return _store(path)


def _files_now(path: Path) -> dict[str, list[int]]:
    """The store's files under ``path`` (the database and its write-ahead log): size and
    modification time of each that exists."""
    found = {}
    for name in ("headrace.db", "headrace.db-wal"):
        try:
            stat = (path / name).stat()
        except FileNotFoundError:
            continue
        found[name] = [stat.st_size, stat.st_mtime_ns]
    return found


def _clean_close(path: Path) -> bool | None:
    """Whether the note of a clean close under ``path`` matches its files now; ``None``:
    there is none. The note is taken away either way (this opening may end in a crash)."""
    note = path / CLEAN
    try:
        left = json.loads(note.read_text())
        note.unlink()
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return False
    return bool(left) and left == _files_now(path)


def _store(path: Path) -> EmbeddedStore:
    store = EmbeddedStore(path)
    store.require_schema(STATE_AREA, STATE_SCHEMA)
    store.require_schema("changelog_offset", OFFSET_SCHEMA)
    return store


def _apply(
    queue: int, rows: StateRows, next_offset: int, after: int | None, written_at: float | None, conn: sqlite3.Connection
) -> None:
    write_states(queue, rows, conn, written_at)
    if after is not None:
        row = conn.execute("SELECT next_offset FROM changelog_offsets WHERE queue = ?", (queue,)).fetchone()
        if row is None or row[0] != after:
            return
    conn.execute(
        "INSERT INTO changelog_offsets(queue, next_offset, synced) VALUES (?, ?, ?)"
        " ON CONFLICT(queue) DO UPDATE SET next_offset = excluded.next_offset, synced = excluded.synced",
        (queue, next_offset, wall_time()),
    )


def _forget(queue: int, conn: sqlite3.Connection) -> int:
    conn.execute("DELETE FROM changelog_offsets WHERE queue = ?", (queue,))
    return conn.execute("DELETE FROM activation_states WHERE queue = ?", (queue,)).rowcount


def _idle_keys(queue: int, consumer: str, before: float, conn: sqlite3.Connection) -> list[StateKey]:
    rows = conn.execute(
        f"SELECT stream FROM activation_states WHERE queue = ? AND consumer_id = {CONSUMER_ID}"
        " AND durable AND touched < ? LIMIT ?",
        (queue, consumer, before, EXPIRED_A_SWEEP),
    )
    return [(consumer, stream) for (stream,) in rows]
