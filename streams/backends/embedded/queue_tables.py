"""The embedded queues' tables and the SQL on them, shared by the adapter, its receivers and
checkpointers, and the status and configuration readers: records, queue heads, checkpoints,
retention, the lease fence a checkpoint is written under, and the event-time state saved
beside each checkpoint. Every function here runs on a connection, in a worker thread.

The saved state is one row per activation with open state: ``(queue, consumer type, stream)``
to the position of the last event it took and its serialized processor
(:mod:`streams.eventtime.snapshot`). The rows are written in the same transaction as the
checkpoint (so a checkpoint that passes an open window always lands with the state of that
window), and only while the writer's lease holds, as the checkpoint itself.

>>> import tempfile
>>> store = EmbeddedStore(tempfile.mkdtemp())
>>> store.require_schema(STATE_AREA, STATE_SCHEMA)
>>> with store.transaction() as conn:
...     write_states(3, ([("Counter", "ns/k", 7, 0, b"s")], []), conn)
...     read_states(3, conn)
...     saved_state(3, ("Counter", "ns/k"), conn), saved_state(3, ("Counter", "ns/j"), conn)
{('Counter', 'ns/k'): (SequenceToken(sequence_number=7, event_index=0), b's')}
((SequenceToken(sequence_number=7, event_index=0), b's'), None)
>>> store.close()

A consumer type's durable state (:mod:`streams.core.state`) is not read at start but looked
up by key when its stream next has data, so a worker holds no bytes for the streams it does
not serve now: ``read_states`` leaves out the units with no processing-time timer
(``wake``), which a worker must know of to fire them, and ``touched`` (when a row was last
written, POSIX seconds) lets :func:`expire_states` drop the idle ones past their time to live.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from balancer.protocols import Tenure
from streams.adapters.protocols import StateKey, StateRows
from streams.adapters.retention import RetentionPolicy, RetentionReport
from streams.backends.embedded.store import EmbeddedStore, Schema, in_chunks
from streams.core.batch import QueueMessage
from streams.core.clock import wall_time
from streams.core.ids import QueueId, SequenceToken
from streams.core.state import wake_and_declares

log = logging.getLogger("headrace.embedded")

QUEUE_SCHEMA: Schema = [
    # queue_count: the layout every process must agree on (stream -> queue mapping).
    "CREATE TABLE queue_meta(key TEXT PRIMARY KEY, value NOT NULL)",
    # next_seq survives retention emptying a queue, so a sequence number is never reused.
    "CREATE TABLE queue_heads(queue INTEGER PRIMARY KEY, next_seq INTEGER NOT NULL)",
    "CREATE TABLE queue_records("
    " queue INTEGER NOT NULL, seq INTEGER NOT NULL, stream TEXT NOT NULL,"
    " payload BLOB NOT NULL, enqueued REAL NOT NULL, PRIMARY KEY (queue, seq))",
    "CREATE TABLE checkpoints( queue INTEGER PRIMARY KEY, seq INTEGER NOT NULL, updated REAL NOT NULL)",
]


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """The lease a receiver reads its queue under
    (:meth:`EmbeddedQueueAdapter.fence_with_leases`).

    ``condition`` and ``parameters``: SQL that holds only while that lease is still the
    queue's current one in the store (:meth:`SqliteLeaseProvider.fence_condition`); a
    checkpoint lands only then. ``held``: whether this worker still holds the lease by its
    own clock (renewals extend it); a receiver reads only while it holds.
    """

    condition: str
    parameters: Mapping[str, Any]
    tenure: Tenure | None  # None: made while no lease was held, never reads


NO_LEASE = LeaseFence("0", {}, None)


@dataclass(frozen=True, slots=True)
class QueuePositions:
    """Where a queue stands: records ``first_retained .. next_sequence-1`` are readable,
    and ``checkpoint`` is the last one acknowledged (``None``: nothing yet)."""

    queue: QueueId
    first_retained: int
    next_sequence: int
    checkpoint: int | None

    @property
    def retained(self) -> int:
        return self.next_sequence - self.first_retained


# -- SQL shared by the adapter and its receivers (run in worker threads) ---------------------


# A read stops once it holds this many bytes (and at least one record), however many records it
# may take: a queue of large records is read a few at a time, as the cache makes room.
READ_BYTES = 16 << 20


def select_records(queue: QueueId, start: int, limit: int, conn: sqlite3.Connection) -> list[QueueMessage]:
    rows = conn.execute(
        "SELECT seq, payload, enqueued FROM queue_records WHERE queue = ? AND seq >= ? ORDER BY seq LIMIT ?",
        (queue.number, start, limit),
    )
    out: list[QueueMessage] = []
    size = 0
    for seq, payload, enqueued in rows:  # row by row: the read stops at READ_BYTES
        out.append(QueueMessage(queue, seq, payload, enqueued))
        size += len(payload)
        if size >= READ_BYTES:
            break
    return out


def replay_horizon(conn: sqlite3.Connection) -> float | None:
    """When the oldest record a restart could read again was written: the first after each
    queue's checkpoint (None: every queue is caught up). Whatever was made only of records
    written before it can never be made again.

    >>> conn = sqlite3.connect(":memory:")
    >>> for sql in QUEUE_SCHEMA:
    ...     _ = conn.execute(sql)
    >>> _ = conn.execute("INSERT INTO queue_heads VALUES (0, 3)")
    >>> _ = conn.executemany("INSERT INTO queue_records VALUES (0, ?, 's', x'', ?)", [(0, 10.0), (1, 11.0), (2, 12.0)])
    >>> _ = conn.execute("INSERT INTO checkpoints VALUES (0, 0, 0.0)")
    >>> replay_horizon(conn)
    11.0
    """
    oldest: float | None = None
    for (queue,) in conn.execute("SELECT queue FROM queue_heads").fetchall():
        row = conn.execute(
            "SELECT r.enqueued FROM queue_records r WHERE r.queue = ? AND r.seq > "
            "coalesce((SELECT seq FROM checkpoints WHERE queue = ?), -1) ORDER BY r.seq LIMIT 1",
            (queue, queue),
        ).fetchone()
        if row is not None and (oldest is None or row[0] < oldest):
            oldest = float(row[0])
    return oldest


def read_checkpoint(queue: QueueId, conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT seq FROM checkpoints WHERE queue = ?", (queue.number,)).fetchone()
    return None if row is None else int(row[0])


def write_checkpoint(queue: QueueId, seq: int, fence: LeaseFence | None, conn: sqlite3.Connection) -> bool:
    """Store ``seq`` as the queue's checkpoint if ``fence`` (the writer's lease) still holds;
    return whether it did."""
    condition, params = (fence.condition, fence.parameters) if fence is not None else ("1", {})
    # max(): a checkpoint never moves back, even if a former owner of the queue writes late.
    # (``WHERE`` also keeps SQLite from reading ON CONFLICT as part of the SELECT.)
    cursor = conn.execute(
        "INSERT INTO checkpoints(queue, seq, updated)"
        f" SELECT :queue, :seq, :updated WHERE {condition}"
        " ON CONFLICT(queue) DO UPDATE"
        " SET seq = max(seq, excluded.seq), updated = excluded.updated",
        {**params, "queue": queue.number, "seq": seq, "updated": wall_time()},
    )
    return cursor.rowcount > 0


def write_checkpoint_and_states(
    queue: QueueId, seq: int | None, fence: LeaseFence | None, rows: StateRows | None, conn: sqlite3.Connection
) -> bool:
    """The checkpoint (if any yet) and the activation states it relies on, in one
    transaction, both only while the lease holds."""
    if seq is None:
        condition, params = (fence.condition, fence.parameters) if fence is not None else ("1", {})
        if conn.execute(f"SELECT 1 WHERE {condition}", params).fetchone() is None:
            return False
    elif not write_checkpoint(queue, seq, fence, conn):
        return False
    if rows is not None:
        write_states(queue.number, rows, conn)
    return True


def queue_positions(queue: QueueId, conn: sqlite3.Connection) -> QueuePositions:
    """Where ``queue`` stands in the store, read on ``conn`` (a snapshot, for consistency)."""
    (next_seq,) = conn.execute("SELECT next_seq FROM queue_heads WHERE queue = ?", (queue.number,)).fetchone()
    (first,) = conn.execute("SELECT min(seq) FROM queue_records WHERE queue = ?", (queue.number,)).fetchone()
    return QueuePositions(queue, next_seq if first is None else first, next_seq, read_checkpoint(queue, conn))


DEFAULT_QUEUES = 8  # the queue count of a new store when none is given


def stored_queue_count(path: str | os.PathLike[str]) -> int | None:
    """The queue count of the store under ``path``; ``None`` when there is no store there
    (nothing is created) or it has made no queues yet."""
    if not (Path(path) / EmbeddedStore.FILE_NAME).is_file():
        return None
    with EmbeddedStore(path) as store, store.snapshot() as conn:
        return recorded_queue_count(conn)


def recorded_queue_count(conn: sqlite3.Connection) -> int | None:
    """The queue count the store was made with; ``None`` while no queues have been made.
    Reads only: safe on a store another process is using."""
    made = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'queue_meta'").fetchone()
    if not made:
        return None
    row = conn.execute("SELECT value FROM queue_meta WHERE key = 'queue_count'").fetchone()
    return None if row is None else int(row[0])


def retain(queue: QueueId, policy: RetentionPolicy, now: float, conn: sqlite3.Connection) -> RetentionReport:
    """One retention pass over one queue; always removes a prefix, so what is retained stays
    a contiguous run of sequence numbers."""
    positions = queue_positions(queue, conn)
    checkpoint = -1 if positions.checkpoint is None else positions.checkpoint
    expire_to = -1  # acknowledged records up to here go
    if policy.max_age is not None:
        (expire_to,) = conn.execute(
            "SELECT coalesce(max(seq), -1) FROM queue_records WHERE queue = ? AND seq <= ? AND enqueued < ?",
            (queue.number, checkpoint, now - policy.max_age),
        ).fetchone()
    drop_to = -1  # the size limit forces everything up to here out, acknowledged or not
    if policy.max_records_per_queue is not None:
        drop_to = positions.next_sequence - policy.max_records_per_queue - 1
        expire_to = max(expire_to, min(drop_to, checkpoint))
    delete = "DELETE FROM queue_records WHERE queue = ? AND seq >= ? AND seq <= ?"
    expired = conn.execute(delete, (queue.number, positions.first_retained, expire_to)).rowcount
    report = RetentionReport(queue, expired=expired)
    if drop_to > checkpoint:
        first = max(checkpoint + 1, positions.first_retained)
        dropped = conn.execute(delete, (queue.number, first, drop_to)).rowcount
        if dropped:
            report = RetentionReport(queue, expired, dropped, first, drop_to)
            log.warning(
                "%s: retention dropped %d unacknowledged records (seq %d..%d) to keep "
                "max_records_per_queue=%d; consumers will not see them",
                queue,
                dropped,
                first,
                drop_to,
                policy.max_records_per_queue,
            )
    return report


# A state row names its consumer type by a small integer (``state_consumers``), not by its
# name, which would be repeated in every row and every index entry (a third of a durable
# stream's bytes on disk). The rows are clustered by their key (WITHOUT ROWID): one B-tree,
# where a rowid table needs two (its rows, and its key's index). The column is ``consumer_id``,
# not the named layout's ``consumer``, so an older build's statement fails rather than take an
# id for a name (its `headrace state`, which checks no layout; its worker started before the upgrade).
STATE_LAYOUT = [
    "CREATE TABLE state_consumers(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "CREATE TABLE activation_states_by_id("
    " queue INTEGER NOT NULL, consumer_id INTEGER NOT NULL, stream TEXT NOT NULL,"
    " seq INTEGER NOT NULL, idx INTEGER NOT NULL, state BLOB NOT NULL,"
    # durable consumer state: when a row was written (always: a sweep's range on the index),
    # and when its first processing timer is due
    " touched REAL NOT NULL, wake REAL, durable INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (queue, consumer_id, stream)) WITHOUT ROWID",
]
STATE_INDEXES = [
    "CREATE INDEX activation_states_touched ON activation_states(queue, consumer_id, touched) WHERE durable",
    # What a worker reads at start (read_states), without a scan of the parked states.
    "CREATE INDEX activation_states_restored ON activation_states(queue) WHERE NOT durable OR wake IS NOT NULL",
]
# The layout stores written before consumer types had ids hold their states in (store layout 1).
NAMED_STATES = (
    "CREATE TABLE IF NOT EXISTS activation_states("
    " queue INTEGER NOT NULL, consumer TEXT NOT NULL, stream TEXT NOT NULL,"
    " seq INTEGER NOT NULL, idx INTEGER NOT NULL, state BLOB NOT NULL,"
    " touched REAL, wake REAL, durable INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (queue, consumer, stream))"
)
# Made in a new store, and in one of the named layout in place, every state copied exactly,
# in the one transaction that creates the area: a store is in one layout or the other, never
# between (the named table is made empty where there is none, so one list serves both).
STATE_SCHEMA: Schema = [
    NAMED_STATES,
    *STATE_LAYOUT,
    "INSERT INTO state_consumers(name) SELECT DISTINCT consumer FROM activation_states ORDER BY consumer",
    "INSERT INTO activation_states_by_id(queue, consumer_id, stream, seq, idx, state, touched, wake, durable)"
    " SELECT s.queue, c.id, s.stream, s.seq, s.idx, s.state, COALESCE(s.touched, 0), s.wake, s.durable"
    " FROM activation_states s JOIN state_consumers c ON c.name = s.consumer",
    "DROP TABLE activation_states",  # and its indexes
    "ALTER TABLE activation_states_by_id RENAME TO activation_states",
    *STATE_INDEXES,
    "DELETE FROM store_areas WHERE area = 'activation_state'",  # the named layout's area
]
STATE_AREA = "activation_state_ids"  # the area STATE_SCHEMA makes (see EmbeddedStore.require_schema)

# A consumer type's id in a statement (NULL, matching no row, for a type with no states yet).
CONSUMER_ID = "(SELECT id FROM state_consumers WHERE name = ?)"


def consumer_ids(names: Collection[str], conn: sqlite3.Connection) -> dict[str, int]:
    """The ids of consumer types ``names``, given to those that have none yet (in the
    caller's write transaction: an id rolled back with it is never seen)."""
    ids: dict[str, int] = {}
    for name in names:
        row = conn.execute("SELECT id FROM state_consumers WHERE name = ?", (name,)).fetchone()
        if row is None:
            conn.execute("INSERT INTO state_consumers(name) VALUES (?)", (name,))
            row = conn.execute("SELECT id FROM state_consumers WHERE name = ?", (name,)).fetchone()
        ids[name] = int(row[0])
    return ids


def write_states(queue: int, rows: StateRows, conn: sqlite3.Connection, written_at: float | None = None) -> None:
    """Upsert and delete ``rows`` of ``queue``; the upserts are stamped written now, or at
    ``written_at`` (a copy of states written elsewhere earlier: their time to live runs from then)."""
    upserts, deletes = rows
    if deletes:
        conn.executemany(
            f"DELETE FROM activation_states WHERE queue = ? AND consumer_id = {CONSUMER_ID} AND stream = ?",
            [(queue, consumer, stream) for consumer, stream in deletes],
        )
    if not upserts:
        return
    now = wall_time() if written_at is None else written_at
    ids = consumer_ids({row[0] for row in upserts}, conn)
    conn.executemany(
        "INSERT INTO activation_states(queue, consumer_id, stream, seq, idx, state, touched, wake, durable)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(queue, consumer_id, stream) DO UPDATE"
        " SET seq = excluded.seq, idx = excluded.idx, state = excluded.state, touched = excluded.touched,"
        " wake = excluded.wake, durable = excluded.durable",
        [
            (queue, ids[consumer], stream, seq, idx, state, now, *wake_and_declares(state))
            for consumer, stream, seq, idx, state in upserts
        ],
    )


def saved_state(queue: int, key: StateKey, conn: sqlite3.Connection) -> tuple[SequenceToken, bytes] | None:
    """The saved state of one activation, or None."""
    row = conn.execute(
        f"SELECT seq, idx, state FROM activation_states WHERE queue = ? AND consumer_id = {CONSUMER_ID} AND stream = ?",
        (queue, *key),
    ).fetchone()
    return None if row is None else (SequenceToken(row[0], row[1]), bytes(row[2]))


def saved_states(
    queue: int, keys: Collection[StateKey], conn: sqlite3.Connection
) -> dict[StateKey, tuple[SequenceToken, bytes]]:
    """The saved states of ``keys`` on ``queue``, by key (a key without one is left out)."""
    streams_of: dict[str, list[str]] = {}
    for consumer, stream in keys:
        streams_of.setdefault(consumer, []).append(stream)
    found: dict[StateKey, tuple[SequenceToken, bytes]] = {}
    for consumer, streams in streams_of.items():
        for marks, chunk in in_chunks(streams):
            rows = conn.execute(
                "SELECT stream, seq, idx, state FROM activation_states"
                f" WHERE queue = ? AND consumer_id = {CONSUMER_ID} AND stream IN ({marks})",
                (queue, consumer, *chunk),
            )
            for stream, seq, idx, state in rows:
                found[consumer, stream] = (SequenceToken(seq, idx), bytes(state))
    return found


def expire_states(queue: int, consumer: str, before: float, conn: sqlite3.Connection) -> int:
    """Delete the durable states of ``consumer`` on ``queue`` last written before ``before``
    (POSIX seconds); how many."""
    cursor = conn.execute(
        f"DELETE FROM activation_states WHERE queue = ? AND consumer_id = {CONSUMER_ID}"
        " AND durable AND touched < ?",  # a range on activation_states_touched
        (queue, consumer, before),
    )
    return cursor.rowcount


def every_state(conn: sqlite3.Connection) -> list[tuple[int, str, str, SequenceToken, bytes]]:
    """Every activation state the store holds, ``(queue, consumer, stream, position, state)``
    by consumer and stream (``headrace state``): read in the layout the store has, as this
    reads and never upgrades (a store of layout 1 no process of this version has opened)."""
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "activation_states" not in tables:
        return []
    rows = conn.execute(
        "SELECT s.queue, c.name, s.stream, s.seq, s.idx, s.state"
        " FROM activation_states s JOIN state_consumers c ON c.id = s.consumer_id ORDER BY c.name, s.stream"
        if "state_consumers" in tables
        else "SELECT queue, consumer, stream, seq, idx, state FROM activation_states ORDER BY consumer, stream"
    ).fetchall()
    return [(q, c, s, SequenceToken(seq, idx), bytes(state)) for q, c, s, seq, idx, state in rows]


def read_states(queue: int, conn: sqlite3.Connection) -> dict[StateKey, tuple[SequenceToken, bytes]]:
    """The states a worker restores as their activations are made: every window state, and
    the durable units with a processing timer to fire (the others are looked up by key)."""
    rows = conn.execute(
        # INDEXED BY: with its rows clustered by key, the table's own order (queue first) looks
        # cheaper to SQLite than this small index, and it would read every parked state.
        "SELECT c.name, s.stream, s.seq, s.idx, s.state"
        " FROM activation_states s INDEXED BY activation_states_restored JOIN state_consumers c ON c.id = s.consumer_id"
        " WHERE s.queue = ? AND (NOT s.durable OR s.wake IS NOT NULL)",
        (queue,),
    ).fetchall()
    return {(c, s): (SequenceToken(seq, idx), bytes(state)) for c, s, seq, idx, state in rows}
