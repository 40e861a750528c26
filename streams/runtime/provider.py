"""The stream provider: the entry point of the public API (Orleans' ``PersistentStreamProvider``).

``async with provider:`` runs a *worker*: pulling agents for the queues it owns, delivering to
consumers. ``async with provider.client():`` only publishes (Orleans' cluster client).

Its constructors, one per backend (``memory``, ``embedded``, ``kafka``, ``generator``), are
:mod:`streams.runtime.constructors`'s: this module knows a backend only by its protocol.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import anyio

from agents.context import AgentContext
from agents.manager import AgentManager
from agents.pulling_agent import PullingAgent
from agents.registry import ConsumerRegistry, check_inputs, consumer_decorator
from balancer.base import BalancerOptions
from balancer.protocols import QueueBalancer
from cache.protocols import QueueCache
from cache.simple import SimpleQueueCache
from streams.adapters.mapper import KeyedQueueMapper, co_partition
from streams.adapters.protocols import QueueAdapter, QueueAdapterFactory, QueueMapper
from streams.core.clock import WALL_CLOCK, Clock
from streams.core.deadletters import DeadLetterStore
from streams.core.errors import ConfigurationError, ProviderClosedError, PublishError
from streams.core.ids import QueueId, StreamId
from streams.core.observer import (
    LoggingFailureHandler,
    StreamFailureHandler,
)
from streams.core.options import StreamProviderOptions
from streams.core.pubsub import FollowedPubSubStore, PubSubStore
from streams.runtime.backends import Backend, StoreOnDisk, open_handoff_sinks
from streams.runtime.constructors import BackendConstructors
from streams.runtime.publisher import Publisher, start_publisher
from streams.runtime.stream import Stream
from streams.runtime.subscriptions import StreamSubscriptionManager

log = logging.getLogger("headrace.provider")
T = TypeVar("T", bound=type)

_providers_in_process = itertools.count(1)


def default_worker_name() -> str:
    """``hostname-pid`` for the first provider of a process, then ``hostname-pid-2``, ...:
    unique on the machine, so providers never collide by default."""
    n = next(_providers_in_process)
    base = f"{socket.gethostname()}-{os.getpid()}"
    return base if n == 1 else f"{base}-{n}"


class StreamProvider(BackendConstructors):
    """Persistent streams over partitioned queues.

    >>> provider = StreamProvider.memory(queues=8)
    >>> @provider.implicit("sensors")
    ... class Average:
    ...     def __init__(self, stream_id): self.n = 0
    ...     async def on_next(self, batch): self.n += len(batch)

    Workers: each ``async with provider:`` is one worker, named ``worker_name`` (unique among
    live workers; by default ``hostname-pid``). A ``balancer`` decides which queues it reads;
    with none, the backend's default if it has one (an embedded store: workers sharing it
    balance the queues among themselves, timed by ``balancer_options``), else every queue.

    ``backend`` (:class:`~streams.runtime.backends.Backend`) is what it runs on: the
    constructors ``memory``, ``embedded``, ``kafka`` and ``generator`` make one (see
    :mod:`streams.runtime.constructors`); pub-sub and dead letters default to the backend's.
    ``clock`` is the processing clock (the wall clock; :mod:`streams.testing` moves its own).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        pubsub: PubSubStore | None = None,
        dead_letters: DeadLetterStore | None = None,
        failure_handler: StreamFailureHandler | None = None,
        balancer: QueueBalancer | None = None,
        balancer_options: BalancerOptions | None = None,
        worker_name: str | None = None,
        options: StreamProviderOptions | None = None,
        co_partitioned: Sequence[Sequence[str]] = (),
        clock: Clock = WALL_CLOCK,
        **option_kwargs: Any,
    ) -> None:
        if options is not None and option_kwargs:
            raise ConfigurationError("pass either options= or option keywords, not both")
        if balancer_options is not None and (balancer is not None or not backend.balances):
            raise ConfigurationError(
                "balancer_options set the timings of the default balancer (embedded store leases, "
                "Kafka group membership); a balancer of your own takes its options itself, and "
                "memory or generator queues have none"
            )
        if worker_name is not None and (not isinstance(worker_name, str) or not worker_name):
            raise ConfigurationError(f"worker_name is a non-empty str, not {worker_name!r}")
        self.worker_name = worker_name or default_worker_name()
        self.balancer = balancer
        self.balancer_options = balancer_options
        self.options = options or StreamProviderOptions.from_kwargs(**option_kwargs)
        self.from_config = False  # built by HeadraceConfig.provider(): [provider] applies
        # What the code chose, so that a worker's configuration can tell its own settings
        # from the defaults it fills in (HeadraceConfig.apply_options): the keywords given,
        # or the fields of an options object that differ from the defaults.
        self.explicit_options: frozenset[str] = (
            frozenset(option_kwargs) if options is None else options.differing_from_defaults()
        )
        self.backend = backend
        self.clock = clock  # the processing clock (arrival times, ticks); streams.testing moves one
        self.mapper: QueueMapper = backend.queue_mapper()
        if co_partitioned:  # several namespaces placed by key (see streams.adapters.mapper)
            self.mapper = KeyedQueueMapper(self.mapper, co_partitioned)
        self.pubsub: PubSubStore = pubsub or backend.pubsub_store()
        self.dead_letters: DeadLetterStore = dead_letters or backend.dead_letter_store()
        self.failure_handler: StreamFailureHandler = failure_handler or LoggingFailureHandler()
        self.registry = ConsumerRegistry()
        self.subscriptions = StreamSubscriptionManager(self)
        self._adapter: QueueAdapter | None = None
        self._manager: AgentManager | None = None
        self._publisher: Publisher | None = None
        self._failing = False  # the provider's block is leaving with an error
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def factory(self) -> QueueAdapterFactory:
        """The backend's queue adapter factory."""
        return self.backend.factory

    @property
    def store(self) -> StoreOnDisk | None:
        """The local store (the embedded queues' own, or one given to ``.kafka`` for pub-sub
        and dead letters); ``None`` with none."""
        return self.backend.store

    # -- consumer registration -----------------------------------------------------
    def implicit(self, namespace: str, *more: str) -> Callable[[T], T]:
        """Register a consumer type activated for every stream of ``namespace``: one
        instance per stream id, built as ``cls(stream_id)``, on the worker owning the queue.

        With several namespaces (``implicit("tolls", "prices")``) there is one instance per
        *key*, fed by ``tolls/<key>`` and ``prices/<key>`` alike and built once as
        ``cls(StreamId("tolls", key))`` (the first namespace's stream id). The streams of one
        key share a queue: the decorator co-partitions the namespaces (as the provider's
        ``co_partitioned=[("tolls", "prices")]`` does; a Kafka topic of a foreign format places
        by key already). A producer in another process places them alike when it builds its
        provider the same way: importing this module, or with ``co_partitioned=``.

        >>> provider = StreamProvider.memory(queues=4)
        >>> @provider.implicit("tolls", "prices")
        ... class PricedTolls:
        ...     def __init__(self, stream_id): self.key = stream_id.key
        ...     async def on_next(self, batch): pass
        >>> provider.mapper.co_partitioned(["tolls", "prices"])
        True
        """
        namespaces = (namespace, *more)
        if len(set(namespaces)) != len(namespaces):
            raise ConfigurationError(f"implicit lists a namespace twice: {namespaces!r}")
        placed = None if not more or self.mapper.co_partitioned(namespaces) else self._co_partition(namespaces)

        def decorate(cls: T) -> T:
            if more:
                self.registry.register_keyed(namespaces, cls)
                if placed is not None:
                    self.mapper = placed
            else:
                check_inputs(cls, namespaces)
                self.registry.register_implicit(namespace, cls)
            return cls

        return decorate

    def _co_partition(self, namespaces: tuple[str, ...]) -> QueueMapper:
        """The mapper placing the streams of one key in ``namespaces`` on one queue, as
        ``co_partitioned=`` would have: only before the provider starts (streams already
        placed must not move under a running worker)."""
        listed = ", ".join(repr(n) for n in namespaces)
        if self.running:
            raise ConfigurationError(
                f"implicit({listed}) activates one instance per key, so the streams of one key "
                f"must share a queue: register it before the provider starts, or create the provider "
                f"with co_partitioned=[({listed})]"
            )
        return co_partition(self.mapper, namespaces)

    def consumer(self, name: str | None = None) -> Callable[[T], T]:
        """Register a consumer type for durable explicit subscriptions
        (``await stream.subscribe(MyConsumer)``); ``name`` defaults to module.qualname."""
        return consumer_decorator(self.registry, name)

    # -- streams -----------------------------------------------------------------------
    def get_stream(self, stream_id: StreamId) -> Stream:
        if not isinstance(stream_id, StreamId):
            raise TypeError(f"get_stream takes a StreamId, not {type(stream_id).__name__}")
        return Stream(self, stream_id)

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._adapter is not None

    @property
    def is_worker(self) -> bool:
        return self._manager is not None

    async def __aenter__(self) -> StreamProvider:
        await self._start(worker=True)
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        stack, self._stack = self._stack, None
        if exc_info[1] is not None:
            self._failing = True
        try:
            assert stack is not None
            return await stack.__aexit__(*exc_info)  # type: ignore[arg-type]
        finally:
            self._adapter = None
            self._manager = None
            self._publisher = None

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[StreamProvider]:
        """Open the provider to publish only, with no pulling agents."""
        await self._start(worker=False)
        failing = True
        try:
            yield self
            failing = False
        finally:
            self._failing = failing  # the block's own error is the one to see
            await self.__aexit__(None, None, None)

    async def _start(self, *, worker: bool) -> None:
        if self._stack is not None:
            raise ConfigurationError("this provider is already running")
        stack = contextlib.AsyncExitStack()
        self._failing = False
        await stack.__aenter__()
        try:
            adapter = await self.factory.create_adapter()
            stack.push_async_callback(adapter.close)
            # What the publisher could not write, raised once all else has closed (from
            # within a task group's exit it would come wrapped in an exception group).
            unwritten: list[PublishError] = []
            stack.push_async_callback(self._report_unwritten, unwritten)
            if worker:
                tg = await stack.enter_async_context(anyio.create_task_group())
                context = AgentContext(
                    self.options,
                    self.registry,
                    self.pubsub,
                    self.dead_letters,
                    self.failure_handler,
                    await open_handoff_sinks(self.backend, self.registry.types(), stack),
                    worker_name=self.worker_name,
                    clock=self.clock,
                )
                manager = AgentManager(adapter, context, self._new_cache, self._worker_balancer())
                stack.push_async_callback(manager.stop)  # agents first, then the leases
                self._adapter, self._manager = adapter, manager
                if not adapter.is_rewindable and self.options.slow_consumer_timeout is not None:
                    log.info(
                        "%s queues cannot be re-read: slow_consumer_timeout does not apply, and a "
                        "stalled consumer holds up its queue's other streams until it resumes",
                        adapter.name,
                    )
                await manager.start(tg, self.worker_name, self.mapper.get_all_queues())
                if isinstance(self.pubsub, FollowedPubSubStore):  # others subscribe elsewhere
                    following = anyio.CancelScope()
                    tg.start_soon(self._follow_subscriptions, self.pubsub, following)
                    stack.callback(following.cancel)
            self._adapter = adapter
            # Leaving the provider flushes the publisher first, before the agents stop.
            self._publisher = await start_publisher(
                stack,
                adapter,
                self.mapper,
                {} if self._manager is None else self._manager.readers,
                unwritten,
                self.clock,
                self.options.max_event_size,
            )
        except BaseException:
            self._adapter = self._manager = self._publisher = None
            await stack.aclose()
            raise
        self._stack = stack

    async def _follow_subscriptions(self, pubsub: FollowedPubSubStore, scope: anyio.CancelScope) -> None:
        with scope:
            await pubsub.follow(self.subscriptions.changed)

    async def _report_unwritten(self, unwritten: list[PublishError]) -> None:
        """Raise what the publisher could not write; when the block is leaving with an
        error of its own, that is the one to see, and this one is logged."""
        if unwritten and not self._failing:
            raise unwritten[0]
        if unwritten:
            log.error("leaving the provider: %s", unwritten[0])

    async def flush(self) -> None:
        """Return once every event sent so far (``stream.send``) is durable; raise
        :class:`~streams.core.errors.PublishError` with how many sent since the last flush were
        not, and why. Leaving the provider (or its ``client()``) flushes too.

        >>> async def publish(provider):
        ...     for n in range(10_000):
        ...         await provider.get_stream(StreamId("sensors", f"s-{n % 100}")).send(n)
        ...     await provider.flush()
        """
        await self._require_publisher("flush()").flush()

    def _worker_balancer(self) -> QueueBalancer | None:
        if self.balancer is not None:
            return self.balancer
        return self.backend.queue_balancer(self.balancer_options)  # a fresh one per run

    def _new_cache(self, queue: QueueId) -> QueueCache:
        return SimpleQueueCache(self.options.cache_size, self.options.cache_buckets, self.options.cache_max_bytes)

    async def drain(self) -> None:
        """Wait until this worker has read its queues to the end and every consumer has
        finished everything read (a test and quickstart convenience; bound it with
        ``anyio.fail_after``)."""
        if self._manager is None:
            raise ProviderClosedError("drain() needs a running worker: use `async with provider:`")
        await self._manager.drain()

    @property
    def agents(self) -> list[PullingAgent]:
        return self._manager.agents if self._manager else []

    # -- the stream handles' plumbing ----------------------------------------------------
    def require_running(self, what: str) -> QueueAdapter:
        """The running provider's adapter; a clear error when it is not running."""
        if self._adapter is None:
            raise ProviderClosedError(
                f"{what} needs a running provider: use `async with provider:` (a worker) "
                "or `async with provider.client():` (publish only)"
            )
        return self._adapter

    def _require_publisher(self, what: str = "publishing") -> Publisher:
        if self._publisher is None:
            self.require_running(what)
            raise ProviderClosedError(f"{what}: the provider is closing")
        return self._publisher

    def local_agent(self, stream_id: StreamId) -> PullingAgent | None:
        """The agent here that reads ``stream_id``'s queue (None: another worker's, or none)."""
        if self._manager is None:
            return None
        return self._manager.readers.get(self.mapper.get_queue_for_stream(stream_id))
