"""The embedded adapter: durable partitioned queues in the embedded store (the default on one
machine, no server).

Each queue is a log of records with dense sequence numbers 0, 1, 2, ... assigned at insert,
inside the write transaction, so producers in several processes never collide or leave gaps.
A record stays after it is read: receivers read forward from a position, and any retained
sequence number can be read again (rewind). The owner of a queue checkpoints the last record
every consumer has finished with, resumes after it when restarted, and applies the retention
policy. The tables and their SQL are in :mod:`~streams.backends.embedded.queue_tables`, the
receiver in :mod:`~streams.backends.embedded.receiver` and its checkpointer in
:mod:`~streams.backends.embedded.checkpointer`; the balancer that fences it is built by
:mod:`streams.runtime.backends`.

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

import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from balancer.protocols import Lease, Tenure
from streams.adapters.mapper import HashRingQueueMapper
from streams.adapters.protocols import ContainerQueueAdapter
from streams.adapters.retention import RetentionPolicy, RetentionReport
from streams.backends.embedded.deadletters import EmbeddedDeadLetterStore
from streams.backends.embedded.group_commit import GroupCommitter
from streams.backends.embedded.pubsub import EmbeddedPubSubStore
from streams.backends.embedded.queue_tables import (
    DEFAULT_QUEUES,
    NO_LEASE,
    QUEUE_SCHEMA,
    STATE_AREA,
    STATE_SCHEMA,
    LeaseFence,
    QueuePositions,
    queue_positions,
    retain,
    stored_queue_count,
)
from streams.backends.embedded.receiver import EmbeddedQueueReceiver
from streams.backends.embedded.store import EmbeddedStore, Synchronous
from streams.core.clock import wall_time
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, StreamId

__all__ = [  # what other modules import from here, wherever it is defined
    "EmbeddedAdapterFactory",
    "EmbeddedQueueAdapter",
    "EmbeddedQueueReceiver",
    "LeaseFencing",
    "QueuePositions",
]

_Row = tuple[int, str, bytes]  # queue number, "namespace/key", payload


class LeaseFencing(Protocol):
    """The lease table in the store (``balancer.SqliteLeaseProvider``): the SQL condition
    under which a lease is still its queue's current one."""

    def fence_condition(self, lease: Lease) -> tuple[str, Mapping[str, Any]]: ...


class EmbeddedQueueAdapter(ContainerQueueAdapter):
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
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        self.store = store
        self.mapper = mapper
        self.retention = retention if retention is not None else RetentionPolicy()
        self._persist_interval = checkpoint_persist_interval
        self._persist_every = checkpoint_persist_every
        self._queues = set(mapper.get_all_queues())
        self._committer: GroupCommitter[_Row] = GroupCommitter.threaded(self._insert)
        self._fence_for: Callable[[QueueId], LeaseFence] | None = None

    def fence_with_leases(self, leases: LeaseFencing, tenure_of: Callable[[QueueId], Tenure | None]) -> None:
        """Fence every receiver made from now on by this worker's tenure on its queue then
        (``tenure_of``: e.g. a balancer's ``get_tenure``; ``leases``: the lease table in this
        store). The receiver reads only while that tenure holds, and its checkpoints land
        only while its lease is still the queue's current one.
        """

        def fence_for(queue: QueueId) -> LeaseFence:
            tenure = tenure_of(queue)
            if tenure is None:
                return NO_LEASE
            condition, parameters = leases.fence_condition(tenure.lease)
            return LeaseFence(condition, parameters, tenure)

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
            now = wall_time()
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

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> EmbeddedQueueReceiver:
        # Its records are containers: the pulling agent refuses those over max_record_size.
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
        at = wall_time() if now is None else now
        return [await self.store.write(partial(retain, queue, policy, at)) for queue in sorted(self._queues)]

    async def close(self) -> None:
        """Release the store's connections (receivers flush their checkpoints on
        ``shutdown``, before this). The store reconnects if it is used again."""
        self.store.close()


class EmbeddedAdapterFactory:
    """The embedded store under ``path`` with ``queues`` queues: the adapter, its queue
    mapper, and the pub-sub and dead-letter stores that share the same database.

    ``synchronous`` is ``"NORMAL"`` (survives a process crash; the default) or ``"FULL"``
    (also survives power loss, at the disk's fsync rate); see :mod:`streams.backends.embedded.store`.

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
        queues: int | None = None,
        *,
        retention: RetentionPolicy | None = None,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 10.0,
        file_mode: int = 0o600,
        checkpoint_persist_interval: float = 0.2,
        checkpoint_persist_every: int = 1000,
    ) -> None:
        if queues is None:  # the store's own count, as it was made; a new store's default
            queues = stored_queue_count(path) or DEFAULT_QUEUES
        if not isinstance(queues, int) or isinstance(queues, bool) or queues < 1:
            raise ConfigurationError(f"queues is a positive int, not {queues!r}")
        self.store = EmbeddedStore(path, synchronous=synchronous, busy_timeout=busy_timeout, file_mode=file_mode)
        self._mapper = HashRingQueueMapper(queues)
        self._adapter = EmbeddedQueueAdapter(
            self.store,
            self._mapper,
            retention=retention,
            checkpoint_persist_interval=checkpoint_persist_interval,
            checkpoint_persist_every=checkpoint_persist_every,
        )
        self._layout_checked = False

    @property
    def retention(self) -> RetentionPolicy:
        """The queues' retention policy (the handoff log in the same store follows it too)."""
        return self._adapter.retention

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

    def fence_with_leases(self, leases: LeaseFencing, tenure_of: Callable[[QueueId], Tenure | None]) -> None:
        """Fence the adapter's receivers by the leases of the workers sharing this store
        (see :meth:`EmbeddedQueueAdapter.fence_with_leases`; ``streams.runtime.backends``
        does it with its lease-based balancer)."""
        self._adapter.fence_with_leases(leases, tenure_of)

    async def close(self) -> None:
        """Release the store's connections (see :meth:`EmbeddedStore.close`)."""
        await self._adapter.close()

    async def __aenter__(self) -> EmbeddedAdapterFactory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
