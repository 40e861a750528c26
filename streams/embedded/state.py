"""Event-time state saved beside a queue's checkpoint in the embedded store.

One row per activation with open state: ``(queue, consumer type, stream)`` to the position of
the last event it took and its serialized processor (:mod:`streams.eventtime.snapshot`).
The rows are written in the same transaction as the checkpoint (so a checkpoint that passes
an open window always lands with the state of that window), and only while the writer's
lease holds, as the checkpoint itself.

>>> import tempfile, pathlib, sqlite3
>>> conn = sqlite3.connect(":memory:")
>>> for sql in STATE_SCHEMA[0]: _ = conn.execute(sql)
>>> write_states(3, ([("Counter", "ns/k", 7, 0, b"s")], []), conn)
>>> read_states(3, conn)
{('Counter', 'ns/k'): (SequenceToken(sequence_number=7, event_index=0), b's')}
"""

from __future__ import annotations

import sqlite3

from streams.adapters.protocols import StateKey, StateRows
from streams.core.ids import SequenceToken
from streams.embedded.store import Migration

STATE_SCHEMA: list[Migration] = [
    [
        "CREATE TABLE activation_states("
        " queue INTEGER NOT NULL, consumer TEXT NOT NULL, stream TEXT NOT NULL,"
        " seq INTEGER NOT NULL, idx INTEGER NOT NULL, state BLOB NOT NULL,"
        " PRIMARY KEY (queue, consumer, stream))",
    ],
]


def write_states(queue: int, rows: StateRows, conn: sqlite3.Connection) -> None:
    upserts, deletes = rows
    conn.executemany(
        "DELETE FROM activation_states WHERE queue = ? AND consumer = ? AND stream = ?",
        [(queue, consumer, stream) for consumer, stream in deletes],
    )
    conn.executemany(
        "INSERT INTO activation_states(queue, consumer, stream, seq, idx, state) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(queue, consumer, stream) DO UPDATE"
        " SET seq = excluded.seq, idx = excluded.idx, state = excluded.state",
        [(queue, *row) for row in upserts],
    )


def read_states(queue: int, conn: sqlite3.Connection) -> dict[StateKey, tuple[SequenceToken, bytes]]:
    rows = conn.execute(
        "SELECT consumer, stream, seq, idx, state FROM activation_states WHERE queue = ?", (queue,)
    ).fetchall()
    return {(c, s): (SequenceToken(seq, idx), bytes(state)) for c, s, seq, idx, state in rows}
