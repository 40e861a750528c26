"""The embedded backend: queues, checkpoints, pub-sub, dead letters, leases and the handoff
log all in one SQLite store; the workers sharing the store balance its queues by leases."""

from __future__ import annotations

import os

import anyio

import spark_sink
from balancer.base import BalancerOptions
from balancer.lease_based import LeaseBasedQueueBalancer
from balancer.sqlite_store import SqliteLeaseProvider, SqliteMembership
from spark_sink.mark_retention import MarkRetention
from streams.adapters.mapper import HashRingQueueMapper
from streams.adapters.retention import RetentionPolicy
from streams.embedded.adapter import EmbeddedAdapterFactory
from streams.embedded.deadletters import EmbeddedDeadLetterStore
from streams.embedded.pubsub import EmbeddedPubSubStore
from streams.embedded.queues import replay_horizon
from streams.embedded.store import EmbeddedStore, Synchronous


class EmbeddedBackend:
    """The embedded store of ``factory`` and what lives beside its queues.

    >>> import tempfile
    >>> backend = EmbeddedBackend.open(tempfile.mkdtemp(), queues=4)
    >>> backend.queue_mapper().queue_count, backend.balances
    (4, True)
    """

    balances = True

    def __init__(self, factory: EmbeddedAdapterFactory) -> None:
        self.factory = factory

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        queues: int | None = None,
        *,
        retention: RetentionPolicy | None = None,
        synchronous: Synchronous = "NORMAL",
    ) -> EmbeddedBackend:
        """The store under ``path`` with ``queues`` queues (made on first use; by default an
        existing store's count, else 8)."""
        return cls(EmbeddedAdapterFactory(path, queues, retention=retention, synchronous=synchronous))

    @property
    def store(self) -> EmbeddedStore:
        return self.factory.store

    def queue_mapper(self) -> HashRingQueueMapper:
        return self.factory.get_queue_mapper()

    def pubsub_store(self) -> EmbeddedPubSubStore:
        return self.factory.create_pubsub_store()

    def dead_letter_store(self) -> EmbeddedDeadLetterStore:
        return self.factory.create_dead_letter_store()

    def queue_balancer(self, options: BalancerOptions | None) -> LeaseBasedQueueBalancer:
        """The balancer of the worker processes sharing this store: lease-based, over
        membership and leases kept in the store; the adapter's checkpoints are fenced by
        those leases. A worker silent for half a lease (and at least three balancing rounds)
        is dead to the others, so its queues move as soon as its leases expire."""
        options = options or BalancerOptions()
        leases = SqliteLeaseProvider(self.store)
        balancer = LeaseBasedQueueBalancer(
            SqliteMembership(self.store, suspicion_timeout=options.suspicion_timeout),
            leases,
            options=options,
        )
        self.factory.fence_with_leases(leases, balancer.get_lease)
        return balancer

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The handoff log in the store (its tables are made here: in a worker thread). The
        queues' retention policy bounds it too (:mod:`spark_sink.retention`)."""
        # Through the package's lazy attribute: pyarrow loads only when something hands off.
        sink: spark_sink.HandoffSink = await anyio.to_thread.run_sync(
            spark_sink.EmbeddedHandoffSink,
            self.store,
            handoff,
            MarkRetention(replay_horizon),
            self.factory.retention,
        )
        return sink
