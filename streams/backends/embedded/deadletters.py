"""Dead letters in the embedded store (table ``deadletters``), with ids for inspection and
replay: a dead letter is kept after it is replayed, marked with the time of the replay.

One row per queue position and reason (``streams.core.deadletters.letter_key``: a unique index,
and ``INSERT OR IGNORE``), so a range read again after a restart records nothing twice. A
whole record's letter has event index -1 in the table; rows written before the index existed
have none (NULL) and are never taken for another. A letter with a ``unit`` (a window) is one
per queue, reason and unit (a second, partial, unique index); its event index is NULL, so the
first index never takes it for an event's."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import msgpack

from streams.backends.embedded.store import EmbeddedStore, Schema
from streams.core.clock import wall_time
from streams.core.deadletters import DeadLetter, StoredDeadLetter, letter_key, packable

DEADLETTER_SCHEMA: Schema = [
    "CREATE TABLE deadletters("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, reason TEXT NOT NULL, stream TEXT,"
    " queue INTEGER, seq INTEGER, payload BLOB, value BLOB, event_time REAL,"
    " detail TEXT NOT NULL, recorded_at REAL NOT NULL, replayed_at REAL,"
    " event_index INTEGER,"
    " unit TEXT)",  # a letter about a window, not an event
    "CREATE INDEX deadletters_by_reason ON deadletters(reason, id)",
    "CREATE UNIQUE INDEX deadletters_once ON deadletters(queue, seq, event_index, reason)",
    # one per queue, reason and unit
    "CREATE UNIQUE INDEX deadletters_unit_once ON deadletters(queue, reason, unit) WHERE unit IS NOT NULL",
]

_COLUMNS = (
    "id, reason, stream, queue, seq, payload, value, event_time, detail, recorded_at, replayed_at, event_index, unit"
)


def _encode_value(letter: DeadLetter) -> tuple[bytes | None, str]:
    """The value as msgpack (or its repr, and said so: :func:`packable`), and the detail."""
    if letter.value is None:
        return None, letter.detail
    kept = packable(letter)
    return msgpack.packb(kept.value, use_bin_type=True), kept.detail


def _stored(row: tuple[Any, ...]) -> StoredDeadLetter:
    letter_id, reason, stream, queue, seq, payload, value, event_time, detail, at, replayed, index, unit = row
    letter = DeadLetter(
        reason=reason,
        stream=stream,
        queue=queue,
        sequence_number=seq,
        payload=payload,
        value=None if value is None else msgpack.unpackb(value, raw=False, strict_map_key=False),
        event_time=event_time,
        detail=detail,
        recorded_at=at,
        event_index=None if index is None or index < 0 else index,
        unit=unit,
    )
    return StoredDeadLetter(letter_id, letter, replayed)


class EmbeddedDeadLetterStore:
    """A :class:`streams.core.deadletters.DeadLetterStore` in the embedded store.

    >>> import anyio, tempfile
    >>> from streams.backends.embedded.store import EmbeddedStore
    >>> async def main():
    ...     letters = EmbeddedDeadLetterStore(EmbeddedStore(tempfile.mkdtemp()))
    ...     await letters.add([DeadLetter("undecodable", queue=3, sequence_number=17,
    ...                                   payload=b"\\x00junk")])
    ...     [stored] = await letters.entries()
    ...     await letters.mark_replayed([stored.letter_id])
    ...     again = await letters.get(stored.letter_id)
    ...     return again.letter.payload, again.replayed_at is not None
    >>> anyio.run(main)
    (b'\\x00junk', True)
    """

    def __init__(self, store: EmbeddedStore) -> None:
        store.require_schema("deadletter", DEADLETTER_SCHEMA)
        self._store = store

    async def add(self, letters: builtins.list[DeadLetter]) -> None:
        rows = []
        for letter in letters:
            value, detail = _encode_value(letter)
            rows.append(
                (
                    letter.reason,
                    letter.stream,
                    letter.queue,
                    letter.sequence_number,
                    letter.payload,
                    value,
                    letter.event_time,
                    detail,
                    letter.recorded_at,
                    # -1: the whole record; NULL (no queue position, or a unit's letter) never
                    # matches another in the positions' index
                    None
                    if letter_key(letter) is None or letter.unit is not None
                    else -1
                    if letter.event_index is None
                    else letter.event_index,
                    letter.unit,
                )
            )
        if rows:
            await self._store.write(partial(_insert, rows))

    async def list(self, reason: str | None = None, limit: int = 100) -> builtins.list[DeadLetter]:
        """The oldest ``limit`` dead letters (of one reason), replayed ones included."""
        return [stored.letter for stored in await self.entries(reason, limit)]

    async def count(self, reason: str | None = None) -> int:
        def count(conn: sqlite3.Connection) -> int:
            if reason is None:
                return int(conn.execute("SELECT count(*) FROM deadletters").fetchone()[0])
            return int(conn.execute("SELECT count(*) FROM deadletters WHERE reason = ?", (reason,)).fetchone()[0])

        return await self._store.read(count)

    async def entries(
        self,
        reason: str | None = None,
        limit: int = 100,
        *,
        after_id: int = 0,
        replayed: bool | None = None,
    ) -> builtins.list[StoredDeadLetter]:
        """Dead letters with their ids, oldest first; page with ``after_id``; ``replayed``
        True or False keeps only those replayed, or not yet replayed."""
        where = ["id > ?"]
        params: builtins.list[Any] = [after_id]
        if reason is not None:
            where.append("reason = ?")
            params.append(reason)
        if replayed is not None:
            where.append("replayed_at IS NOT NULL" if replayed else "replayed_at IS NULL")
        sql = f"SELECT {_COLUMNS} FROM deadletters WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        params.append(limit)
        return await self._store.read(partial(self._select, sql, params))

    async def latest(self, limit: int) -> builtins.list[StoredDeadLetter]:
        """The ``limit`` newest dead letters, newest first."""
        sql = f"SELECT {_COLUMNS} FROM deadletters ORDER BY id DESC LIMIT ?"
        return await self._store.read(partial(self._select, sql, [limit]))

    async def get(self, letter_id: int) -> StoredDeadLetter | None:
        found = await self._store.read(
            partial(self._select, f"SELECT {_COLUMNS} FROM deadletters WHERE id = ?", [letter_id])
        )
        return found[0] if found else None

    async def mark_replayed(self, letter_ids: Iterable[int], at: float | None = None) -> int:
        """Mark dead letters as replayed; returns how many of the ids exist."""
        when = wall_time() if at is None else at
        rows = [(when, letter_id) for letter_id in letter_ids]

        def mark(conn: sqlite3.Connection) -> int:
            return sum(
                conn.execute("UPDATE deadletters SET replayed_at = ? WHERE id = ?", row).rowcount for row in rows
            )

        return await self._store.write(mark)

    async def close(self) -> None:
        pass  # the store belongs to whoever opened it

    @staticmethod
    def _select(sql: str, params: Sequence[Any], conn: sqlite3.Connection) -> builtins.list[StoredDeadLetter]:
        return [_stored(row) for row in conn.execute(sql, params)]


def _insert(rows: Sequence[tuple[object, ...]], conn: sqlite3.Connection) -> None:
    # Returns nothing: a cursor handed back to the event loop's thread would be finalized
    # there, on a pooled connection another thread may be using by then (SQLite then says
    # "bad parameter or other API misuse" and the letters' write fails).
    conn.executemany(
        "INSERT OR IGNORE INTO deadletters(reason, stream, queue, seq, payload, value,"
        " event_time, detail, recorded_at, event_index, unit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
