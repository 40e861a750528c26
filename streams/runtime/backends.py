"""What a provider runs on: the :class:`Backend` protocol, a store on this machine as the
place of what is not on the queues (:class:`LocalSide`), and a backend's queues with such a
store beside them (:class:`LocalStoreBeside`).

Each backend package builds everything its kind needs and nothing another kind does:
:class:`~streams.backends.memory.backend.MemoryBackend`,
:class:`~streams.backends.embedded.backend.EmbeddedBackend` and
:class:`~streams.backends.kafka.backend.KafkaBackend`. The provider, the worker and the CLI ask
these protocols for each part and probe nothing; :mod:`streams.runtime.constructors` alone
builds a backend (an import-linter contract keeps it so).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import anyio

import spark_sink
from balancer.base import BalancerOptions
from balancer.protocols import QueueBalancer
from streams.adapters.protocols import QueueAdapterFactory, QueueMapper, SavedStateRow
from streams.adapters.retention import RetainedRecords
from streams.adapters.status import ClusterStatus, StatusBoard
from streams.core.deadletters import DeadLetterArchive, DeadLetterStore
from streams.core.pubsub import PubSubStore


class StoreOnDisk(Protocol):
    """A store on this machine, as the runtime and the CLI name it: by its directory."""

    @property
    def path(self) -> Path: ...


class Backend(Protocol):
    """The queues below a provider and the stores beside them.

    >>> from streams.backends.memory.backend import MemoryBackend
    >>> from streams.backends.memory.adapter import MemoryAdapterFactory
    >>> backend: Backend = MemoryBackend(MemoryAdapterFactory(4))
    >>> len(backend.queue_mapper().get_all_queues()), backend.balances, backend.store
    (4, False, None)
    """

    @property
    def factory(self) -> QueueAdapterFactory:
        """The queue adapter factory (the adapter is made when the provider starts)."""
        ...

    @property
    def store(self) -> StoreOnDisk | None:
        """The local store beside the queues (status, durable pub-sub), if there is one."""
        ...

    @property
    def balances(self) -> bool:
        """Whether the workers balance the queues by default (``balancer_options`` apply)."""
        ...

    @property
    def position_names(self) -> tuple[str, str]:
        """What a queue and a position in it are called here: ``("queue", "sequence")``, on
        Kafka ``("partition", "offset")``."""
        ...

    @property
    def cluster_away(self) -> bool:
        """Whether the server the queues live on is away now: an outage every queue's reads share."""
        ...

    @property
    def durable(self) -> bool:
        """Whether what is published outlives this process."""
        ...

    async def check_reachable(self, within: float) -> None:
        """Return once the server the queues live on answers; raise (one line) if it does not
        within ``within`` seconds. Nothing to check for queues on this machine."""
        ...

    def queue_mapper(self) -> QueueMapper: ...

    def pubsub_store(self) -> PubSubStore: ...

    def dead_letter_store(self) -> DeadLetterStore: ...

    def dead_letter_archive(self) -> DeadLetterArchive:
        """The dead letters with their ids, to list and replay (``headrace dlq``; the caller
        closes it); ConfigurationError where nothing outside this process could read them."""
        ...

    def queue_balancer(self, options: BalancerOptions | None) -> QueueBalancer | None:
        """A fresh default balancer for one run of a worker; ``None``: read every queue."""
        ...

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The sink of one handoff stream that consumer type ``owner`` declares (the
        provider closes it); ConfigurationError where the backend keeps no handoff log."""
        ...

    def status_board(self) -> StatusBoard | None:
        """Where a worker publishes its agents' status for ``headrace status`` (closed with the
        provider's adapter); ``None`` where no other process could read it."""
        ...

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus:
        """The cluster's status as ``headrace status`` shows it (workers silent for longer than
        ``suspicion_timeout`` are suspected; long-gone ones only with ``everyone``)."""
        ...

    async def saved_states(self) -> list[SavedStateRow]:
        """Every activation's saved unit, by consumer type and stream (``headrace state``)."""
        ...

    async def retained_records(self) -> RetainedRecords:
        """What the queues still retain, to read back (``headrace export``)."""
        ...


class LocalSide(Protocol):
    """A store on this machine as the place of what is not on the queues: durable pub-sub,
    dead letters, the status board and the saved state, read back by the CLI. The embedded
    backend's ``LocalStore`` is one (:func:`~streams.runtime.constructors.open_local_store`
    opens an existing one)."""

    @property
    def path(self) -> Path:
        """The store's directory."""
        ...

    def pubsub_store(self) -> PubSubStore: ...

    def dead_letter_store(self) -> DeadLetterStore: ...

    def dead_letter_archive(self) -> DeadLetterArchive: ...

    def status_board(self) -> StatusBoard: ...

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus: ...

    async def saved_states(self) -> list[SavedStateRow]: ...

    async def retained_records(self) -> RetainedRecords: ...

    def close(self) -> None:
        """Close the store (what it made stays on disk)."""
        ...


class LocalStoreBeside:
    """``queues``' queues, balancer and handoff log, with pub-sub, dead letters and the status
    board in a store on this machine (``StreamProvider.kafka(store=...)``).

    >>> import tempfile
    >>> from streams.backends.embedded.backend import LocalStore
    >>> from streams.backends.embedded.store import EmbeddedStore
    >>> from streams.backends.memory.backend import MemoryBackend
    >>> backend = LocalStoreBeside(MemoryBackend.open(2), LocalStore(EmbeddedStore(tempfile.mkdtemp())))
    >>> backend.store is not None, backend.position_names
    (True, ('queue', 'sequence'))
    """

    def __init__(self, queues: Backend, local: LocalSide) -> None:
        self.queues = queues
        self.local = local

    @property
    def factory(self) -> QueueAdapterFactory:
        return self.queues.factory

    @property
    def store(self) -> LocalSide:
        return self.local

    @property
    def balances(self) -> bool:
        return self.queues.balances

    @property
    def position_names(self) -> tuple[str, str]:
        return self.queues.position_names

    @property
    def cluster_away(self) -> bool:
        return self.queues.cluster_away

    @property
    def durable(self) -> bool:
        return self.queues.durable

    async def check_reachable(self, within: float) -> None:
        await self.queues.check_reachable(within)

    def queue_mapper(self) -> QueueMapper:
        return self.queues.queue_mapper()

    def pubsub_store(self) -> PubSubStore:
        return self.local.pubsub_store()

    def dead_letter_store(self) -> DeadLetterStore:
        return self.local.dead_letter_store()

    def dead_letter_archive(self) -> DeadLetterArchive:
        return self.local.dead_letter_archive()

    def queue_balancer(self, options: BalancerOptions | None) -> QueueBalancer | None:
        return self.queues.queue_balancer(options)

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        return await self.queues.open_handoff_sink(owner, handoff)

    def status_board(self) -> StatusBoard:
        return self.local.status_board()

    async def read_status(self, *, suspicion_timeout: float, everyone: bool = False) -> ClusterStatus:
        return await self.local.read_status(suspicion_timeout=suspicion_timeout, everyone=everyone)

    async def saved_states(self) -> list[SavedStateRow]:
        return await self.queues.saved_states()  # saved with the queues' checkpoints

    async def retained_records(self) -> RetainedRecords:
        return await self.local.retained_records()


# A worker's handoff sinks: one per Spark handoff stream that its consumer types declare,
# opened by its backend.


async def open_handoff_sinks(
    backend: Backend, consumer_types: Iterable[type], stack: contextlib.AsyncExitStack
) -> dict[str, spark_sink.HandoffSink]:
    """handoff stream name -> its sink, for every consumer type that declares a handoff
    (checked against its ``event_time``); each sink is closed when ``stack`` is.

    >>> import anyio
    >>> from streams.backends.memory.backend import MemoryBackend
    >>> async def none_declared():
    ...     async with contextlib.AsyncExitStack() as stack:
    ...         return await open_handoff_sinks(MemoryBackend.open(), [int, str], stack)
    >>> anyio.run(none_declared)
    {}
    """
    types = list(consumer_types)
    if not any(hasattr(cls, "handoff") for cls in types):
        return {}  # nothing hands off: do not load Spark's side (pyspark, pyarrow) at all
    sinks: dict[str, spark_sink.HandoffSink] = {}
    for cls in types:
        handoff = spark_sink.handoff_of(cls)
        if handoff is None:
            continue
        spark_sink.check_handoff(cls, handoff)
        if handoff.stream in sinks:
            continue
        sink = await backend.open_handoff_sink(cls.__qualname__, handoff)
        stack.push_async_callback(sink.close)
        if not sinks:
            # pyarrow imports pandas (where installed) the first time it builds an array
            # from Python values: seconds on a loaded machine. Paid here, before any queue is
            # read, not by the first write, whose transaction holds the store's write turn
            # while every read, checkpoint and lease renewal of the worker waits behind it.
            await anyio.to_thread.run_sync(handoff.schema().to_table, [])
        sinks[handoff.stream] = sink
    return sinks
