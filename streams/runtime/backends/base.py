"""The one protocol between the provider and what it runs on.

A :class:`Backend` builds what a backend needs; the provider asks it for each part and probes
nothing. ``streams.runtime.backends.memory``, ``.embedded`` and ``.kafka`` make the three kinds.
"""

from __future__ import annotations

from typing import Protocol

import spark_sink
from balancer.base import BalancerOptions
from balancer.protocols import QueueBalancer
from streams.adapters.protocols import QueueAdapterFactory, QueueMapper
from streams.core.deadletters import DeadLetterStore
from streams.core.pubsub import PubSubStore
from streams.embedded.store import EmbeddedStore


class Backend(Protocol):
    """The queues below a provider and the stores beside them.

    >>> from streams.runtime.backends.memory import MemoryBackend
    >>> from streams.adapters.memory import MemoryAdapterFactory
    >>> backend: Backend = MemoryBackend(MemoryAdapterFactory(4))
    >>> len(backend.queue_mapper().get_all_queues()), backend.balances, backend.store
    (4, False, None)
    """

    @property
    def factory(self) -> QueueAdapterFactory:
        """The queue adapter factory (the adapter is made when the provider starts)."""
        ...

    @property
    def store(self) -> EmbeddedStore | None:
        """The local store beside the queues (status, durable pub-sub), if there is one."""
        ...

    @property
    def balances(self) -> bool:
        """Whether the workers balance the queues by default (``balancer_options`` apply)."""
        ...

    def queue_mapper(self) -> QueueMapper: ...

    def pubsub_store(self) -> PubSubStore: ...

    def dead_letter_store(self) -> DeadLetterStore: ...

    def queue_balancer(self, options: BalancerOptions | None) -> QueueBalancer | None:
        """A fresh default balancer for one run of a worker; ``None``: read every queue."""
        ...

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        """The sink of one handoff stream that consumer type ``owner`` declares (the
        provider closes it); ConfigurationError where the backend keeps no handoff log."""
        ...
