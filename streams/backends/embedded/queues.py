"""The embedded queues: their tables and the SQL on them, the receiver that reads a queue for its
agent, and the event-time state saved beside each checkpoint.

The embedded queues' tables and the SQL on them, shared by the adapter, its receivers and
the status and configuration readers: records, queue heads, checkpoints, retention, and the
lease fence a checkpoint is written under. Every function here runs on a connection, in a
worker thread.

The embedded queues' receiver: reads one queue for the pulling agent that owns it,
checkpoints what every consumer has finished with, and applies the retention policy.

Event-time state saved beside a queue's checkpoint in the embedded store.

One row per activation with open state: ``(queue, consumer type, stream)`` to the position of
the last event it took and its serialized processor (:mod:`streams.eventtime.snapshot`).
The rows are written in the same transaction as the checkpoint (so a checkpoint that passes
an open window always lands with the state of that window), and only while the writer's
lease holds, as the checkpoint itself.

>>> import tempfile, pathlib, sqlite3
>>> conn = sqlite3.connect(":memory:")
>>> for sql in STATE_SCHEMA:
...     _ = conn.execute(sql)
>>> write_states(3, ([("Counter", "ns/k", 7, 0, b"s")], []), conn)
>>> read_states(3, conn)
{('Counter', 'ns/k'): (SequenceToken(sequence_number=7, event_index=0), b's')}
>>> saved_state(3, ("Counter", "ns/k"), conn), saved_state(3, ("Counter", "ns/j"), conn)
((SequenceToken(sequence_number=7, event_index=0), b's'), None)

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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from streams.adapters.protocols import ReceiverDefaults, StateKey, StateRows, StateSource
from streams.adapters.retention import RetentionPolicy, RetentionReport
from streams.backends.embedded.store import EmbeddedStore, Schema
from streams.core.batch import QueueMessage
from streams.core.clock import wall_time
from streams.core.ids import QueueId, SequenceToken
from streams.core.state import declares_state, next_processing_timer

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
    own clock (renewals extend it); a receiver reads only while it does.
    """

    condition: str
    parameters: Mapping[str, Any]
    held: Callable[[], bool]


NO_LEASE = LeaseFence("0", {}, lambda: False)  # made while no lease was held: never reads


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

    @property
    def unacknowledged(self) -> int:
        start = 0 if self.checkpoint is None else self.checkpoint + 1
        return self.next_sequence - max(start, self.first_retained)


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


log = logging.getLogger("headrace.embedded")


class EmbeddedQueueReceiver(ReceiverDefaults):
    """Reads one embedded queue for the pulling agent that owns it.

    Acknowledgements are persisted as a checkpoint at most every
    ``checkpoint_persist_interval`` seconds or every ``checkpoint_persist_every`` calls
    (Orleans' checkpointer ``PersistInterval``), and on :meth:`shutdown`; after a crash the
    records acknowledged since the last persisted checkpoint are read again (at least once).
    The receiver also applies the retention policy to its queue every ``retention.interval``.

    With a ``fence`` (the lease it reads under), it reads only while its worker holds that
    lease, and a checkpoint is written only while the lease is still the queue's current
    one; once one is refused, :attr:`fenced_out` is set and the receiver reads nothing
    more: a stale owner never overwrites a newer one's checkpoint.
    """

    def __init__(
        self,
        store: EmbeddedStore,
        queue: QueueId,
        *,
        retention: RetentionPolicy | None = None,
        checkpoint_persist_interval: float = 0.2,
        checkpoint_persist_every: int = 1000,
        fence: LeaseFence | None = None,
    ) -> None:
        self.queue = queue
        self._store = store
        self._fence = fence
        self.fenced_out = False  # a checkpoint was refused: the queue has a newer owner
        self._retention = retention
        self._persist_interval = checkpoint_persist_interval
        self._persist_every = checkpoint_persist_every
        self._position = 0  # next sequence number to read
        self._acknowledged: int | None = None
        self._persisted: int | None = None
        self._acks_since_persist = 0
        self._last_persist = float("-inf")
        self._next_retention = float("-inf")  # a first pass on the first read
        # The last read returned fewer records than asked: it reached the queue's tail as
        # that read's transaction saw it (the protocol's ``caught_up``).
        self.caught_up = False
        # The event-time state saved with each checkpoint (set by the pulling agent).
        self.state_source: StateSource | None = None

    @property
    def checkpoint(self) -> int | None:
        """The last acknowledged sequence number (persisted or about to be)."""
        return self._acknowledged

    async def initialize(self) -> None:
        """Resume after the persisted checkpoint (from the oldest record when there is none)."""
        checkpoint = await self._store.read(partial(read_checkpoint, self.queue))
        self._acknowledged = self._persisted = checkpoint
        self._position = 0 if checkpoint is None else checkpoint + 1

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The activation states saved with this queue's checkpoint (but the durable units
        :meth:`saved_state` looks up when their stream has data)."""
        return await self._store.read(partial(read_states, self.queue.number))

    def saved_state(self, key: StateKey) -> tuple[SequenceToken, bytes] | None:
        """One activation's saved state, read now (a point read by primary key: this blocks
        for well under a millisecond, and only when a stream of a durable type activates)."""
        with self._store.connection() as conn:
            return saved_state(self.queue.number, key, conn)

    async def expire_states(self, consumer: str, before: float) -> int:
        """Delete ``consumer``'s durable states of this queue written before ``before``."""
        if self.fenced_out:
            return 0
        return await self._store.write(partial(expire_states, self.queue.number, consumer, before))

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        if max_count <= 0 or not self._may_read():
            self.caught_up = False  # nothing was read: the tail is not known
            return []
        self.caught_up = False  # until this read returns (it may fail)
        now = time.monotonic()
        if self._checkpoint_due(now):
            await self._persist_checkpoint(now)
        if self._retention is not None and now >= self._next_retention:
            self._next_retention = now + self._retention.interval
            await self._store.write(partial(retain, self.queue, self._retention, wall_time()))
        messages = await self.read_range(self._position, max_count)
        if messages:
            self._position = messages[-1].sequence_number + 1
        self.caught_up = len(messages) < max_count
        return messages

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        """Up to ``max_count`` records from ``start_sequence`` (or the oldest retained one
        after it), without moving the read position: rewinds and cursor catch-up."""
        if max_count <= 0 or not self._may_read():
            return []
        return await self._store.read(partial(select_records, self.queue, start_sequence, max_count))

    def _may_read(self) -> bool:
        return not self.fenced_out and (self._fence is None or self._fence.held())

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        if not tokens:
            return
        last = max(token.sequence_number for token in tokens)
        if self._acknowledged is not None and last <= self._acknowledged:
            return
        self._acknowledged = last
        self._acks_since_persist += 1
        now = time.monotonic()
        if self._checkpoint_due(now):
            await self._persist_checkpoint(now)

    def _checkpoint_due(self, now: float) -> bool:
        if self._acknowledged == self._persisted and not self._states_pending():
            return False
        return now - self._last_persist >= self._persist_interval or self._acks_since_persist >= self._persist_every

    async def _persist_checkpoint(self, now: float) -> None:
        seq = self._acknowledged
        if self.fenced_out or (seq == self._persisted and not self._states_pending()):
            return
        source = self.state_source
        rows = source.collect() if source is not None else None
        try:
            ok = await self._store.write(partial(write_checkpoint_and_states, self.queue, seq, self._fence, rows))
        except BaseException:
            if source is not None:
                source.written(False)
            raise
        if source is not None:
            source.written(ok)
        if not ok:
            self.fenced_out = True
            log.warning(
                "%s: checkpoint %s refused: this worker's lease on the queue has ended and "
                "another worker may own it; this receiver stops reading",
                self.queue,
                seq,
            )
            return
        self._persisted = seq
        self._acks_since_persist = 0
        self._last_persist = now

    def _states_pending(self) -> bool:
        return self.state_source is not None and self.state_source.pending()

    async def shutdown(self) -> None:
        """Persist the last acknowledgement."""
        await self._persist_checkpoint(time.monotonic())


STATE_SCHEMA: Schema = [
    "CREATE TABLE activation_states("
    " queue INTEGER NOT NULL, consumer TEXT NOT NULL, stream TEXT NOT NULL,"
    " seq INTEGER NOT NULL, idx INTEGER NOT NULL, state BLOB NOT NULL,"
    # durable consumer state: when a row was written, and when its first processing timer is due
    " touched REAL, wake REAL, durable INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (queue, consumer, stream))",
    "CREATE INDEX activation_states_touched ON activation_states(queue, consumer, touched) WHERE durable",
]


def write_states(queue: int, rows: StateRows, conn: sqlite3.Connection) -> None:
    upserts, deletes = rows
    conn.executemany(
        "DELETE FROM activation_states WHERE queue = ? AND consumer = ? AND stream = ?",
        [(queue, consumer, stream) for consumer, stream in deletes],
    )
    now = wall_time()
    conn.executemany(
        "INSERT INTO activation_states(queue, consumer, stream, seq, idx, state, touched, wake, durable)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(queue, consumer, stream) DO UPDATE"
        " SET seq = excluded.seq, idx = excluded.idx, state = excluded.state, touched = excluded.touched,"
        " wake = excluded.wake, durable = excluded.durable",
        [(queue, *row, now, next_processing_timer(row[4]), declares_state(row[4])) for row in upserts],
    )


def saved_state(queue: int, key: StateKey, conn: sqlite3.Connection) -> tuple[SequenceToken, bytes] | None:
    """The saved state of one activation, or None."""
    row = conn.execute(
        "SELECT seq, idx, state FROM activation_states WHERE queue = ? AND consumer = ? AND stream = ?",
        (queue, *key),
    ).fetchone()
    return None if row is None else (SequenceToken(row[0], row[1]), bytes(row[2]))


def expire_states(queue: int, consumer: str, before: float, conn: sqlite3.Connection) -> int:
    """Delete the durable states of ``consumer`` on ``queue`` last written before ``before``
    (POSIX seconds); how many."""
    cursor = conn.execute(
        "DELETE FROM activation_states WHERE queue = ? AND consumer = ? AND durable AND COALESCE(touched, 0) < ?",
        (queue, consumer, before),
    )
    return cursor.rowcount


def every_state(conn: sqlite3.Connection) -> list[tuple[int, str, str, SequenceToken, bytes]]:
    """Every activation state the store holds, ``(queue, consumer, stream, position, state)``
    by consumer and stream (``headrace state``)."""
    rows = conn.execute(
        "SELECT queue, consumer, stream, seq, idx, state FROM activation_states ORDER BY consumer, stream"
    ).fetchall()
    return [(q, c, s, SequenceToken(seq, idx), bytes(state)) for q, c, s, seq, idx, state in rows]


def read_states(queue: int, conn: sqlite3.Connection) -> dict[StateKey, tuple[SequenceToken, bytes]]:
    """The states a worker restores as their activations are made: every window state, and
    the durable units with a processing timer to fire (the others are looked up by key)."""
    rows = conn.execute(
        "SELECT consumer, stream, seq, idx, state FROM activation_states"
        " WHERE queue = ? AND (NOT durable OR wake IS NOT NULL)",
        (queue,),
    ).fetchall()
    return {(c, s): (SequenceToken(seq, idx), bytes(state)) for c, s, seq, idx, state in rows}
