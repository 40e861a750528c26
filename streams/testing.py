"""Testing consumers: a worker on memory queues whose processing clock the test moves.

:class:`Harness` runs your consumer types in the same runtime a ``headrace worker`` runs
(pulling agents, queue caches, activations, the event-time core, dead letters, handoff
appends); only the queues are in memory and the processing clock is a
:class:`~streams.core.clock.ManualClock` that moves when the test says so. Nothing sleeps, and
the same test gives the same result on every run, under pytest-asyncio or ``anyio.run``.

- ``await harness.publish(stream, *values, at=t)``: the values arrive at processing time ``t``
  (the clock moves there first; never back), then the worker reads them and its activations
  tick at ``t``: they arrive before any timeout that falls due at ``t``, as the event-time
  contract says.
- ``await harness.advance(seconds)``: time passes with nothing arriving: the activations
  whose tick is due (late arrival on a silent stream, idle timeouts) tick.
- What a consumer type produced: :meth:`~Harness.windows` (what ``on_window`` got),
  :meth:`~Harness.emitted` (what any ``on_*`` hook got), :meth:`~Harness.handed_off` (the
  rows a Spark handoff stream received), :meth:`~Harness.dead_letters` (with their reasons),
  :meth:`~Harness.watermarks`, :meth:`~Harness.instances` (the live activations) and
  :meth:`~Harness.saved` (a stream's saved state, live or not). A consumer's timers read the
  harness's clock: ``self.timers.now()``.

>>> import anyio
>>> from streams import StreamProvider
>>> from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
>>> app = StreamProvider.memory(queues=4)
>>> @app.implicit("sensors")
... class Counts:
...     event_time = EventTime(OrderingPolicy(timestamp_by="ts", late_arrival=5), Tumbling(10), Count())
...     def __init__(self, stream_id): ...
...     def on_window(self, result): ...
>>> async def check():
...     async with Harness(app) as harness:
...         await harness.publish("sensors/s-1", {"ts": 1}, {"ts": 4}, at=5)
...         await harness.advance(20)  # silent since: late arrival moves the watermark
...         return [(w.start, w.value) for w in harness.windows(Counts)], harness.watermarks(Counts)
>>> anyio.run(check)
([(0.0, 2)], {StreamId('sensors', 's-1'): 20.0})
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import spark_sink
from streams.backends.memory.adapter import MemoryAdapterFactory
from streams.backends.memory.backend import MemoryBackend
from streams.backends.memory.handoff_sink import MemoryHandoffSink
from streams.backends.memory.stores import MemoryDeadLetterStore
from streams.core.clock import ManualClock
from streams.core.deadletters import DeadLetter
from streams.core.errors import ConfigurationError
from streams.core.ids import StreamId
from streams.core.options import StreamProviderOptions
from streams.core.state import timers_of, unpack_unit
from streams.eventtime.results import WindowResult
from streams.runtime.provider import StreamProvider
from streams.runtime.stream import Instant, Stream, StreamSubscriptionHandle

__all__ = ["Emission", "Harness"]

T = TypeVar("T", bound=type)

# The agents' own timer never ticks in a test (the harness ticks at each step), and a batch
# whose delivery fails is dead-lettered at once rather than redelivered with real back-off.
_TEST_OPTIONS: dict[str, object] = {
    "get_queue_msgs_timer_period": 3600.0,
    "delivery_retry_backoff": StreamProviderOptions.max_event_delivery_time,
}


@dataclass(frozen=True, slots=True)
class Emission:
    """One call of a consumer's hook: its activation's stream, the hook and its argument
    (a tuple when it took several)."""

    stream_id: StreamId
    hook: str
    value: object


class _TestBackend(MemoryBackend):
    """Memory queues whose Spark handoff streams are kept in memory, for inspection."""

    def __init__(self, queues: int) -> None:
        self.adapters = MemoryAdapterFactory(queues, keep_states=True)
        super().__init__(self.adapters)
        self.handoff_sinks: dict[str, MemoryHandoffSink] = {}

    async def open_handoff_sink(
        self, owner: str, handoff: spark_sink.Handoff | spark_sink.EventHandoff
    ) -> spark_sink.HandoffSink:
        sink = self.handoff_sinks.get(handoff.stream)
        if sink is None:  # one per handoff stream for the harness's life: restarts append to it
            sink = self.handoff_sinks[handoff.stream] = MemoryHandoffSink(handoff)
        return sink


class Harness:
    """A worker for tests: memory queues, a processing clock the test moves, and what each
    consumer type produced.

    ``app``: a provider whose consumer types to run (its ``@provider.implicit`` and
    ``@provider.consumer()`` registrations are copied; the provider itself is not started),
    or register types on the harness with :meth:`implicit` and :meth:`consumer`. ``queues``
    (1 by default) and ``co_partitioned`` are the memory queues'; ``start`` is the clock's
    first reading (POSIX seconds); other keywords are provider options.
    """

    __test__ = False  # not a pytest test class, though a test module imports it

    def __init__(
        self,
        app: StreamProvider | None = None,
        *,
        queues: int = 1,
        start: float = 0.0,
        co_partitioned: Sequence[Sequence[str]] = (),
        **options: Any,
    ) -> None:
        self.clock = ManualClock(start)
        self._backend = _TestBackend(queues)
        self._dead_letters = MemoryDeadLetterStore()
        self.provider = StreamProvider(
            self._backend,
            dead_letters=self._dead_letters,
            co_partitioned=co_partitioned,
            clock=self.clock,
            worker_name="harness",
            **{**_TEST_OPTIONS, **options},
        )
        self._emissions: list[tuple[type, Emission]] = []
        self._recorders: dict[type, type] = {}  # the user's type -> the recording one run here
        if app is not None:
            self._copy(app)

    # -- registering ---------------------------------------------------------------
    def implicit(self, namespace: str, *more: str) -> Callable[[T], T]:
        """Run ``cls`` as ``@provider.implicit(namespace, ...)`` would (returns ``cls``)."""

        def decorate(cls: T) -> T:
            self.provider.implicit(namespace, *more)(self._recording(cls))
            return cls

        return decorate

    def consumer(self, name: str | None = None) -> Callable[[T], T]:
        """Register ``cls`` for durable subscriptions, as ``@provider.consumer()`` would."""

        def decorate(cls: T) -> T:
            self.provider.consumer(name or f"{cls.__module__}.{cls.__qualname__}")(self._recording(cls))
            return cls

        return decorate

    def _copy(self, app: StreamProvider) -> None:
        registry = app.registry
        keyed_done: set[type] = set()
        for namespace in registry.implicit_namespaces():
            for cls in registry.implicit_types(namespace):
                namespaces = registry.namespaces_of(cls)
                if not namespaces:
                    self.implicit(namespace)(cls)
                elif cls not in keyed_done:
                    keyed_done.add(cls)
                    self.implicit(*namespaces)(cls)
        for cls in registry.types():
            if cls not in self._recorders:
                self.consumer(registry.type_name(cls))(cls)

    def _recording(self, cls: type) -> type:
        """A subclass of ``cls`` that records each call of its ``on_*`` hooks (but
        ``on_next``, its input) and then calls the user's, sync or async as written."""
        if cls in self._recorders:
            return self._recorders[cls]
        streams: dict[int, StreamId] = {}  # id(instance) -> its stream (works with __slots__)
        emissions = self._emissions
        original_init: Callable[..., None] = cls.__init__  # type: ignore[misc]  # the type's own, called as such

        def __init__(self: object, stream_id: StreamId, *args: Any, **kwargs: Any) -> None:
            streams[id(self)] = stream_id
            original_init(self, stream_id, *args, **kwargs)

        namespace: dict[str, object] = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "__init__": __init__,
        }
        if "__slots__" in cls.__dict__:
            namespace["__slots__"] = ()
        for name in dir(cls):
            hook = getattr(cls, name, None)
            # Methods only: a static method or an instance's own attribute is left as it is.
            if name.startswith("on_") and name != "on_next" and inspect.isfunction(inspect.getattr_static(cls, name)):
                assert hook is not None
                namespace[name] = _recorder(cls, name, hook, streams, emissions)
        recorder = type(cls.__name__, (cls,), namespace)
        self._recorders[cls] = recorder
        return recorder

    # -- running -------------------------------------------------------------------
    async def __aenter__(self) -> Harness:
        await self.provider.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        body = exc_info[1]
        try:
            return await self.provider.__aexit__(*exc_info)
        except BaseExceptionGroup as group:
            # The worker's task group wraps the block's own error (a failed assert): a test
            # reads better with the error itself.
            if isinstance(body, BaseException) and _only(group, body):
                raise body from None
            raise

    @property
    def now(self) -> float:
        """The processing clock's time."""
        return self.clock.now()

    def stream(self, stream: StreamId | str) -> Stream:
        """The stream ``namespace/key`` (or a :class:`StreamId`) to publish to directly (call
        :meth:`settle` after, to have the worker take it); subscribe with :meth:`subscribe`."""
        return self.provider.get_stream(_stream_id(stream))

    async def subscribe(self, stream: StreamId | str, observer: object) -> StreamSubscriptionHandle:
        """Subscribe ``observer`` to ``stream``: an observer or callable in this process, or a
        consumer type registered with :meth:`consumer` (a durable subscription, as
        ``stream.subscribe(MyConsumer)`` makes; its hooks are recorded like the others)."""
        if isinstance(observer, type) and observer in self._recorders:
            observer = self._recorders[observer]
        return await self.stream(stream).subscribe(observer)

    async def publish(
        self,
        stream: StreamId | str,
        *values: object,
        at: float | None = None,
        event_times: Sequence[Instant] | None = None,
    ) -> None:
        """Publish ``values`` to ``stream`` as one batch arriving at ``at`` (the clock moves
        there first; by default now), then :meth:`settle`."""
        if at is not None:
            self._move_to(at)
        await self.stream(stream).on_next_batch(list(values), event_times=event_times)
        await self.settle()

    async def complete(self, stream: StreamId | str, *, at: float | None = None) -> None:
        """Complete ``stream`` (its open windows close), then :meth:`settle`."""
        if at is not None:
            self._move_to(at)
        await self.stream(stream).on_completed()
        await self.settle()

    async def restart(self) -> None:
        """Stop the worker and start a new one, as a restart of ``headrace worker`` would:
        what was published is taken first, the activations' durable fields, timers and
        windows are saved as at a checkpoint, and the new worker's activations (new
        instances) restore them before their streams' next events. A test proves with it
        that its consumer survives a restart::

            await harness.publish("orders/ann", {"total": 10}, {"total": 20})
            await harness.restart()
            await harness.publish("orders/ann", {"total": 5})
            assert harness.instances(ThirdOrderAlert)[StreamId("orders", "ann")].orders == 3
        """
        await self.settle()
        await self.provider.__aexit__(None, None, None)
        await self.provider.__aenter__()

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` of processing time pass with nothing arriving, then :meth:`settle`."""
        self._move_to(self.now + seconds)
        await self.settle()

    async def advance_to(self, at: float) -> None:
        """Move the processing clock to ``at`` with nothing arriving, then :meth:`settle`."""
        self._move_to(at)
        await self.settle()

    async def settle(self) -> None:
        """Let the worker read everything published, deliver it, tick every activation
        whose tick is due at the clock's time, and deliver what the ticks released."""
        await self.provider.drain()
        for agent in self.provider.agents:
            await agent.tick_due()
        await self.provider.drain()

    def _move_to(self, at: float) -> None:
        if at < self.now:
            raise ValueError(f"the processing clock never goes back: it is at {self.now}, not {at}")
        self.clock.advance(at - self.now)

    # -- what the consumers produced -------------------------------------------------
    def emitted(self, cls: type, hook: str, stream: StreamId | str | None = None) -> list[Emission]:
        """Every call of ``cls``'s ``hook`` (``"on_window"``, ``"on_events"``,
        ``"on_watermark"``, ``"on_error"``, ``"on_completed"``, or a hook of your own) so
        far, in order; only those of ``stream``'s activation when it is given."""
        if self._recorders.get(cls) is None:
            raise ConfigurationError(f"{cls.__qualname__} is not a consumer type this harness runs")
        wanted = None if stream is None else _stream_id(stream)
        return [
            e
            for owner, e in self._emissions
            if owner is cls and e.hook == hook and (wanted is None or e.stream_id == wanted)
        ]

    def windows(self, cls: type, stream: StreamId | str | None = None) -> list[WindowResult]:
        """The windows ``cls``'s activations were given (``on_window``), in order."""
        return [e.value for e in self.emitted(cls, "on_window", stream) if isinstance(e.value, WindowResult)]

    def handed_off(self, handoff: str) -> list[dict[str, Any]]:
        """The rows handoff stream ``handoff`` received, as Spark reads them."""
        sink = self._backend.handoff_sinks.get(handoff)
        if sink is None:
            raise ConfigurationError(
                f"no consumer type here hands off to {handoff!r}; handoff streams: {sorted(self._backend.handoff_sinks)}"
            )
        return list(sink.rows)

    def dead_letters(self, reason: str | None = None, stream: StreamId | str | None = None) -> list[DeadLetter]:
        """The dead letters so far (each with its ``reason`` and ``detail``), in order."""
        name = None if stream is None else str(_stream_id(stream))
        return [
            x
            for x in self._dead_letters.letters
            if (reason is None or x.reason == reason) and (name is None or x.stream == name)
        ]

    def watermarks(self, cls: type) -> dict[StreamId, float]:
        """The watermark of each live event-time activation of ``cls``, by its stream."""
        recorder = self._recorders.get(cls)
        return {
            activation.stream_id: activation.processor.watermark
            for agent in self.provider.agents
            for activation in agent.event_time_activations()
            if recorder is not None and type(activation.target) is recorder
        }

    def saved(self, cls: type, stream: StreamId | str) -> object | None:
        """What ``stream``'s activation of ``cls`` would start from now: a new instance with
        the durable fields and timers last saved (at a checkpoint, or by :meth:`restart`),
        or None if none are. After a restart, before the stream's next event, its
        activation is not live (:meth:`instances` has none) but its state is here::

            await harness.publish("orders/ann", {"total": 10}, {"total": 20})
            await harness.restart()
            assert harness.saved(ThirdOrderAlert, "orders/ann").orders == 2
        """
        recorder = self._recorders.get(cls)
        if recorder is None:
            raise ConfigurationError(f"{cls.__qualname__} is not a consumer type this harness runs")
        sid = _stream_id(stream)
        queue = self.provider.mapper.get_queue_for_stream(sid)
        name = self.provider.registry.type_name(recorder) or cls.__qualname__
        found = self._backend.adapters.adapter.saved_states(queue).get((name, str(sid)))
        if found is None:
            return None
        instance: object = cls(sid)
        timers = timers_of(instance)
        if timers is not None:
            timers.clock = self.clock
        unpack_unit(instance, found[1], timers)
        return instance

    def instances(self, cls: type) -> dict[StreamId, object]:
        """The live activations of ``cls`` (its instances), by stream: to look at their state
        (after a restart, :meth:`saved` has those not activated again yet)."""
        recorder = self._recorders.get(cls)
        found: dict[StreamId, object] = {}
        for agent in self.provider.agents:
            for sid in agent.stream_ids():
                for consumer in agent.consumers(sid):
                    target = consumer.observer.target
                    if recorder is not None and type(target) is recorder:
                        found[sid] = target
        return found


def _recorder(
    cls: type, name: str, hook: Callable[..., Any], streams: dict[int, StreamId], emissions: list[tuple[type, Emission]]
) -> Callable[..., Any]:
    def record(self: object, args: tuple[Any, ...]) -> None:
        value = args[0] if len(args) == 1 else args
        emissions.append((cls, Emission(streams[id(self)], name, value)))

    if inspect.iscoroutinefunction(hook):

        async def recorded_async(self: object, *args: Any) -> Any:
            record(self, args)
            return await hook(self, *args)

        return recorded_async

    def recorded(self: object, *args: Any) -> Any:
        record(self, args)
        return hook(self, *args)

    return recorded


def _only(group: BaseExceptionGroup[BaseException], error: BaseException) -> bool:
    """Whether every leaf of ``group`` is ``error``."""
    return all(_only(e, error) if isinstance(e, BaseExceptionGroup) else e is error for e in group.exceptions)


def _stream_id(stream: StreamId | str) -> StreamId:
    if isinstance(stream, StreamId):
        return stream
    namespace, slash, key = stream.partition("/")
    if not slash or not namespace:
        raise ValueError(f"a stream is 'namespace/key' or a StreamId, not {stream!r}")
    return StreamId(namespace, key)
