"""The pulling agent: one per owned queue (Orleans' ``PersistentStreamPullingAgent``).

On a timer, and at once when a producer in this process wakes it, the agent reads as many
records as its cache has room for, decodes them (dead-lettering what is not a batch
container), activates the consumers of streams it has not seen, adds the batches to the cache
and tells the consumers whose streams got data (those whose ``on_next`` cannot suspend it
delivers to there and then, see ``agents.consumer``). It never overlaps its own reads, backs off
when the queue fails, and acknowledges to the queue only the positions every consumer has
finished with.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup

from cache.protocols import QueueCache
from streams.adapters.embedded_state import StatefulReceiver
from streams.adapters.protocols import QueueAdapterReceiver, RewindableReceiver
from streams.core.batch import BatchContainer, BatchKind, QueueMessage, interned
from streams.core.deadletters import DeadLetter, QueueDeadLetters
from streams.core.errors import CacheMissError, DecodeError
from streams.core.ids import QueueId, StreamId
from streams.core.logcontext import delivery_fields, enter_fields, leave_fields
from streams.core.observer import as_observer
from streams.core.pubsub import SubscriptionRecord, SubscriptionState
from streams.core.tokens import SequenceToken
from streams.registry import InProcessSubscription

from .consumer import StreamConsumer
from .context import AgentContext
from .keyed import KeyedActivations
from .keyed_heap import KeyedMinHeap
from .latency import LatencyHistogram
from .rewind import RewindCursor
from .state import ActivationStates
from .timed import EventTimeDelivery, EventTimeObserver, HandoffTarget, InputView, event_time_of

log = logging.getLogger("headrace.agent")

_ADD_SLICE = 64  # messages decoded, cached and delivered at a time (see _add)


class _StreamState:
    """What the agent knows of one active stream."""

    __slots__ = ("consumers", "activations", "last_activity", "opening", "log_fields")

    def __init__(self, log_fields: Any) -> None:
        self.log_fields = log_fields  # worker, queue, stream: the log context of its deliveries
        self.consumers: dict[str, StreamConsumer] = {}
        self.activations: dict[type, Any] = {}  # consumer type -> the observer delivered to
        self.last_activity = time.monotonic()
        # Set, and dropped, once every consumer is attached: a plain attribute test on the
        # hot path, and no event kept per stream.
        self.opening: anyio.Event | None = anyio.Event()

    async def opened(self) -> None:
        opening = self.opening
        if opening is not None:
            await opening.wait()


class PullingAgent:
    """Reads one queue into one cache and delivers to each consumer through its cursor."""

    def __init__(
        self,
        queue: QueueId,
        receiver: QueueAdapterReceiver,
        cache: QueueCache,
        context: AgentContext,
    ) -> None:
        self.queue = queue
        self.receiver = receiver
        # Checked once: a runtime Protocol check is too slow for every pump.
        self._rewindable = isinstance(receiver, RewindableReceiver)
        self.cache = cache
        self.context = context
        self._dead_letters = QueueDeadLetters(context.dead_letters, queue.number)
        self.read_messages = 0
        self.read_events = 0  # in the data batches of those records (status: events in)
        self.last_read_sequence: int | None = None  # status: how far behind each cursor is
        self.read_failures = 0
        self.pressure_skips = 0
        self.read_latency = LatencyHistogram()  # seconds per read, retries included
        self._streams: dict[StreamId, _StreamState] = {}
        # Activations of types fed by several namespaces (a batch waits for its turn at most
        # half as long as a delivery may take: it goes out of order before it would time out).
        self._keyed = KeyedActivations(context.options.max_event_delivery_time / 2)
        self._unacked: deque[int] = deque()
        self._wake = anyio.Event()
        self._stopping = False
        self._stopped = anyio.Event()
        self._tg: TaskGroup | None = None
        self._pump_lock = anyio.Lock()
        self._last_inactivity_sweep = time.monotonic()
        self._last_deadline_check = 0.0
        self._last_tick = 0.0
        # Kept proportional to the work at hand, not to the streams held: the consumers with
        # a task now, the event-time activations that stepped since last looked at, the
        # positions held by open windows and the time each activation's next tick is due.
        self._working: set[StreamConsumer] = set()
        self._changed: set[EventTimeObserver] = set()
        self._on_change = self._changed.add  # one bound method for every activation
        self._holds: KeyedMinHeap[EventTimeObserver] = KeyedMinHeap()
        self._ticks: KeyedMinHeap[EventTimeObserver] = KeyedMinHeap()
        self._pressure_since: float | None = None
        # Event-time state saved with the checkpoint, where the receiver can (agents.state).
        self._states: ActivationStates | None = None
        self._saved: dict[tuple[str, str], tuple[SequenceToken, bytes]] = {}

    # -- lifecycle -------------------------------------------------------------------
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        options = self.context.options
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self._retrying(self.receiver.initialize)
                if isinstance(self.receiver, StatefulReceiver):
                    self._saved = await self._retrying(self.receiver.load_states) or {}
                    self._states = ActivationStates(self._state_key)
                    self.receiver.state_source = self._states
                task_status.started()
                while not self._stopping:
                    self._check_deadlines()
                    self._run_ticks()
                    read = await self._pump()
                    if read and not self._stopping:
                        # A read that returned data may have left more behind (queues hand out
                        # what one fetch brings): read again at once, letting others run first.
                        await anyio.sleep(0)
                        continue
                    with anyio.move_on_after(options.get_queue_msgs_timer_period):
                        await self._wake.wait()
                    self._wake = anyio.Event()
                await self._shutdown()
                tg.cancel_scope.cancel()
        finally:
            self._stopped.set()

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if now - self._last_deadline_check < min(0.1, self.context.options.max_event_delivery_time / 4):
            return
        self._last_deadline_check = now
        for consumer in tuple(self._working):  # only a consumer with a task delivers
            consumer.check_deadline(now)

    def _run_ticks(self) -> None:
        """Once a timer period, tick the event-time activations whose next tick is due (a
        silent stream's watermark follows the clock: late arrival, idle timeouts)."""
        now = time.monotonic()
        if now - self._last_tick < self.context.options.get_queue_msgs_timer_period:
            return
        self._last_tick = now
        self._refresh()
        wall = time.time()
        for observer in self._ticks.pop_until(wall):
            self._spawn(self._tick, observer, wall)

    async def _tick(self, observer: EventTimeObserver, now: float) -> None:
        try:
            await observer.on_tick(now)
        except Exception as exc:  # a consumer's bug (in on_window, say) must not stop the agent
            log.exception(
                "%s: a tick of %s on %s raised", self.queue, type(observer.target).__qualname__, observer.stream_id
            )
            try:
                await observer.on_error(exc)
            except Exception:
                log.exception("on_error of %s raised", type(observer.target).__qualname__)

    def _refresh(self) -> None:
        """Bring the holds and next ticks of the activations that stepped up to date."""
        changed, holds, ticks = self._changed, self._holds, self._ticks
        while changed:
            observer = changed.pop()
            hold = observer.checkpoint_hold()
            holds.set(observer, None if hold is None else hold.sequence_number)
            if self._states is not None:
                self._states.changed(observer)
            ticks.set(observer, observer.next_tick())

    def wake(self) -> None:
        """A producer in this process enqueued to this queue: read now, not at the next tick."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop reading, let in-flight deliveries finish (within ``shutdown_timeout``),
        acknowledge what was delivered and release the queue."""
        self._stopping = True
        self._wake.set()
        await self._stopped.wait()

    async def drain(self) -> None:
        """Return once the queue is read to its end and every consumer has caught up."""
        while True:
            self.wake()
            read = await self._pump()
            if read == 0 and self.idle and not self.cache.is_under_pressure():
                await self._ack()
                return
            self._check_deadlines()
            await anyio.sleep(0.005)

    @property
    def idle(self) -> bool:
        return all(c.idle for c in self._working)  # a consumer without a task is caught up

    async def _shutdown(self) -> None:
        with anyio.move_on_after(self.context.options.shutdown_timeout) as scope:
            while not self.idle:
                self._check_deadlines()
                await anyio.sleep(0.01)
        if scope.cancelled_caught:
            log.warning("%s: shutdown timed out with deliveries in flight; they will be redelivered", self.queue)
        await self._ack()
        await self.receiver.shutdown()
        for sid in list(self._streams):
            self._close_stream(sid)
        await anyio.sleep(0)  # let the on_deactivate hooks run

    # -- reading ---------------------------------------------------------------------
    async def _pump(self) -> int:
        async with self._pump_lock:  # never overlap reads: timer, wake-ups and drain share it
            return await self._pump_once()

    async def _pump_once(self) -> int:
        cache = self.cache
        cache.try_purge()
        self._detach_slow_consumers()
        if cache.is_under_pressure():
            self.pressure_skips += 1
            await self._ack()
            return 0
        room = cache.get_max_add_count()
        started = time.perf_counter()
        messages = await self._retrying(self.receiver.get_queue_messages, room)
        self.read_latency.observe(time.perf_counter() - started)
        if messages is None:
            return 0
        if messages:
            await self._add(messages)
            self.read_messages += len(messages)
        await self._ack()
        self._sweep_inactive()
        return len(messages)

    async def _add(self, messages: list[QueueMessage]) -> None:
        # Slice by slice: consumers that take batches inline have passed a slice (and so
        # dropped its decoded values) before the next is decoded. The values then die young,
        # cheap for the garbage collector, instead of a whole read's worth of them surviving
        # into its older generations, whose collections cost time in proportion.
        for start in range(0, len(messages), _ADD_SLICE):
            await self._add_slice(messages[start : start + _ADD_SLICE])

    async def _add_slice(self, messages: list[QueueMessage]) -> None:
        decoded: list[tuple[QueueMessage, BatchContainer]] = []
        letters: list[DeadLetter] = []
        unacked = self._unacked
        for message in messages:
            unacked.append(message.sequence_number)
            try:
                decoded.append((message, message.container()))
            except DecodeError as exc:
                letters.append(
                    DeadLetter(
                        "undecodable",
                        queue=message.queue.number,
                        sequence_number=message.sequence_number,
                        payload=message.payload,
                        detail=str(exc),
                    )
                )
        self.read_events += sum(c.count for _, c in decoded if c.kind is BatchKind.DATA)
        self.last_read_sequence = messages[-1].sequence_number
        if letters:
            log.warning("%s: %d record(s) do not decode; dead-lettered", self.queue, len(letters))
            await self.context.dead_letters.add(letters)
        streams = self._streams
        for sid in {c.stream_id for _, c in decoded}:
            state = streams.get(sid)
            if state is None:
                state = await self._open_stream(sid)
            if state.opening is not None:
                await state.opened()
        if self._keyed:  # activations of several streams take their batches in queue order
            self._keyed.expect(decoded)
        now = time.monotonic()
        # The log context of the deliveries made here, inline: set per stream (no reset
        # between streams, nothing else runs meanwhile), restored once at the end.
        outer: Any = None
        try:
            for sid in self.cache.add(decoded):
                state = streams[sid] = streams.pop(sid)  # streams stay in order of their last data
                state.last_activity = now
                entered = enter_fields(state.log_fields)
                outer = outer or entered
                for consumer in state.consumers.values():
                    consumer.data_arrived()
        finally:
            if outer is not None:
                leave_fields(outer)

    async def _retrying(self, fn: Any, *args: Any) -> Any:
        """Call the receiver, backing off on failure; log once per outage, not per retry."""
        failures = 0
        while True:
            try:
                result = await fn(*args)
            except Exception as exc:
                if self._stopping and failures:
                    return None
                failures += 1
                self.read_failures += 1
                if failures == 1:
                    log.warning("%s: queue unavailable (%r); backing off", self.queue, exc)
                delay = min(self.context.options.max_read_backoff, 0.05 * 2 ** min(failures, 16))
                await anyio.sleep(delay * (0.5 + random.random() / 2))
                continue
            if failures:
                log.warning("%s: queue available again after %d failed attempts", self.queue, failures)
            return result

    # -- acknowledging ---------------------------------------------------------------
    def _ack_point(self) -> float:
        """The oldest queue position still needed: by a cursor in the cache, by a cursor
        reading history from the queue (only a consumer with a task has one), or by an
        activation's open windows (a heap, updated as they step)."""
        self._refresh()
        needed = (
            self.cache.oldest_needed(),
            self._holds.min(),
            *(consumer.cursor.position for consumer in self._working),
        )
        return min((p for p in needed if p is not None), default=math.inf)

    async def _ack(self) -> None:
        unacked = self._unacked
        if not unacked:
            return
        point = self._ack_point()
        if point > unacked[-1]:  # all of it: the usual case once consumers have caught up
            done = list(unacked)
            unacked.clear()
        else:
            done = []
            while unacked[0] < point:
                done.append(unacked.popleft())
        if done:
            await self._retrying(self.receiver.messages_delivered, _Tokens(done))

    # -- consumers ---------------------------------------------------------------------
    async def _open_stream(self, sid: StreamId, skip: str | None = None) -> _StreamState:
        """Attach every consumer of a newly active stream (``skip`` is attached by the
        caller, from its own token)."""
        state = self._streams[sid] = _StreamState(delivery_fields(self.context.worker_name, self.queue, sid))
        registry = self.context.registry
        try:
            for cls in registry.implicit_types(sid.namespace):
                await self._attach(
                    state, sid, f"implicit:{registry.type_name(cls)}", self._activation(state, sid, cls), implicit=True
                )
            for sub in registry.observers(sid):
                if sub.subscription_id != skip:
                    await self._attach(state, sid, sub.subscription_id, as_observer(sub.observer))
            for record in await self.context.pubsub.subscriptions(sid):
                if record.state is SubscriptionState.ACTIVE and record.subscription_id != skip:
                    cls = registry.get_type(record.consumer_type)
                    await self._attach(
                        state, sid, record.subscription_id, self._activation(state, sid, cls), durable=True
                    )
        finally:
            opening, state.opening = state.opening, None
            assert opening is not None
            opening.set()
        return state

    def _handoff_for(self, cls: type, sid: StreamId) -> HandoffTarget | None:
        """Where this consumer type's finalized output goes, if it hands off to Spark."""
        stream = getattr(getattr(cls, "handoff", None), "stream", None)
        sink = self.context.handoff_sinks.get(stream) if isinstance(stream, str) else None
        if sink is None:
            return None
        consumer = self.context.registry.type_name(cls) or cls.__qualname__
        return HandoffTarget(sink, str(sid), consumer, self.queue.number)

    def _activation(self, state: _StreamState, sid: StreamId, cls: type) -> Any:
        """One instance per stream id and consumer type, like an Orleans grain activation;
        one per key for a type fed by several namespaces (see ``agents.keyed``)."""
        observer = state.activations.get(cls)
        if observer is None:
            namespaces = self.context.registry.namespaces_of(cls)
            if namespaces:
                observer, instance = self._keyed.observer_for(cls, sid, namespaces[0], self._new_activation)
            else:
                target, instance = self._new_activation(cls, sid)
                observer = EventTimeDelivery(target) if isinstance(target, EventTimeObserver) else as_observer(target)
            state.activations[cls] = observer
            if instance is not None and hasattr(instance, "on_activate"):  # a task only if it has one
                self._spawn(self._call_hook, instance, "on_activate", state.log_fields)
        return observer

    def _new_activation(self, cls: type, sid: StreamId) -> tuple[Any, Any]:
        """``(what is delivered to, the user's instance)`` of a new activation."""
        instance = cls(sid)
        spec = event_time_of(instance)
        if spec is None:
            return instance, instance
        target = EventTimeObserver(instance, spec, sid, self._dead_letters, self._handoff_for(cls, sid))
        target.on_change = self._on_change
        if self._states is not None and target.enable_snapshots():
            self._restore(target)
        return target, instance

    def _state_key(self, activation: EventTimeObserver) -> tuple[str, str]:
        cls = type(activation.target)
        return (self.context.registry.type_name(cls) or cls.__qualname__, str(activation.stream_id))

    def _restore(self, activation: EventTimeObserver) -> None:
        saved = self._saved.pop(self._state_key(activation), None)
        if saved is None:
            return
        try:
            activation.restore(*saved)
        except Exception:
            log.exception(
                "%s: the saved state of %s on %s cannot be restored",
                self.queue,
                type(activation.target).__qualname__,
                activation.stream_id,
            )

    async def _attach(
        self,
        state: _StreamState,
        sid: StreamId,
        subscription_id: str,
        observer: Any,
        token: SequenceToken | None = None,
        *,
        durable: bool = False,
        implicit: bool = False,
    ) -> StreamConsumer:
        miss: CacheMissError | None = None
        cursor: Any
        covered = self.cache.covered_from()
        if token is not None and self._rewindable and (covered is None or token.sequence_number < covered):
            # Older than the cache, or the cache has read nothing yet (a worker just started
            # reads after the checkpoint): the durable queue has what the token asks for.
            cursor = self._rewind_cursor(sid, token.sequence_number)
        else:
            try:
                cursor = self.cache.create_cursor(sid, token)
            except CacheMissError as exc:
                miss = exc
                cursor = self.cache.create_cursor(sid, self.cache.oldest_cached_token())
        consumer = StreamConsumer(
            subscription_id,
            sid,
            observer,
            cursor,
            self.context,
            start_token=None if miss else token,
            durable=durable,
            implicit=implicit,
            log_fields=state.log_fields,
            spawn=self._spawn,
            working=self._working,
        )
        state.consumers[subscription_id] = consumer
        if miss is not None:
            await consumer.report_error(miss)
        consumer.start()
        return consumer

    def _rewind_cursor(self, sid: StreamId, start_sequence: int) -> RewindCursor:
        return RewindCursor(sid, self.receiver, self.cache, start_sequence)  # type: ignore[arg-type]

    def _detach_slow_consumers(self) -> None:
        """A consumer holding a full cache longer than ``slow_consumer_timeout`` is moved onto
        the durable queue, so the others go on (it catches up from there)."""
        timeout = self.context.options.slow_consumer_timeout
        if timeout is None or not self._rewindable:
            self._pressure_since = None
            return
        now = time.monotonic()
        if not self.cache.is_under_pressure():
            self._pressure_since = None
            return
        if self._pressure_since is None:
            self._pressure_since = now
            return
        if now - self._pressure_since < timeout:
            return
        oldest = self.cache.oldest_needed()
        for consumer in tuple(self._working):  # one holding the cache has data, so a task
            item = consumer.cursor.current()
            if item is not None and item.sequence == oldest:
                log.warning(
                    "%s: consumer %s on %s held the cache full for %.0fs; detached to read from the queue",
                    self.queue,
                    consumer.subscription_id,
                    consumer.stream_id,
                    now - self._pressure_since,
                )
                consumer.detach(functools.partial(self._rewind_cursor, consumer.stream_id))
        self._pressure_since = None

    def _spawn(self, fn: Any, *args: Any) -> None:
        assert self._tg is not None, "the agent is not running"
        self._tg.start_soon(fn, *args)

    @staticmethod
    async def _call_hook(instance: Any, name: str, log_fields: Any) -> None:
        hook = getattr(instance, name, None)
        if hook is None:
            return
        enter_fields(log_fields)  # its own task: the context goes with it
        try:
            result = hook()
            if hasattr(result, "__await__"):
                await result
        except Exception:
            log.exception("%s of %s raised", name, type(instance).__qualname__)

    async def add_subscription(self, subscription: InProcessSubscription | SubscriptionRecord) -> None:
        """A subscription made while this agent runs: attach it now, from its token."""
        sid = interned(subscription.stream_id)  # the key object decoded batches bring
        state = self._streams.get(sid)
        if state is None:
            state = await self._open_stream(sid, skip=subscription.subscription_id)
        await state.opened()
        if subscription.subscription_id in state.consumers:
            return
        if isinstance(subscription, InProcessSubscription):
            await self._attach(
                state, sid, subscription.subscription_id, as_observer(subscription.observer), subscription.token
            )
        else:
            cls = self.context.registry.get_type(subscription.consumer_type)
            await self._attach(
                state,
                sid,
                subscription.subscription_id,
                self._activation(state, sid, cls),
                subscription.start_token,
                durable=True,
            )

    def remove_subscription(self, stream_id: StreamId, subscription_id: str) -> None:
        state = self._streams.get(stream_id)
        if state is None:
            return
        consumer = state.consumers.pop(subscription_id, None)
        if consumer is not None:
            consumer.close()

    def _close_stream(self, sid: StreamId) -> None:
        state = self._streams.pop(sid)
        for consumer in state.consumers.values():
            consumer.close()
        ended = self._keyed.leave(sid)  # activations of several streams whose last this was
        registry = self.context.registry
        for cls, observer in state.activations.items():
            activation = _event_time_activation(observer)
            if registry.namespaces_of(cls):  # shared by the streams of a key
                if activation is None or not any(activation.target is e for e in ended):
                    continue
            elif activation is None:
                ended.append(observer.target)
            else:
                ended.append(activation.target)
            if activation is not None:
                activation.on_change = None
                if self._states is not None and not self._stopping:
                    self._states.retire(activation)
                self._changed.discard(activation)
                self._holds.discard(activation)
                self._ticks.discard(activation)
        for instance in ended:
            if hasattr(instance, "on_deactivate"):
                self._spawn(self._call_hook, instance, "on_deactivate", state.log_fields)

    def _sweep_inactive(self) -> None:
        """Deactivate the streams with no new data for ``stream_inactivity_period``, nothing
        in flight and no open window holding the checkpoint (those stay: their windows are
        state the queue's checkpoint already waits for). Streams are kept in order of their
        last data, so a sweep reads only the quiet ones."""
        now = time.monotonic()
        period = self.context.options.stream_inactivity_period
        if now - self._last_inactivity_sweep < min(period, 60.0):
            return
        self._last_inactivity_sweep = now
        self._refresh()
        quiet = []
        for sid, state in self._streams.items():
            if now - state.last_activity < period:
                break
            quiet.append((sid, state))
        for sid, state in quiet:
            if state.opening is None and self._quiet(state):
                self._close_stream(sid)

    def _quiet(self, state: _StreamState) -> bool:
        if not all(c.idle for c in state.consumers.values()):
            return False
        return not any(
            (activation := _event_time_activation(observer)) is not None
            and (activation in self._holds or activation.has_state())
            for observer in state.activations.values()
        )

    # -- status ----------------------------------------------------------------------------
    def stream_ids(self) -> list[StreamId]:
        return list(self._streams)

    def consumers(self, stream_id: StreamId) -> list[StreamConsumer]:
        state = self._streams.get(stream_id)
        return list(state.consumers.values()) if state else []

    async def abandon(self) -> None:
        """Stop at once: no more reads or deliveries, no acknowledgement, no checkpoint (the
        queue's lease is gone and another worker may read it already). What was in flight is
        delivered again from the last checkpoint by the queue's next owner."""
        self._stopping = True
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        await self._stopped.wait()

    def event_time_activations(self) -> list[EventTimeObserver]:
        """The event-time activations of the streams now active here, read-only (metrics
        read their processors' counters and watermarks)."""
        found: dict[int, EventTimeObserver] = {}  # an activation of several inputs once
        for state in self._streams.values():
            for observer in state.activations.values():
                target = observer.target
                if isinstance(target, InputView):
                    target = target.activation
                if isinstance(target, EventTimeObserver):
                    found[id(target)] = target
        return list(found.values())


def _event_time_activation(observer: Any) -> EventTimeObserver | None:
    """The event-time activation a consumer delivers to, directly or as one of its inputs."""
    target = observer.target
    if isinstance(target, InputView):
        target = target.activation
    return target if isinstance(target, EventTimeObserver) else None


class _Tokens(Sequence[SequenceToken]):
    """Acknowledged queue positions as tokens, each made when the receiver reads it.

    A read can acknowledge thousands of records; a list of as many token objects, alive
    until the call returns, cost more than making them (in garbage collections), and some
    receivers only count them or read the last."""

    __slots__ = ("_numbers",)

    def __init__(self, numbers: list[int]) -> None:
        self._numbers = numbers

    def __len__(self) -> int:
        return len(self._numbers)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [SequenceToken(n) for n in self._numbers[index]]
        return SequenceToken(self._numbers[index])

    def __iter__(self) -> Iterator[SequenceToken]:
        return map(SequenceToken, self._numbers)

    def __repr__(self) -> str:
        return f"_Tokens({self._numbers!r})"


def new_subscription_id() -> str:
    return uuid.uuid4().hex
