"""The embedded adapter: durable partitioned queues in the embedded store (the default on one
machine, no server).

Each queue is a log of records with dense sequence numbers 0, 1, 2, ... assigned at insert,
inside the write transaction, so producers in several processes never collide or leave gaps.
A record stays after it is read: receivers read forward from a position, and any retained
sequence number can be read again (rewind). The owner of a queue checkpoints the last record
every consumer has finished with, resumes after it when restarted, and applies the retention
policy.

>>> import anyio, tempfile
>>> from streams.core.batch import BatchContainer, BatchKind
>>> from streams.core.ids import StreamId
>>> async def main():
...     async with EmbeddedAdapterFactory(tempfile.mkdtemp(), queues=2) as factory:
...         adapter = await factory.create_adapter()
...         sid = StreamId("sensors", "s-1")
...         queue = factory.get_queue_mapper().get_queue_for_stream(sid)
...         payload = BatchContainer(sid, BatchKind.DATA, 0.0, [1, 2]).encode()
...         await adapter.queue_message_batch(queue, sid, payload)
...         receiver = adapter.create_receiver(queue)
...         await receiver.initialize()
...         [message] = await receiver.get_queue_messages(10)
...         await receiver.messages_delivered([message.token])
...         await receiver.shutdown()
...         return BatchContainer.decode(message.payload).values
>>> anyio.run(main)
[1, 2]
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from balancer.mapper import HashRingQueueMapper
from streams.adapters.embedded_state import STATE_SCHEMA, StateKey, StateRows, StateSource, read_states, write_states
from streams.adapters.group_commit import GroupCommitter
from streams.adapters.retention import RetentionPolicy, RetentionReport
from streams.core.batch import QueueMessage
from streams.core.deadletters_embedded import EmbeddedDeadLetterStore
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, StreamId
from streams.core.pubsub_embedded import EmbeddedPubSubStore
from streams.core.store import EmbeddedStore, Migration, Synchronous
from streams.core.tokens import SequenceToken

if TYPE_CHECKING:  # the balancer package imports streams: imported lazily at run time
    from balancer.base import BalancerOptions
    from balancer.lease_based import LeaseBasedQueueBalancer
    from balancer.protocols import Lease
    from balancer.sqlite_store import SqliteLeaseProvider

log = logging.getLogger("headrace.embedded")

QUEUE_SCHEMA: list[Migration] = [
    [
        # queue_count: the layout every process must agree on (stream -> queue mapping).
        "CREATE TABLE queue_meta(key TEXT PRIMARY KEY, value NOT NULL)",
        # next_seq survives retention emptying a queue, so a sequence number is never reused.
        "CREATE TABLE queue_heads(queue INTEGER PRIMARY KEY, next_seq INTEGER NOT NULL)",
        "CREATE TABLE queue_records("
        " queue INTEGER NOT NULL, seq INTEGER NOT NULL, stream TEXT NOT NULL,"
        " payload BLOB NOT NULL, enqueued REAL NOT NULL, PRIMARY KEY (queue, seq))",
        "CREATE TABLE checkpoints( queue INTEGER PRIMARY KEY, seq INTEGER NOT NULL, updated REAL NOT NULL)",
    ],
]

_Row = tuple[int, str, bytes]  # queue number, "namespace/key", payload


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


def _select(queue: QueueId, start: int, limit: int, conn: sqlite3.Connection) -> list[QueueMessage]:
    rows = conn.execute(
        "SELECT seq, payload, enqueued FROM queue_records WHERE queue = ? AND seq >= ? ORDER BY seq LIMIT ?",
        (queue.number, start, limit),
    ).fetchall()
    return [QueueMessage(queue, seq, payload, enqueued) for seq, payload, enqueued in rows]


def _read_checkpoint(queue: QueueId, conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT seq FROM checkpoints WHERE queue = ?", (queue.number,)).fetchone()
    return None if row is None else int(row[0])


def _write_checkpoint(queue: QueueId, seq: int, fence: LeaseFence | None, conn: sqlite3.Connection) -> bool:
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
        {**params, "queue": queue.number, "seq": seq, "updated": time.time()},
    )
    return cursor.rowcount > 0


def _write_checkpoint_and_states(
    queue: QueueId, seq: int | None, fence: LeaseFence | None, rows: StateRows | None, conn: sqlite3.Connection
) -> bool:
    """The checkpoint (if any yet) and the activation states it relies on, in one
    transaction, both only while the lease holds."""
    if seq is None:
        condition, params = (fence.condition, fence.parameters) if fence is not None else ("1", {})
        if conn.execute(f"SELECT 1 WHERE {condition}", params).fetchone() is None:
            return False
    elif not _write_checkpoint(queue, seq, fence, conn):
        return False
    if rows is not None:
        write_states(queue.number, rows, conn)
    return True


def queue_positions(queue: QueueId, conn: sqlite3.Connection) -> QueuePositions:
    """Where ``queue`` stands in the store, read on ``conn`` (a snapshot, for consistency)."""
    (next_seq,) = conn.execute("SELECT next_seq FROM queue_heads WHERE queue = ?", (queue.number,)).fetchone()
    (first,) = conn.execute("SELECT min(seq) FROM queue_records WHERE queue = ?", (queue.number,)).fetchone()
    return QueuePositions(queue, next_seq if first is None else first, next_seq, _read_checkpoint(queue, conn))


def recorded_queue_count(conn: sqlite3.Connection) -> int | None:
    """The queue count the store was made with; ``None`` while no queues have been made.
    Reads only: safe on a store another process is using."""
    made = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'queue_meta'").fetchone()
    if not made:
        return None
    row = conn.execute("SELECT value FROM queue_meta WHERE key = 'queue_count'").fetchone()
    return None if row is None else int(row[0])


def _retain(queue: QueueId, policy: RetentionPolicy, now: float, conn: sqlite3.Connection) -> RetentionReport:
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


# -- the adapter ------------------------------------------------------------------------------


class EmbeddedQueueAdapter:
    """Producer side of the embedded queues, and maker of their receivers.

    Concurrent :meth:`queue_message_batch` calls share one transaction (group commit), and
    :meth:`queue_message_batches` writes many records in one; both return once the records
    are committed. :meth:`check_layout` (which :class:`EmbeddedAdapterFactory` calls) records
    the queue count in the store, or refuses a store made with another count.
    """

    name = "embedded"
    is_rewindable = True

    def __init__(
        self,
        store: EmbeddedStore,
        mapper: HashRingQueueMapper,
        *,
        retention: RetentionPolicy | None = None,
        checkpoint_persist_interval: float = 0.2,
        checkpoint_persist_every: int = 1000,
    ) -> None:
        if checkpoint_persist_interval < 0 or checkpoint_persist_every < 1:
            raise ConfigurationError(
                "checkpoint_persist_interval is seconds >= 0 and checkpoint_persist_every "
                f"an int >= 1, not {checkpoint_persist_interval!r} and {checkpoint_persist_every!r}"
            )
        store.require_schema("queue", QUEUE_SCHEMA)
        store.require_schema("activation_state", STATE_SCHEMA)
        self.store = store
        self.mapper = mapper
        self.retention = retention if retention is not None else RetentionPolicy()
        self._persist_interval = checkpoint_persist_interval
        self._persist_every = checkpoint_persist_every
        self._queues = set(mapper.get_all_queues())
        self._committer: GroupCommitter[_Row] = GroupCommitter(self._insert)
        self._fence_for: Callable[[QueueId], LeaseFence] | None = None

    def fence_with_leases(self, leases: SqliteLeaseProvider, lease_of: Callable[[QueueId], Lease | None]) -> None:
        """Fence every receiver made from now on by the lease its queue has then
        (``lease_of``: this worker's view, e.g. a balancer's ``get_lease``; ``leases``: the
        lease table in this store). The receiver reads only while this worker still holds
        that lease, and its checkpoints land only while it is still the queue's current one.
        """

        def fence_for(queue: QueueId) -> LeaseFence:
            lease = lease_of(queue)
            if lease is None:
                return NO_LEASE

            def held() -> bool:
                current = lease_of(queue)
                return current is not None and current.epoch == lease.epoch and current.is_held_at(time.time())

            condition, parameters = leases.fence_condition(lease)
            return LeaseFence(condition, parameters, held)

        self._fence_for = fence_for

    async def check_layout(self) -> None:
        """Record the queue count in a new store; raise ConfigurationError if the store was
        made with another count (streams would map to different queues)."""
        await self.store.write(self._record_layout)

    def _record_layout(self, conn: sqlite3.Connection) -> None:
        queues = self.mapper.queue_count
        conn.execute("INSERT OR IGNORE INTO queue_meta(key, value) VALUES ('queue_count', ?)", (queues,))
        (recorded,) = conn.execute("SELECT value FROM queue_meta WHERE key = 'queue_count'").fetchone()
        if recorded != queues:
            raise ConfigurationError(
                f"the embedded store {str(self.store.path)!r} has {recorded} queues, not "
                f"{queues}: open it with queues={recorded} (a store's queue count is fixed)"
            )
        conn.executemany(
            "INSERT OR IGNORE INTO queue_heads(queue, next_seq) VALUES (?, 0)",
            [(q,) for q in range(queues)],
        )

    # -- producing ---------------------------------------------------------------------------

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
        """Durably enqueue one encoded batch container."""
        await self.queue_message_batches([(queue, stream_id, payload)])

    async def queue_message_batches(self, items: Sequence[tuple[QueueId, StreamId, bytes]]) -> None:
        """Durably enqueue many encoded batch containers, in one transaction, in order:
        ``await adapter.queue_message_batches([(queue, sid, first), (queue, sid, second)])``.
        A producer with many records to send gets far higher throughput this way (see
        ``bench/embedded_queue.py``)."""
        rows: list[_Row] = []
        for queue, stream_id, payload in items:
            if queue not in self._queues:
                raise ConfigurationError(f"{queue} is not one of this store's {len(self._queues)} queues")
            rows.append((queue.number, str(stream_id), bytes(payload)))
        await self._committer.submit(rows)

    def _insert(self, rows: list[_Row]) -> None:
        with self.store.transaction() as conn:
            heads: dict[int, int] = dict(conn.execute("SELECT queue, next_seq FROM queue_heads"))
            touched: set[int] = set()
            now = time.time()
            records = []
            for queue, stream, payload in rows:
                seq = heads[queue]
                heads[queue] = seq + 1
                touched.add(queue)
                records.append((queue, seq, stream, payload, now))
            conn.executemany(
                "INSERT INTO queue_records(queue, seq, stream, payload, enqueued) VALUES (?, ?, ?, ?, ?)",
                records,
            )
            conn.executemany(
                "UPDATE queue_heads SET next_seq = ? WHERE queue = ?",
                [(heads[q], q) for q in touched],
            )

    # -- consuming and housekeeping ----------------------------------------------------------

    def create_receiver(self, queue: QueueId) -> EmbeddedQueueReceiver:
        if queue not in self._queues:
            raise ConfigurationError(f"{queue} is not one of this store's {len(self._queues)} queues")
        return EmbeddedQueueReceiver(
            self.store,
            queue,
            retention=self.retention,
            checkpoint_persist_interval=self._persist_interval,
            checkpoint_persist_every=self._persist_every,
            fence=self._fence_for(queue) if self._fence_for is not None else None,
        )

    async def positions(self, queue: QueueId) -> QueuePositions:
        """The queue's retained range and checkpoint, as committed in the store."""
        return await self.store.read(partial(queue_positions, queue))

    async def apply_retention(
        self, policy: RetentionPolicy | None = None, now: float | None = None
    ) -> list[RetentionReport]:
        """Run one retention pass over every queue now (receivers also do it every
        ``policy.interval`` for their own queue). ``now`` defaults to the wall clock."""
        policy = policy or self.retention
        at = time.time() if now is None else now
        return [await self.store.write(partial(_retain, queue, policy, at)) for queue in sorted(self._queues)]

    async def close(self) -> None:
        """Release the store's connections (receivers flush their checkpoints on
        ``shutdown``, before this). The store reconnects if it is used again."""
        self.store.close()


class EmbeddedQueueReceiver:
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
        # The event-time state saved with each checkpoint (set by the pulling agent).
        self.state_source: StateSource | None = None

    @property
    def checkpoint(self) -> int | None:
        """The last acknowledged sequence number (persisted or about to be)."""
        return self._acknowledged

    async def initialize(self) -> None:
        """Resume after the persisted checkpoint (from the oldest record when there is none)."""
        checkpoint = await self._store.read(partial(_read_checkpoint, self.queue))
        self._acknowledged = self._persisted = checkpoint
        self._position = 0 if checkpoint is None else checkpoint + 1

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The activation states saved with this queue's checkpoint."""
        return await self._store.read(partial(read_states, self.queue.number))

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        if max_count <= 0 or not self._may_read():
            return []
        now = time.monotonic()
        if self._checkpoint_due(now):
            await self._persist_checkpoint(now)
        if self._retention is not None and now >= self._next_retention:
            self._next_retention = now + self._retention.interval
            await self._store.write(partial(_retain, self.queue, self._retention, time.time()))
        messages = await self.read_range(self._position, max_count)
        if messages:
            self._position = messages[-1].sequence_number + 1
        return messages

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        """Up to ``max_count`` records from ``start_sequence`` (or the oldest retained one
        after it), without moving the read position: rewinds and cursor catch-up."""
        if max_count <= 0 or not self._may_read():
            return []
        return await self._store.read(partial(_select, self.queue, start_sequence, max_count))

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
            ok = await self._store.write(partial(_write_checkpoint_and_states, self.queue, seq, self._fence, rows))
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


class EmbeddedAdapterFactory:
    """The embedded store under ``path`` with ``queues`` queues: the adapter, its queue
    mapper, and the pub-sub and dead-letter stores that share the same database.

    ``synchronous`` is ``"NORMAL"`` (survives a process crash; the default) or ``"FULL"``
    (also survives power loss, at the disk's fsync rate); see :mod:`streams.core.store`.

    >>> import anyio, tempfile
    >>> async def main():
    ...     async with EmbeddedAdapterFactory(tempfile.mkdtemp(), queues=4) as factory:
    ...         adapter = await factory.create_adapter()
    ...         return adapter.is_rewindable, factory.get_queue_mapper().queue_count
    >>> anyio.run(main)
    (True, 4)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        queues: int = 8,
        *,
        retention: RetentionPolicy | None = None,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 10.0,
        checkpoint_persist_interval: float = 0.2,
        checkpoint_persist_every: int = 1000,
    ) -> None:
        if not isinstance(queues, int) or isinstance(queues, bool) or queues < 1:
            raise ConfigurationError(f"queues is a positive int, not {queues!r}")
        self.store = EmbeddedStore(path, synchronous=synchronous, busy_timeout=busy_timeout)
        self._mapper = HashRingQueueMapper(queues)
        self._adapter = EmbeddedQueueAdapter(
            self.store,
            self._mapper,
            retention=retention,
            checkpoint_persist_interval=checkpoint_persist_interval,
            checkpoint_persist_every=checkpoint_persist_every,
        )
        self._layout_checked = False

    async def create_adapter(self) -> EmbeddedQueueAdapter:
        """The adapter (the same one on every call); checks the store's queue count."""
        if not self._layout_checked:
            await self._adapter.check_layout()
            self._layout_checked = True
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper:
        return self._mapper

    def create_pubsub_store(self) -> EmbeddedPubSubStore:
        return EmbeddedPubSubStore(self.store)

    def create_dead_letter_store(self) -> EmbeddedDeadLetterStore:
        return EmbeddedDeadLetterStore(self.store)

    def create_queue_balancer(self, options: BalancerOptions | None = None) -> LeaseBasedQueueBalancer:
        """The balancer of the worker processes sharing this store: lease-based, over
        membership and leases kept in the store; the adapter's checkpoints are fenced by
        those leases. A worker silent for half a lease (and at least three balancing rounds)
        is dead to the others, so its queues move as soon as its leases expire."""
        from balancer import BalancerOptions, LeaseBasedQueueBalancer
        from balancer.sqlite_store import SqliteLeaseProvider, SqliteMembership

        options = options or BalancerOptions()
        leases = SqliteLeaseProvider(self.store)
        balancer = LeaseBasedQueueBalancer(
            SqliteMembership(self.store, suspicion_timeout=options.suspicion_timeout),
            leases,
            options=options,
        )
        self._adapter.fence_with_leases(leases, balancer.get_lease)
        return balancer

    async def close(self) -> None:
        """Release the store's connections (see :meth:`EmbeddedStore.close`)."""
        await self._adapter.close()

    async def __aenter__(self) -> EmbeddedAdapterFactory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
