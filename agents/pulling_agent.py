"""The pulling agent: one per owned queue (Orleans' ``PersistentStreamPullingAgent``).

On a timer, and at once when a producer in this process wakes it, the agent reads as many
records as its cache has room for, decodes them (dead-lettering what is not a batch
container), activates the consumers of streams it has not seen, adds the batches to the cache
and tells the consumers whose streams got data (those whose ``on_next`` cannot suspend it
delivers to there and then, see ``agents.delivery``). It never overlaps its own reads, backs off
when the queue fails, and acknowledges to the queue only the positions every consumer has
finished with (``agents.checkpoint``). The activations it delivers to are made and ended by
its :class:`~agents.catalog.Catalog`. Beside the reading and acknowledging here, an agent has
its queue's processing clock and ticks (``agents.ticking``), the subscriptions changed while
it runs (``agents.subscriptions``) and the collection of idle streams (``agents.collector``).

A pulling agent's calls to its queue receiver, retried while the queue fails: through the
one retry helper (:func:`streams.core.retry.retry`), with back-off up to ``max_read_backoff``
and one log line at each end of an outage, until the agent stops.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextvars import Token
from typing import Any, ParamSpec, TypeVar, TypeVarTuple

import anyio
from anyio.abc import TaskGroup

from agents.activation import TimedActivation
from agents.catalog import Catalog, StreamState, event_time_activations
from agents.checkpoint import Holds, Tokens, acknowledgeable
from agents.collector import ActivationCollector
from agents.context import AgentContext
from agents.counters import LatencyHistogram
from agents.cursors import Cursors
from agents.delivery import StreamConsumer
from agents.event_time_observer import EventTimeObserver
from agents.failure_letters import undecodable_letter
from agents.gc_policy import POLICY as GC_POLICY
from agents.subscriptions import QueueSubscriptions
from agents.ticking import QueueTicks
from cache.protocols import QueueCache
from streams.adapters.protocols import ForwardingReceiver, QueueAdapterReceiver, StatefulReceiver, StateLookup
from streams.core.batch import BatchContainer, BatchKind, QueueMessage
from streams.core.codec import interned
from streams.core.deadletters import DeadLetter
from streams.core.errors import DecodeError, QueueFailedError, RecordTooLargeError
from streams.core.ids import QueueId, StreamId
from streams.core.logcontext import LOG_CONTEXT
from streams.core.record_batch import gathered
from streams.core.retry import Backoff, OutageLog, RetryStopped, retry
from streams.eventtime.lateness import ObservedTimes

log = logging.getLogger("headrace.agent")

P = ParamSpec("P")
T = TypeVar("T")


class ReceiverCalls:
    """Calls to the receiver of ``queue``: each is retried until it answers, or until
    ``stopping()`` once a retry failed too (what was not acknowledged then is read again by the
    queue's next owner), and then gives ``None``. ``failures`` counts the failed calls. A
    :class:`QueueFailedError` (retrying cannot fix it) is raised at once, not retried.

    >>> import anyio
    >>> calls = ReceiverCalls(QueueId(0), max_backoff=0.001, stopping=lambda: False)
    >>> answers = [ConnectionRefusedError("refused"), ["a record"]]
    >>> async def read(n):
    ...     answer = answers.pop(0)
    ...     if isinstance(answer, Exception):
    ...         raise answer
    ...     return answer[:n]
    >>> anyio.run(calls, read, 10), calls.failures
    (['a record'], 1)
    """

    def __init__(self, queue: QueueId, *, max_backoff: float, stopping: Callable[[], bool]) -> None:
        self.failures = 0
        self._what = f"calling the receiver of {queue}"
        self._outage = OutageLog(str(queue), log)
        self._max_backoff = max_backoff
        self._stopping = stopping

    async def __call__(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T | None:
        try:
            return await retry(
                functools.partial(fn, *args, **kwargs),
                what=self._what,
                outage=self._outage,
                backoff=Backoff(min(0.05, self._max_backoff), self._max_backoff),
                is_transient=lambda exc: not isinstance(exc, QueueFailedError),
                on_failure=self._failed,
                stop=lambda attempt: attempt > 1 and self._stopping(),
            )
        except RetryStopped:
            return None

    def _failed(self, exc: BaseException, attempt: int) -> None:
        self.failures += 1

    @property
    def unreachable(self) -> bool:
        """The receiver's calls are failing now (retried with back-off): an outage goes on."""
        return self._outage.ongoing


_REFUSED = {"undecodable": "do not decode", "too_large": "are over max_event_size"}  # why, in the log line
_ADD_SLICE = 64  # messages decoded, cached and delivered at a time (see _add)
# Consumer tasks waiting to run at which a read lets them (see _add). Not at every slice:
# that made reads of a few hundred streams slower (measured 4-8 % per event at 1,000
# streams, though callgrind counted fewer instructions, cache and branch misses).
_PENDING_TASKS = 256
Ts = TypeVarTuple("Ts")


class PullingAgent:
    """Reads one queue into one cache and delivers to each consumer through its cursor."""

    def __init__(
        self, queue: QueueId, receiver: QueueAdapterReceiver, cache: QueueCache, context: AgentContext
    ) -> None:
        self.queue = queue
        self.receiver = receiver
        self.cache = cache
        self.context = context
        self.read_messages = 0
        self.read_events = 0  # in the data batches of those records (status: events in)
        self.last_read_sequence: int | None = None  # status: how far behind each cursor is
        self.pressure_skips = 0
        self.read_latency = LatencyHistogram()  # seconds per read, retries included
        self._retrying = ReceiverCalls(
            queue, max_backoff=context.options.max_read_backoff, stopping=lambda: self._stopping
        )
        self._streams: dict[StreamId, StreamState] = {}
        self._unacked: deque[int] = deque()
        self._wake = anyio.Event()
        self._stopping = False
        self.failure: str | None = None  # why the queue cannot be read on (status, metrics)
        self._stopped = anyio.Event()
        self._tg: TaskGroup | None = None
        self._pump_lock = anyio.Lock()
        self._last_deadline_check = 0.0
        # A receiver that sends records on to other queues (the re-keying hop): those count
        # as read, or a read that sent all it fetched on would look like an idle queue.
        self._forwarding = receiver if isinstance(receiver, ForwardingReceiver) else None
        # A receiver whose reads hold one-event records, one batch each unless gathered
        # (Kafka's, of headrace's own format): the agent gathers them by stream and read.
        self._gathers = receiver.gathers_containers
        # Kept proportional to the work at hand, not to the streams held: the consumers with
        # a task now, and the holds and next ticks of the event-time activations.
        self._working: dict[StreamConsumer, anyio.CancelScope | None] = {}
        self._holds = Holds()
        self._cursors = Cursors(queue, receiver, cache, context.options)
        self._catalog = Catalog(queue, context, self._cursors, self._working, self._spawn, self._holds.on_change)
        self.subscriptions = QueueSubscriptions(self._streams, self._catalog, context.registry, self._open_stream)
        self._collector = ActivationCollector(
            queue, context, self._streams, self._catalog, self._holds, receiver, self._spawn, self._close_stream
        )
        self._ticks = QueueTicks(
            queue, context, self._holds, self._catalog, self._streams, self._spawn, self._wake_stream
        )

    @property
    def ticks(self) -> int:
        """Ticks given to event-time activations (for tests and diagnostics)."""
        return self._ticks.ticks

    async def tick_due(self) -> int:
        """Tick and await each activation due at the processing clock now, as the timer would; how many."""
        return await self._ticks.tick_due()

    # -- lifecycle -------------------------------------------------------------------
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        options = self.context.options
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    await self._retrying(self.receiver.initialize)
                    if isinstance(self.receiver, StatefulReceiver):
                        saved = await self._retrying(self.receiver.load_states) or {}
                        lookup = self.receiver if isinstance(self.receiver, StateLookup) else None
                        self.receiver.state_source = self._holds.states = self._catalog.keep_states(saved, lookup)
                except QueueFailedError as exc:
                    self._fail(exc)
                task_status.started()
                tg.start_soon(self._housekeep)
                while not (self._stopping or self.failure):
                    self._check_deadlines()
                    if time.monotonic() >= self._ticks.due_at:  # once a timer period, not at every read:
                        self._ticks.run()
                        await self._ack()  # what every consumer has finished with, acknowledged
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

    async def _housekeep(self) -> None:
        """On the agent's timer, not at every read: slow consumers detached from a full cache,
        idle streams collected (each checks its own interval), reads' latencies counted."""
        period = self.context.options.get_queue_msgs_timer_period
        while not (self._stopping or self.failure):
            await anyio.sleep(period)
            async with self._pump_lock:  # a read opens streams the collector could close
                self._cursors.detach_slow(self._working)
                self._collector.collect()
                self.read_latency.count_recorded()

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if now - self._last_deadline_check < min(0.1, self.context.options.max_event_delivery_time / 4):
            return
        self._last_deadline_check = now
        for consumer in tuple(self._working):  # only a consumer with a task delivers
            consumer.check_deadline(now)

    def _fail(self, exc: QueueFailedError) -> None:
        """The queue cannot be read on (its receiver says why, where and the fix): log it
        once, stop reading, and report it (status, metrics, :meth:`drain`); what was
        delivered is still acknowledged when the agent stops."""
        if self.failure is None:
            self.failure = str(exc)
            log.error("%s: stopped, shown failed: %s", self.queue, exc)
        self._wake.set()

    @property
    def unreachable(self) -> bool:
        """Its queue cannot be read now (the reads are retried with back-off): a worker's
        readiness says so (:mod:`streams.runtime.health`)."""
        return self._retrying.unreachable

    def wake(self) -> None:
        """A producer in this process enqueued to this queue: read now, not at the next tick."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop reading, let in-flight deliveries finish (within ``shutdown_timeout``),
        acknowledge what was delivered and release the queue."""
        self._stopping = True
        self._wake.set()
        await self._stopped.wait()

    async def drain(self) -> int:
        """Return once the queue is read to its end and every consumer has caught up: the
        records read meanwhile, and sent on to other queues. Raise :class:`QueueFailedError`
        (why, where and the fix) once it cannot be read on.

        Every read counts, the agent's own too (its timer's, a wake-up's), which take turns
        with the drain's; records sent on count once they arrived in the queue they went to
        (:attr:`~streams.adapters.protocols.ForwardingReceiver.arrived`): some sent on before
        the drain began may arrive after the other queues' reads of this round found nothing,
        and the worker reads again (:meth:`agents.manager.AgentManager.drain`).

        "Its end": a read that brought nothing, after which the receiver says it is
        :attr:`~streams.adapters.protocols.QueueAdapterReceiver.caught_up`; a read can bring
        nothing with records still waiting (a fetch not yet answered, a back-off)."""
        start = progress = self._progress
        while True:
            if self.failure is not None:
                raise QueueFailedError(self.failure)
            if self._stopping:  # stopped or abandoned: it reads no more
                return self._progress - start
            self.wake()
            await self._pump()
            # No await since the read: the timer's reads (serialized with it) are counted too.
            before, progress = progress, self._progress
            if before == progress and self.receiver.caught_up and self.idle and not self.cache.is_under_pressure():
                await self._ack()
                return progress - start
            await anyio.sleep(0.005)

    @property
    def _progress(self) -> int:
        """Records read so far, and sent on to other queues and arrived there (counted as read)."""
        forwarding = self._forwarding
        return self.read_messages + (forwarding.arrived if forwarding is not None else 0)

    @property
    def read_failures(self) -> int:
        return self._retrying.failures  # reads and acknowledgements (status, metrics)

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
            if self.failure is not None:
                return 0
            try:
                return await self._pump_once()
            except QueueFailedError as exc:
                self._fail(exc)
                return 0

    async def _pump_once(self) -> int:
        cache = self.cache
        cache.try_purge()
        if cache.is_under_pressure():
            self.pressure_skips += 1
            self._ticks.caught_up = False  # not read: records may be waiting
            await self._ack()
            return 0
        room = cache.get_max_add_count()
        started = time.perf_counter()
        self._ticks.caught_up = False  # until what this read brings is in the cache
        forwarding = self._forwarding
        forwarded = forwarding.forwarded if forwarding is not None else 0
        messages = await self._retrying(self.receiver.get_queue_messages, room)
        self.read_latency.record(time.perf_counter() - started)
        if messages is None:  # the read failed (its retries gave up to let the agent stop)
            return 0
        read = len(messages)
        if messages:
            streams = len(self._streams)
            # Handed over, not kept here: once _add has gathered them, the read's record
            # messages die (the garbage collector would walk each one at every collection
            # while the read is delivered).
            held, messages = [messages], []
            await self._add(held)
            self.read_messages += read
            if len(self._streams) > streams:  # activations made: they live long
                GC_POLICY.settle()
        self._ticks.caught_up = self.receiver.caught_up  # (acknowledged on the timer: see run)
        if forwarding is not None:
            return read + forwarding.forwarded - forwarded
        return read

    async def _add(self, held: list[Sequence[QueueMessage]]) -> None:
        """Add a read's messages (the one sequence ``held`` holds, taken out of it)."""
        messages = held.pop()
        # Every record's position; a read whose messages are made as they are looked at
        # (streams.backends.kafka.records.ContainerMessages) gives them with none made.
        self._unacked.extend(self.receiver.positions(messages))
        self.last_read_sequence = messages[-1].sequence_number
        if self._gathers and not self.context.registry.has_keyed():
            # One-event containers gathered by stream (streams.core.record_batch.gathered):
            # each event keeps its record's token. Not where activations of several streams
            # take their batches in queue order, which a replay, read from elsewhere and so
            # gathered otherwise, must see again.
            messages = gathered(messages, self._ticks.records_clock, self.context.options.max_event_size)
        decoded, letters = _decoded(messages, self.context.options.max_event_size)
        _stamp_clock(decoded, self._ticks, self.context.clock.monotonic)
        self.read_events += sum(c.count for _, c in decoded if c.kind is BatchKind.DATA)
        if letters:
            await self._refuse(letters)
        # The read's new streams have their subscriptions and saved states read together,
        # once a read (a fleet coming online brings thousands). Then slice by slice: inline
        # consumers have dropped a slice's decoded values before the next is delivered, so
        # they die young, cheap for the garbage collector, instead of a whole read's worth
        # surviving into its older generations, whose collections cost time in proportion.
        working = self._working
        async with self._catalog.first_contact(_new_streams(decoded, self._streams)):
            for start in range(0, len(decoded), _ADD_SLICE):
                if len(working) >= _PENDING_TASKS and start:
                    # The tasks the slices so far started (a completion, windows to emit) run
                    # now, while what they touch of their streams is still in the CPU's caches.
                    # Left until the whole read was added (up to cache_size records: thousands
                    # of streams, and other agents' reads meanwhile), they found it all cold.
                    await anyio.sleep(0)
                await self._add_slice(decoded[start : start + _ADD_SLICE])

    async def _add_slice(self, decoded: list[tuple[QueueMessage, BatchContainer]]) -> None:
        streams, sids = self._streams, {c.stream_id: None for _, c in decoded}
        self._catalog.consumers.open_new(streams, sids)  # the new ones whose subscriptions the read brought
        for sid in sids:
            state = streams.get(sid)
            if state is None:
                state = await self._open_stream(sid)
            if state.opening is not None:
                await state.opened()
        keyed = self._catalog.keyed
        if keyed.by_key:  # activations of several streams take their batches in queue order
            keyed.expect(decoded)
        self._cache_and_tell(decoded)

    async def _refuse(self, letters: list[DeadLetter]) -> None:
        """Dead-letter records that are no batch, with one log line per slice."""
        reasons = Counter(letter.reason for letter in letters)
        refused = ", ".join(f"{n} record(s) {_REFUSED[reason]}" for reason, n in sorted(reasons.items()))
        log.warning("%s: %s; dead-lettered", self.queue, refused)
        await self.context.dead_letters.add(letters)

    def _cache_and_tell(self, decoded: list[tuple[QueueMessage, BatchContainer]]) -> None:
        """Add the batches to the cache and tell the consumers of each stream that got data."""
        streams = self._streams
        now = time.monotonic()
        # The log context of the deliveries made here, inline: set per stream (no reset
        # between streams, nothing else runs meanwhile), restored once at the end.
        outer: Token[Mapping[str, Any]] | None = None
        try:
            for sid in self.cache.add(decoded):
                state = streams[sid] = streams.pop(sid)  # streams stay in order of their last data
                state.last_activity = now
                entered = LOG_CONTEXT.set(state)
                outer = outer or entered
                for consumer in state.consumers:
                    consumer.data_arrived()
        finally:
            if outer is not None:
                LOG_CONTEXT.reset(outer)

    # -- acknowledging ---------------------------------------------------------------
    def _ack_point(self) -> float:
        """The oldest queue position still needed: by a cursor in the cache, by a cursor
        reading history from the queue (only a consumer with a task has one), or by an
        activation's open windows (a heap, updated as they step)."""
        needed = (
            self.cache.oldest_needed(),
            self._holds.oldest(),
            *(consumer.cursor.position for consumer in self._working),
        )
        return min((p for p in needed if p is not None), default=math.inf)

    async def _ack(self) -> None:
        if not self._unacked:
            return
        done = acknowledgeable(self._unacked, self._ack_point())
        if done:
            try:
                await self._retrying(self.receiver.messages_delivered, Tokens(done))
            except QueueFailedError as exc:
                self._fail(exc)

    # -- consumers ---------------------------------------------------------------------
    async def _wake_stream(self, sid: StreamId) -> None:
        """Activate ``sid`` with no data: a saved state of it has a timer due."""
        sid = interned(sid)
        if sid not in self._streams and not self._stopping:
            await self._open_stream(sid)

    async def _open_stream(self, sid: StreamId, skip: str | None = None) -> StreamState:
        """Attach every consumer of a newly active stream (``skip`` is attached by the
        caller, from its own token)."""
        state = self._streams[sid] = StreamState(self.context.worker_name, self.queue, sid)
        if not self._catalog.consumers.attach_all_now(state, sid, skip):  # its subscriptions not read yet
            await self._catalog.consumers.attach_all(state, sid, skip)
        return state

    def _spawn(self, fn: Callable[[*Ts], Coroutine[Any, Any, object]], *args: *Ts) -> None:
        assert self._tg is not None, "the agent is not running"
        self._tg.start_soon(fn, *args)

    def _close_stream(self, sid: StreamId) -> None:
        state = self._streams.pop(sid)
        for consumer in state.consumers:
            consumer.close()
        for activation in self._catalog.close(sid, state, stopping=self._stopping):
            self._holds.drop(activation)

    # -- status ----------------------------------------------------------------------------
    def stream_ids(self) -> list[StreamId]:
        return list(self._streams)

    def consumers(self, stream_id: StreamId) -> list[StreamConsumer]:
        state = self._streams.get(stream_id)
        return list(state.consumers) if state else []

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
        return event_time_activations(self._streams.values())

    def fates_by_type(self) -> dict[str, dict[str, int]]:
        """What event time did to this queue's events, per consumer type: the counters of
        its activations, running or ended (``headrace status``)."""
        return self._catalog.fates_by_type(self.event_time_activations())

    def activations_by_type(self) -> dict[str, tuple[int, int]]:
        """Per consumer type, its event-time activations here: ``(active, parked)``."""
        active = self._catalog.active_by_type(self.event_time_activations())
        parked = self._catalog.parked_by_type()
        return {name: (active.get(name, 0), parked.get(name, 0)) for name in sorted({*active, *parked})}

    def holding_activation(self) -> tuple[tuple[str, str], TimedActivation, int] | None:
        """The activation holding the oldest position held here: (its type and stream), it, the position."""
        return None if (found := self._holds.holder()) is None else (self._catalog.state_key(found[0]), *found)

    def observed_times(self) -> dict[str, ObservedTimes]:
        """Per consumer type, the lateness and disorder of a sample of this queue's events
        over the hour up to the queue's processing clock (``headrace status``)."""
        now = self._ticks.now()
        return self._catalog.observed_times(now if math.isfinite(now) else self.context.clock.now())


def _decoded(
    messages: Sequence[QueueMessage], limit: int
) -> tuple[list[tuple[QueueMessage, BatchContainer]], list[DeadLetter]]:
    """The messages' batch containers, and letters for those that are none or over ``limit``."""
    decoded: list[tuple[QueueMessage, BatchContainer]] = []
    letters: list[DeadLetter] = []
    for message in messages:
        try:
            if len(message.payload) > limit:  # never decoded: its events could be far larger
                raise RecordTooLargeError(f"{len(message.payload):,} bytes, over max_event_size ({limit:,} bytes)")
            decoded.append((message, message.container()))
        except DecodeError as exc:
            letters.append(undecodable_letter(message, exc))
    return decoded, letters


def _new_streams(
    decoded: list[tuple[QueueMessage, BatchContainer]], known: Mapping[StreamId, object]
) -> list[StreamId]:
    """The streams of ``decoded`` not in ``known``, each once, in queue order."""
    return list({c.stream_id: None for _, c in decoded if c.stream_id not in known})


def _stamp_clock(
    decoded: Sequence[tuple[object, BatchContainer]], ticks: QueueTicks, monotonic: Callable[[], float]
) -> None:
    """The queue's clock moves with each record, in queue order: each container learns where
    it stood just before it (a receiver that gathers records of one stream across others, as
    Kafka's grouped records, has set it already). A newer arrival than any read before moves
    the processing clock (``ticks``), read at ``monotonic()`` now."""
    clock = newest = ticks.records_clock
    for _, container in decoded:
        if container.clock_before is None and clock > -math.inf:
            container.clock_before = clock
        if container.arrival_time > clock:
            clock = container.arrival_time
    if clock > newest:
        ticks.records_clock, ticks.read_at = clock, (clock, monotonic())


def new_subscription_id() -> str:
    return uuid.uuid4().hex
