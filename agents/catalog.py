"""The activations and consumers of one queue's streams (Orleans' ``Catalog``): attached when
a stream becomes active, ended when it is closed, with their event-time state restored from
what the queue's store saved.

A stream's consumer types each get one activation (one per key for a type fed by several
namespaces, :mod:`agents.keyed`): the user's instance, delivered to through the one wrapper
its shape needs, an :class:`~agents.event_time_observer.EventTimeObserver` for an event-time type (which
hands off to Spark when the type declares a handoff), else
:func:`~streams.core.observer.as_observer`'s. Its ``on_activate`` and ``on_deactivate``
hooks, if it has them, run in tasks of their own with the stream's log context.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from functools import partial
from typing import Any, Literal, Protocol, TypedDict, TypeVarTuple, Unpack

import anyio

from agents.activation import Activation, PendingActivation, TimedActivation
from agents.checkpoint import ActivationStates, KeyedMinHeap, StateKey
from agents.context import AgentContext
from agents.counters import FateCounts
from agents.cursors import Cursors
from agents.delivery import ConsumerKind, StreamConsumer
from agents.durable import DurableActivation
from agents.event_time_observer import EventTimeObserver, declared_event_time
from agents.first_contact import ConsumerTypes, FirstContact, TypeFacts
from agents.handoff_writes import HandoffTarget
from agents.hook_calls import HookLimits
from agents.keyed import KeyedActivations
from agents.merged_inputs import InputView
from streams.adapters.protocols import StateLookup
from streams.core.deadletters import QueueDeadLetters
from streams.core.errors import CacheMissError
from streams.core.ids import QueueId, SequenceToken, StreamId
from streams.core.logcontext import LOG_CONTEXT, DeliveryFields
from streams.core.observer import EventFilter, as_observer
from streams.core.pubsub import SubscriptionRecord, SubscriptionState
from streams.core.state import StateError, TimerTable, next_processing_timer, state_ttl, timers_of
from streams.eventtime.lateness import LatenessSketches, ObservedTimes

log = logging.getLogger("headrace.agent")

Ts = TypeVarTuple("Ts")


class Spawn(Protocol):
    """Starts a task in the agent's task group (as ``TaskGroup.start_soon`` does)."""

    def __call__(self, fn: Callable[[*Ts], Coroutine[Any, Any, object]], /, *args: *Ts) -> None: ...


class StreamState(DeliveryFields):
    """What the agent knows of one active stream: its consumers (by subscription id) and
    the activations they deliver to (by consumer type).

    A worker holds one per active stream, most with one consumer and one activation: those
    are kept in slots, and a dict is made only for a second (a dict of one entry was over
    200 bytes a stream, and one more object for the collector to walk). It is also the log
    context of the stream's deliveries (``worker``, ``queue``, ``stream``, read as a
    mapping), set as :data:`~streams.core.logcontext.LOG_CONTEXT` around them: one object a
    stream, not a second one of 64 bytes for its fields.
    """

    __slots__ = ("_consumers", "_activation_type", "_activations", "last_activity", "opening")

    def __init__(self, worker: str | None, queue: QueueId, stream: StreamId) -> None:
        super().__init__(worker, queue, stream)
        self._consumers: StreamConsumer | dict[str, StreamConsumer] | None = None
        # consumer type -> what is delivered to: the one (its type in _activation_type), or a dict
        self._activation_type: type | None = None
        self._activations: Activation | dict[type, Activation] | None = None
        self.last_activity = time.monotonic()
        # None once every consumer is attached: a plain attribute test on the hot path. An
        # event is made only for a batch that has to wait (True: opening, nobody waits).
        self.opening: anyio.Event | Literal[True] | None = True

    # A stream's state is itself, not the fields it logs with (which a Mapping compares).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    async def opened(self) -> None:
        """Return once every consumer is attached."""
        opening = self.opening
        if opening is None:
            return
        if opening is True:
            opening = self.opening = anyio.Event()
        await opening.wait()

    def open(self) -> None:
        """Every consumer is attached: let what waits for it go on."""
        opening, self.opening = self.opening, None
        assert opening is not None, "opened twice"
        if opening is not True:
            opening.set()

    @property
    def consumers(self) -> tuple[StreamConsumer, ...]:
        """Its consumers, in the order they were attached."""
        consumers = self._consumers
        if consumers is None:
            return ()
        if isinstance(consumers, dict):
            return tuple(consumers.values())
        return (consumers,)

    def consumer(self, subscription_id: str) -> StreamConsumer | None:
        consumers = self._consumers
        if isinstance(consumers, dict):
            return consumers.get(subscription_id)
        return consumers if consumers is not None and consumers.subscription_id == subscription_id else None

    def add_consumer(self, consumer: StreamConsumer) -> None:
        """Attach ``consumer`` (in place of one of the same subscription id, if any)."""
        consumers = self._consumers
        if consumers is None or (
            not isinstance(consumers, dict) and consumers.subscription_id == consumer.subscription_id
        ):
            self._consumers = consumer
            return
        if not isinstance(consumers, dict):
            consumers = self._consumers = {consumers.subscription_id: consumers}
        consumers[consumer.subscription_id] = consumer

    def remove_consumer(self, subscription_id: str) -> StreamConsumer | None:
        """Detach the consumer of ``subscription_id``; it, or None if there was none."""
        consumers = self._consumers
        if isinstance(consumers, dict):
            return consumers.pop(subscription_id, None)
        if consumers is not None and consumers.subscription_id == subscription_id:
            self._consumers = None
            return consumers
        return None

    @property
    def activations(self) -> list[tuple[type, Activation]]:
        """``(consumer type, activation)`` of each activation, in the order they were made."""
        activations = self._activations
        if isinstance(activations, dict):
            return list(activations.items())
        if activations is None or self._activation_type is None:
            return []
        return [(self._activation_type, activations)]

    def activation_of(self, cls: type) -> Activation | None:
        activations = self._activations
        if isinstance(activations, dict):
            return activations.get(cls)
        return activations if cls is self._activation_type else None

    def set_activation(self, cls: type, activation: Activation) -> None:
        activations = self._activations
        if activations is None or cls is self._activation_type:
            self._activation_type, self._activations = cls, activation
            return
        if not isinstance(activations, dict):
            assert self._activation_type is not None
            activations = self._activations = {self._activation_type: activations}
            self._activation_type = None
        activations[cls] = activation


_TIMED = (EventTimeObserver, DurableActivation)  # a tuple made once, not a union a call


def timed_of(activation: Activation) -> EventTimeObserver | DurableActivation | None:
    """The activation a consumer delivers to that its agent ticks and whose state holds the
    checkpoint (an event-time one, or one with durable state), directly or as one of its
    inputs."""
    if isinstance(activation, PendingActivation):
        if activation.built is None:
            return None
        activation = activation.built
    if isinstance(activation, _TIMED):
        return activation
    if isinstance(activation, InputView) and isinstance(activation.activation, _TIMED):
        return activation.activation
    return None


class ConsumerOptions(TypedDict, total=False):
    """How a consumer is attached: ``durable`` (an explicit durable subscription's),
    ``implicit`` (an implicit subscription's), ``event_filter`` (an in-process observer's
    filter), ``of_type`` (the consumer type of its activation, for its events-out tally)."""

    durable: bool
    implicit: bool
    event_filter: EventFilter | None
    of_type: type | None


class StreamConsumers:
    """Attaches the consumers of one queue's streams, each on a cursor of its own: every
    consumer of a stream as it becomes active (its implicit activations, the in-process
    observers, the durable subscriptions), and a subscription made while it is."""

    __slots__ = ("_context", "_registry", "_cursors", "_working", "_spawn", "_types", "_first", "_activation", "_kinds")

    def __init__(
        self,
        context: AgentContext,
        cursors: Cursors,
        working: dict[StreamConsumer, anyio.CancelScope | None],
        spawn: Spawn,
        types: ConsumerTypes,
        first: FirstContact,
        activation: Callable[[StreamState, StreamId, type], Activation],
    ) -> None:
        self._context = context
        self._registry = context.registry
        self._cursors = cursors
        self._working = working  # the consumers with a task now (the agent's watchdog looks at these)
        self._spawn = spawn
        self._types = types
        self._first = first  # the subscriptions of the read's new streams, read together
        self._activation = activation  # the activation of a stream and consumer type (made once)
        # (consumer type, durable, implicit) -> what its consumers share, made once
        self._kinds: dict[tuple[type | None, bool, bool], ConsumerKind] = {}

    async def attach_all(self, state: StreamState, sid: StreamId, skip: str | None) -> None:
        """Attach every consumer of the newly active stream ``sid`` (but ``skip``, which the
        caller attaches from its own token): the implicit activations of its namespace, the
        in-process observers and the durable subscriptions."""
        try:
            self._attach_local(state, sid, skip)
            records = self._first.subscriptions.pop(sid, None)
            if records is None:
                records = await self._context.pubsub.subscriptions(sid)
            self._attach_durable(state, sid, skip, records)
        finally:
            state.open()

    def attach_all_now(self, state: StreamState, sid: StreamId, skip: str | None) -> bool:
        """:meth:`attach_all` without waiting, for a new stream of the read being taken in
        (``Catalog.first_contact``: its subscriptions read already); whether it was one
        (else nothing is done): a fleet's first contact awaits nothing a stream."""
        records = self._first.subscriptions.pop(sid, None)
        if records is None:
            return False
        try:
            self._attach_local(state, sid, skip)
            self._attach_durable(state, sid, skip, records)
        finally:
            state.open()
        return True

    def open_new(self, streams: dict[StreamId, StreamState], sids: Iterable[StreamId]) -> None:
        """Open, in ``streams``, the new streams among ``sids`` whose subscriptions the read
        brought, all in one pass (:meth:`attach_new`); the others are left to be opened one by one."""
        worker, queue = self._context.worker_name, self._cursors.queue
        fresh = [StreamState(worker, queue, sid) for sid in sids if sid not in streams]
        for state in fresh:
            streams[state.stream] = state
        try:
            alone = self.attach_new(fresh)
        except BaseException:  # (a durable subscription of a type not registered): as one by one,
            for state in fresh:  # the streams after the one that raised are not opened
                if state.opening is not None:
                    del streams[state.stream]
            raise
        for state in alone:  # not read together: opened alone
            del streams[state.stream]

    def attach_new(self, states: list[StreamState]) -> list[StreamState]:
        """:meth:`attach_all_now` for the new streams of one slice of a read, in one pass:
        what they share (their namespace's implicit types, each one's subscription id and
        consumer kind) is asked once a namespace, not once a stream. The states whose
        subscriptions were not read together are returned, untouched, to be attached alone."""
        subscriptions = self._first.subscriptions
        plans: dict[str, list[tuple[type, str, ConsumerKind]]] = {}
        alone: list[StreamState] = []
        for state in states:
            sid = state.stream
            records = subscriptions.pop(sid, None)
            if records is None:
                alone.append(state)
                continue
            plan = plans.get(sid.namespace)
            if plan is None:
                plan = plans[sid.namespace] = self._plan(sid.namespace)
            try:
                for cls, subscription_id, kind in plan:
                    self._attach_new(state, subscription_id, self._activation(state, sid, cls), kind)
                self._attach_observers(state, sid, None)
                if records:
                    self._attach_durable(state, sid, None, records)
            finally:
                state.open()
        return alone

    def _plan(self, namespace: str) -> list[tuple[type, str, ConsumerKind]]:
        """``(type, subscription id, consumer kind)`` of each implicit type of ``namespace``."""
        types = self._types
        return [
            (cls, types.of(cls).subscription_id, self._kind(cls, False, True))
            for cls in self._registry.implicit_types(namespace)
        ]

    def _attach_new(self, state: StreamState, subscription_id: str, observer: Activation, kind: ConsumerKind) -> None:
        """An implicit consumer of a new stream, from its next data (:meth:`add`'s case that
        no cache misses)."""
        consumer = StreamConsumer(
            subscription_id, observer, self._cursors.cache.create_cursor(state.stream, None), kind, log_fields=state
        )
        state.add_consumer(consumer)
        consumer.start()

    def _attach_local(self, state: StreamState, sid: StreamId, skip: str | None) -> None:
        registry = self._registry
        for cls in registry.implicit_types(sid.namespace):
            activation = self._activation(state, sid, cls)
            self.add(state, sid, self._types.of(cls).subscription_id, activation, implicit=True, of_type=cls)
        self._attach_observers(state, sid, skip)

    def _attach_observers(self, state: StreamState, sid: StreamId, skip: str | None) -> None:
        for sub in self._registry.observers(sid):
            if sub.subscription_id != skip:
                self.add(state, sid, sub.subscription_id, as_observer(sub.observer), event_filter=sub.filter)

    def _attach_durable(
        self, state: StreamState, sid: StreamId, skip: str | None, records: Iterable[SubscriptionRecord]
    ) -> None:
        for record in records:
            if record.state is SubscriptionState.ACTIVE and record.subscription_id != skip:
                cls = self._registry.get_type(record.consumer_type)
                activation = self._activation(state, sid, cls)
                self.add(state, sid, record.subscription_id, activation, durable=True, of_type=cls)

    async def start(self, consumer: StreamConsumer, miss: CacheMissError | None) -> None:
        """Start ``consumer``, made by :meth:`add` with ``start=False``, reporting ``miss`` (its
        token's position, which the cache no longer has) to it first."""
        if miss is not None:
            await consumer.report_error(miss)
        consumer.start()

    def add(
        self,
        state: StreamState,
        sid: StreamId,
        subscription_id: str,
        observer: Activation,
        token: SequenceToken | None = None,
        *,
        start: bool = True,
        **options: Unpack[ConsumerOptions],
    ) -> tuple[StreamConsumer, CacheMissError | None]:
        """A consumer of ``sid`` delivering to ``observer`` from ``token`` (None: from the
        stream's next data, which no cache misses), attached, and started unless told not to;
        and the miss to report when the cache no longer has ``token``'s position."""
        cursor, miss = self._cursors.open(sid, token)
        consumer = StreamConsumer(
            subscription_id,
            observer,
            cursor,
            self._kind(options.get("of_type"), options.get("durable", False), options.get("implicit", False)),
            start_token=None if miss else token,
            log_fields=state,
            event_filter=options.get("event_filter"),
        )
        state.add_consumer(consumer)
        if start:
            consumer.start()
        return consumer, miss

    def _kind(self, of_type: type | None, durable: bool, implicit: bool) -> ConsumerKind:
        key = (of_type, durable, implicit)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = ConsumerKind(
                self._context,
                self._spawn,
                self._working,
                durable=durable,
                implicit=implicit,
                tally=self._types.tally(of_type),
            )
        return kind


class Catalog:
    """Makes and ends the activations of one queue's streams, and attaches their consumers
    (:attr:`consumers`)."""

    def __init__(
        self,
        queue: QueueId,
        context: AgentContext,
        cursors: Cursors,
        working: dict[StreamConsumer, anyio.CancelScope | None],
        spawn: Spawn,
        on_change: Callable[[TimedActivation], None],
    ) -> None:
        self.queue = queue
        self._context = context
        self._dead_letters = QueueDeadLetters(context.dead_letters, queue.number)  # letters name the queue
        self._spawn = spawn
        self._on_change = on_change  # one bound method for every activation
        # Activations of types fed by several namespaces (a batch waits for its turn at most
        # half as long as a delivery may take: it goes out of order before it would time out).
        self.keyed = KeyedActivations(context.options.max_event_delivery_time / 2)
        # Event-time state saved with the checkpoint, where the receiver can (agents.checkpoint).
        self.states: ActivationStates | None = None
        self._saved: dict[StateKey, tuple[SequenceToken, bytes]] = {}
        self._lookup: StateLookup | None = None  # reads one durable state from the store
        # Saved states of types with a time to live, by when (monotonic) their stream was last
        # active: dropped from here and from the store once idle that long (expire).
        self._expiring: dict[StateKey, tuple[float, float]] = {}  # key -> (last active, ttl)
        self.shortest_ttl = math.inf  # of the types activated here: streams idle that long are swept
        self._ttl_noted: set[type] = set()  # the types whose ttl shortest_ttl has seen
        # Saved states not active here whose processing-time timers fall due: their streams
        # are activated then, with no data, so the timers fire (waking).
        self._sleeping: KeyedMinHeap[StateKey] = KeyedMinHeap()
        self.fates = FateCounts()  # of the activations that ended here (headrace status)
        # Observed lateness and disorder per consumer type, sampled by their processors.
        self.times = LatenessSketches(context.options.lateness_sample_every)
        self._limits: dict[type, HookLimits] = {}
        self._types = ConsumerTypes(context.registry, self.fates)  # what each type is, asked once
        self._first = FirstContact(context.registry, self._types, context.pubsub)
        self.consumers = StreamConsumers(context, cursors, working, spawn, self._types, self._first, self.activation)

    def keep_states(
        self, saved: dict[StateKey, tuple[SequenceToken, bytes]], lookup: StateLookup | None = None
    ) -> ActivationStates:
        """The queue's store saves event-time states with its checkpoint: restore these
        (``saved``) as their activations are made, and collect new ones from now on. With a
        ``lookup``, the durable state of a consumer type is read from the store when its
        activation is made (not in ``saved``), and a parked one's is left there."""
        self._saved = saved
        self._lookup = lookup
        self.states = ActivationStates(self.state_key)
        # Every registered type with a time to live, activated here or not: the states a
        # restart left in the store are swept on this queue's timer, with no new event.
        for _, type_ttl in self._registered_ttls():
            self.shortest_ttl = min(self.shortest_ttl, type_ttl)
        now = time.monotonic()  # a restart counts as activity: the store keeps no idle time
        for key, (_, state) in saved.items():
            ttl = self._ttl_of(key[0])
            if ttl is not None:
                self._expiring[key] = (now, ttl)
            try:
                self._sleeping.set(key, next_processing_timer(state))
            except StateError:
                pass  # unreadable: its activation says so when it is made
        return self.states

    def waking(self, now: float) -> list[StreamId]:
        """The streams of saved states, not active here, whose processing-time timers are
        due at ``now`` (processing clock): to activate, so that their timers fire."""
        if not len(self._sleeping):
            return []
        return [StreamId.parse(stream) for _, stream in self._sleeping.pop_until(now)]

    def idle_limit(self, state: StreamState, period: float) -> float:
        """How long ``state``'s stream may stay idle before it is swept: ``period``, or the
        shorter time to live of one of its consumer types' state."""
        limit = period
        for cls, _ in state.activations:
            ttl = state_ttl(cls)
            if ttl is not None and ttl < limit:
                limit = ttl
        return limit

    def _note_ttl(self, cls: type) -> None:
        if cls in self._ttl_noted:  # once per type, not per activation (a few µs each)
            return
        self._ttl_noted.add(cls)
        ttl = state_ttl(cls)
        if ttl is not None and ttl < self.shortest_ttl:
            self.shortest_ttl = ttl

    def _ttl_of(self, consumer: str) -> float | None:
        try:
            cls = self._context.registry.get_type(consumer)
        except Exception:  # a type this app no longer registers: its state is not ours to judge
            return None
        return state_ttl(cls)

    def expiring_types(self) -> list[tuple[str, float]]:
        """``(consumer type name, time to live)`` of the registered types with one, whose
        idle states the store itself drops (a lookup store): activated here or not, as a
        restart leaves states in the store that no event may ever activate again."""
        if self._lookup is None:
            return []
        return self._registered_ttls()

    def _registered_ttls(self) -> list[tuple[str, float]]:
        registry = self._context.registry
        return [
            (name, ttl)
            for cls in registry.types()
            if (ttl := state_ttl(cls)) is not None and (name := registry.type_name(cls)) is not None
        ]

    def expire(self, now: float) -> int:
        """Drop the saved states whose stream has been idle longer than their type's time
        to live (``Durable(ttl=...)`` or ``state_ttl``), here and, with the next checkpoint,
        from the store; how many."""
        if self.states is None or not self._expiring:
            return 0
        gone = [key for key, (active, ttl) in self._expiring.items() if now - active >= ttl]
        for key in gone:
            del self._expiring[key]
            self._sleeping.discard(key)
            if self._saved.pop(key, None) is not None:
                self.states.expire(key)
        if gone:
            log.info("%s: %d idle activation state(s) expired (their time to live passed)", self.queue, len(gone))
        return len(gone)

    def activation(self, state: StreamState, sid: StreamId, cls: type) -> Activation:
        """One instance per stream id and consumer type, like an Orleans grain activation;
        one per key for a type fed by several namespaces (see ``agents.keyed``). A
        constructor that raises leaves a :class:`~agents.activation.PendingActivation`: each
        batch tries to build it again, and what cannot be delivered for want of it is
        retried and dead-lettered ``activation_failed``, as a failed delivery is."""
        observer = state.activation_of(cls)
        if observer is None:
            try:
                observer = self._activate(state, sid, cls)
            except Exception:  # the user's constructor: its batch reports it (retried, logged)
                observer = PendingActivation(partial(self._activate, state, sid, cls), cls.__qualname__)
            state.set_activation(cls, observer)
        return observer

    def _activate(self, state: StreamState, sid: StreamId, cls: type) -> Activation:
        facts = self._types.of(cls)
        instance: object | None
        if facts.namespaces:
            observer, instance = self.keyed.observer_for(cls, sid, facts.namespaces[0], self._make)
        else:
            timed, instance = self._make(cls, sid, facts)
            observer = timed if timed is not None else as_observer(instance)
        if instance is not None and hasattr(instance, "on_activate"):  # a task only if it has one
            self._spawn(call_hook, instance, "on_activate", state)
        return observer

    def first_contact(self, sids: Collection[StreamId]) -> AbstractAsyncContextManager[None]:
        """Activate the new streams ``sids`` of one read within: their subscriptions and
        durable states are read together (:class:`~agents.first_contact.FirstContact`)."""
        if len(sids) < 2:
            return nullcontext()
        return self._first.reading(sids, self._lookup if self.states is not None else None)

    def _durable(
        self, cls: type, sid: StreamId, instance: object, timers: TimerTable | None, facts: TypeFacts
    ) -> DurableActivation:
        """What a plain consumer's instance is delivered to when its type declares durable
        fields or timers (``timers``: its timer table): the adapted instance, wrapped so
        that they are saved."""
        self._note_ttl(cls)
        limits = self._hook_limits(cls)
        durable = DurableActivation(as_observer(instance), sid, self._dead_letters, limits, facts.namespaces, timers)
        durable.on_change = self._on_change
        if self.states is not None and durable.enable_snapshots():
            self._restore(durable, facts)
        return durable

    def _hook_limits(self, cls: type) -> HookLimits:
        limits = self._limits.get(cls)
        if limits is None:  # one per consumer type, not per activation
            options = self._context.options
            name = self._types.of(cls).name
            limits = self._limits[cls] = HookLimits(
                name,
                options.max_event_delivery_time,
                options.delivery_retry_backoff,
                warned=self._context.warned.setdefault(name, set()),
            )
        return limits

    def _make(
        self, cls: type, sid: StreamId, facts: TypeFacts | None = None
    ) -> tuple[EventTimeObserver | DurableActivation | None, object]:
        """``(its event-time or durable activation, or None; the user's instance)`` of a new
        activation (``facts``: its type's, if the caller has them)."""
        instance = cls(sid)
        if facts is None:
            facts = self._types.of(cls)
        stateful = facts.stateful
        timers = timers_of(instance) if stateful else None
        if timers is not None:
            timers.clock = self._context.clock  # what timers.now() reads
        spec = declared_event_time(instance)
        if spec is None:
            return (self._durable(cls, sid, instance, timers, facts) if stateful else None), instance
        limits = self._hook_limits(cls)
        self._note_ttl(cls)
        timed = EventTimeObserver(instance, spec, sid, self._dead_letters, self._handoff_for(cls, sid), limits)
        timed.on_change = self._on_change
        policy = spec.policy
        sketch = self.times.of(
            limits.consumer,  # the type's name as the registry has it, as fates count it
            out_of_order=policy.out_of_order,
            late_arrival=policy.late_arrival,
            substreams=policy.over is not None,
        )
        timed.processor.sample_times(sketch)
        if self.states is not None and timed.enable_snapshots():
            self._restore(timed, facts)
        return timed, instance

    def _handoff_for(self, cls: type, sid: StreamId) -> HandoffTarget | None:
        """Where this consumer type's finalized output goes, if it hands off to Spark."""
        stream = getattr(getattr(cls, "handoff", None), "stream", None)
        sink = self._context.handoff_sinks.get(stream) if isinstance(stream, str) else None
        if sink is None or not isinstance(stream, str):
            return None
        consumer = self._types.of(cls).name
        return HandoffTarget(sink, str(sid), consumer, self.queue.number, stream)

    def fates_by_type(self, live: Iterable[EventTimeObserver]) -> dict[str, dict[str, int]]:
        """The event-time counters per consumer type name: of the activations that ended
        here and of ``live`` ones (the queue's running activations)."""
        return self.fates.by_type((self.state_key(a)[0], a.processor.counters) for a in live)

    def parked_by_type(self) -> dict[str, int]:
        """Activations parked here (their state kept in memory until a stream's next event),
        per consumer type name."""
        parked: dict[str, int] = {}
        for type_name, _ in self._saved:
            parked[type_name] = parked.get(type_name, 0) + 1
        return parked

    def active_by_type(self, live: Iterable[EventTimeObserver]) -> dict[str, int]:
        """The ``live`` event-time activations per consumer type name."""
        active: dict[str, int] = {}
        for activation in live:
            type_name = self.state_key(activation)[0]
            active[type_name] = active.get(type_name, 0) + 1
        return active

    def observed_times(self, now: float) -> dict[str, ObservedTimes]:
        """Per consumer type, the lateness and disorder its events showed here over the hour
        up to ``now`` (arrival-clock seconds), sampled."""
        return self.times.observed(now)

    def state_key(self, activation: TimedActivation) -> StateKey:
        """``(consumer type name, stream id)``: its saved state's key (and its name in ``headrace status``)."""
        return (self._types.of(type(activation.target)).name, str(activation.stream_id))

    def _restore(self, activation: TimedActivation, facts: TypeFacts | None = None) -> None:
        if facts is None:
            facts = self._types.of(type(activation.target))
        key = (facts.name, str(activation.stream_id))  # its state_key
        saved = self._saved.pop(key, None)
        self._expiring.pop(key, None)  # active again
        self._sleeping.discard(key)
        lookup, states = self._lookup, self.states
        if saved is None and lookup is not None and states is not None and facts.stateful:
            if not states.deleting(key):  # a deletion on its way: the row is not its state any more
                first = self._first.states
                saved = first.pop(key) if key in first else lookup.saved_state(key)
        if saved is None:
            return
        self.fates.restored(key)
        try:
            activation.restore(*saved)
        except StateError as exc:  # a state it refuses (an older format): one line saying what to do
            log.error(
                "%s: the saved state of %s on %s is not restored: %s",
                self.queue,
                type(activation.target).__qualname__,
                activation.stream_id,
                exc,
            )
        except Exception:
            log.exception(
                "%s: the saved state of %s on %s cannot be restored",
                self.queue,
                type(activation.target).__qualname__,
                activation.stream_id,
            )

    def close(self, sid: StreamId, state: StreamState, *, stopping: bool) -> list[TimedActivation]:
        """The stream ``sid`` is closed: deactivate the instances whose (last) stream it
        was, and return their event-time activations (they hold and tick no more). Their
        saved states go too, unless the agent is ``stopping`` (then they are kept for the
        queue's next owner) or they still have open windows (parked: kept, and restored
        when the stream has data again)."""
        keyed = self.keyed
        # Activations of several streams whose last this was.
        ended = keyed.leave(sid) if keyed.by_key else []
        gone: list[TimedActivation] = []
        for cls, observer in state.activations:
            timed = timed_of(observer)
            facts = self._types.of(cls)
            if facts.namespaces:  # shared by the streams of a key
                if timed is None or not any(timed.target is e for e in ended):
                    continue
            else:
                ended.append(observer.target)
            if timed is not None:
                self._end(cls, timed, state, facts, stopping=stopping)
                gone.append(timed)
        for instance in ended:
            if hasattr(instance, "on_deactivate"):
                self._spawn(call_hook, instance, "on_deactivate", state)
        return gone

    def _end(self, cls: type, timed: TimedActivation, state: StreamState, facts: TypeFacts, *, stopping: bool) -> None:
        """One event-time activation of a closed stream ends: parked with its state if its
        windows stay open (and the agent is not ``stopping``), else its saved state retired."""
        timed.on_change = None
        parked = None
        if self.states is not None and not stopping:
            if timed.has_state() and timed.can_park():
                # Its windows stay open: the stored row stays, and its state waits
                # here, compact, for the stream's next data (restored in _make);
                # a durable one with a store to look it up in waits only there.
                parked = (facts.name, str(timed.stream_id))  # its state_key
                if self._lookup is None or not facts.stateful:
                    self._saved[parked] = timed.park()
                    ttl = state_ttl(cls)
                    if ttl is not None:
                        self._expiring[parked] = (state.last_activity, ttl)
                if isinstance(timed, DurableActivation):  # parked with a timer: woken for it
                    self._sleeping.set(parked, timed.next_tick())
            else:
                self.states.retire(timed)
        if isinstance(timed, EventTimeObserver):
            self.fates.ended(facts.name, timed.processor.counters, parked)


def event_time_activations(states: Iterable[StreamState]) -> list[EventTimeObserver]:
    """The event-time activations of these streams, each once (one of several inputs is
    found through each of its streams)."""
    found: dict[int, EventTimeObserver] = {}
    for state in states:
        for _, observer in state.activations:
            timed = timed_of(observer)
            if isinstance(timed, EventTimeObserver):
                found[id(timed)] = timed
    return list(found.values())


async def call_hook(instance: object, name: str, log_fields: Mapping[str, Any]) -> None:
    """Call the user's ``on_activate`` or ``on_deactivate`` (sync or async) in a task of its
    own; what it raises is logged, as a consumer's bug."""
    hook = getattr(instance, name, None)
    if hook is None:
        return
    LOG_CONTEXT.set(log_fields)  # its own task: the context goes with it
    try:
        result = hook()
        if hasattr(result, "__await__"):
            await result
    except Exception:
        log.exception("%s of %s raised", name, type(instance).__qualname__)
