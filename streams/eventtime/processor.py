"""The event-time processor: the contract's per-event steps, ticks, punctuation and flush.

Pure and synchronous: no I/O, no asyncio, no wall clock. Times come in and go out as seconds
(floats or ints); inside, every time is an exact integer of microseconds
(:mod:`streams.core.micros`). The processing clock is the
arrival time of what it is given (events, ticks, punctuation), so the same observations
always give the same outputs, however they are split into calls (ASA's repeatability).

Per event (``docs/event-time.md``; W is the event's substream or partition watermark):
1. early arrival → dropped; 2. late arrival → adjust/drop/accept; 3. out of order
(timestamp < W) → adjust/drop/accept; 4. into every open window containing the timestamp,
else a ``window_closed`` dead letter; 5. W := max(W, newest timestamp - out_of_order,
arrival - late_arrival); 6. close every window with W >= end + allowed_lateness.

The processor builds the parts and orchestrates them: the per-event path is
:mod:`streams.eventtime.ingest` (with :mod:`~streams.eventtime.ordering` for steps 1-3 and
:mod:`~streams.eventtime.ordering` for dead letters), watermark propagation and closing is
:mod:`streams.eventtime.flow`, what it returns is :mod:`streams.eventtime.results`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from streams.core.errors import ConfigurationError, StreamCompletedError
from streams.core.micros import PER_SECOND, bound_micros, to_seconds
from streams.eventtime.aggregates import Reducer
from streams.eventtime.declaration import Declaration, declared_by
from streams.eventtime.dedup import Deduplication
from streams.eventtime.flow import FlowShape, WatermarkFlow
from streams.eventtime.ingest import Ingest
from streams.eventtime.joins import JoinStore
from streams.eventtime.lateness import LatenessSketch
from streams.eventtime.ordering import OrderingStep, Refusals
from streams.eventtime.parts import Input, ProcessorParts
from streams.eventtime.policy import EventLike, OrderingPolicy
from streams.eventtime.results import Counters, EventOutcome, EventTimeMetrics, Output
from streams.eventtime.runs import take_in_runs
from streams.eventtime.snapshot import restore, snapshot
from streams.eventtime.watermark import FOREVER, NEVER, MergedWatermark
from streams.eventtime.windows import WindowSpec, WindowStore


class Processor:
    """Applies an :class:`OrderingPolicy`, watermarks and windows to observations.

    >>> from types import SimpleNamespace as Ev
    >>> from streams.eventtime import OrderingPolicy, Tumbling
    >>> p = Processor(OrderingPolicy(out_of_order=2), Tumbling(10), group_by="k")
    >>> evs = [Ev(value={"k": "a"}, event_time=t, arrival_time=t, token=i)
    ...        for i, t in enumerate([1.0, 4.0, 3.0, 12.0, 13.0])]
    >>> [(w.key, w.start, w.end, w.value) for w in p.on_events(evs).windows]
    [('a', 0.0, 10.0, 3)]
    >>> p.held_since()
    3

    Its arguments are a :class:`~streams.eventtime.declaration.Declaration`'s.
    ``inputs`` names the merged inputs (partitions or streams) whose minimum watermark closes
    windows (or, with ``join``, emits the pairs of an interval join of its two inputs); ``imports`` maps an input to the input whose watermark it follows instead of
    generating its own. With ``policy.over`` (substreams) there is one input, and windows are
    per substream key, each closed by its own watermark.

    The runtime maps a queue's batch containers onto the calls: ``DATA`` to :meth:`on_events`,
    ``WATERMARK`` (a producer's ``advance_time``) to :meth:`advance_time`, ``COMPLETED`` to
    :meth:`on_completed`; a timer with nothing to deliver calls :meth:`on_tick`.
    """

    # One per activation, so thousands per worker: slots keep each small, and what every
    # processor of a declaration shares is in its parts (streams.eventtime.parts).
    # Its counters and inputs are its flow's, its per-event way its parts'.
    __slots__ = ("_parts", "_by_name", "_flow", "_sampler")

    @declared_by(Declaration)
    def __init__(self, declared: Declaration) -> None:
        self._assemble(ProcessorParts(declared), 0)

    @classmethod
    def of(cls, parts: ProcessorParts, partition: Hashable = 0) -> Processor:
        """A new processor of the declaration ``parts`` (shared, never changed), with its
        own state: one input named ``partition``, or the inputs ``parts`` declares.

        >>> from streams.eventtime import OrderingPolicy, Tumbling
        >>> from streams.eventtime.declaration import Declaration
        >>> from streams.eventtime.parts import ProcessorParts
        >>> parts = ProcessorParts(Declaration(OrderingPolicy(), Tumbling(10)))
        >>> a, b = Processor.of(parts, "a"), Processor.of(parts, "b")
        >>> a.metrics().watermarks, a.policy is b.policy, a.counters is b.counters
        ({'a': -inf}, True, False)
        """
        self = cls.__new__(cls)
        self._assemble(parts, partition)
        return self

    def _assemble(self, parts: ProcessorParts, partition: Hashable) -> None:
        """This processor's own state around the shared ``parts``."""
        self._parts = parts
        counters = Counters()
        names = parts.inputs or (partition,)
        imports, generation, delay = parts.imports, parts.generation, parts.delay
        by_name = {name: Input(name, None if name in imports else generation, delay) for name in names}
        for follower, source in imports.items():
            by_name[source].importers += (by_name[follower],)
        # The inputs in declaration order, shared with the flow; by name only for several
        # (one input is found by comparing its name: no dict per stream's processor).
        inputs = tuple(by_name.values())
        self._by_name = by_name if len(names) > 1 else None
        # What every flow of the declaration reads, made by its first processor as its Ingest is.
        shape = parts.flow_shape
        if shape is None:
            shape = parts.flow_shape = FlowShape(
                len(inputs),
                parts.assigner,
                parts.reducer,
                substreams=parts.substreams,
                idle_timeout=parts.idle_timeout,
                generation=generation,
                delay=delay,
                trace=parts.trace,
                session=parts.session,
                join=parts.join,
                counted=parts.counted,
                sliding=parts.sliding,
            )
        self._flow = flow = WatermarkFlow(inputs, shape, counters)
        if parts.dedup is not None:
            flow.dedup = Deduplication(parts.dedup)
        self._sampler: LatenessSketch | None = None
        # The per-event way is the declaration's, made by its first processor.
        if parts.ingest is None:
            refusals = Refusals(
                early=parts.early,
                late=parts.late,
                delay=delay,
                reducer_name=parts.reducer_name,
                own_time=parts.timestamp_of is None,
                trace=parts.trace,
            )
            parts.ingest = Ingest(
                flow,
                OrderingStep(parts.action, refusals),
                refusals,
                timestamp_of=parts.timestamp_of,
                key_of=parts.key_of,
                key_field=parts.key_field,
                select=parts.select,
            )

    @property
    def counters(self) -> Counters:
        """Its events' counts by fate (updated in place)."""
        return self._flow.counters

    @property
    def _inputs(self) -> tuple[Input, ...]:
        return self._flow.inputs

    @property
    def policy(self) -> OrderingPolicy:
        return self._parts.policy

    @property
    def window(self) -> WindowSpec | None:
        return self._parts.window

    @property
    def allowed_lateness(self) -> float:
        """How long a window stays open after the watermark passes its end (``A``), in seconds."""
        return to_seconds(self._flow.shape.lateness)

    @property
    def reducer(self) -> Reducer[Any, Any]:
        return self._parts.reducer

    def sample_times(self, sketch: LatenessSketch | None) -> None:
        """Sample the lateness and disorder of the events it takes into ``sketch`` (shared
        by the processors of a queue's consumer type; None: stop).

        >>> from types import SimpleNamespace as Ev
        >>> from streams.eventtime.lateness import LatenessSketch
        >>> p, sketch = Processor(OrderingPolicy(out_of_order=5)), LatenessSketch(every=1)
        >>> p.sample_times(sketch)
        >>> _ = p.on_events([Ev(value=0, event_time=t, arrival_time=12.0, token=0) for t in (10.0, 7.0)])
        >>> seen = sketch.observed(12.0)
        >>> seen.samples, round(seen.quantile("lateness", 1.0), 1), round(seen.quantile("disorder", 1.0), 1)
        (2, 4.9, 3.0)
        """
        self._sampler = sketch

    # ------------------------------------------------------------------ observations

    def on_events(self, events: Iterable[EventLike], partition: Hashable = 0) -> Output:
        """Process events of one input, in arrival order: a batch of columns in runs where
        the declaration allows (:mod:`streams.eventtime.runs`), else event by event
        (:mod:`streams.eventtime.ingest`)."""
        out = Output()
        inp = self._input(partition)
        ingest: Ingest = self._parts.ingest
        if ingest.in_runs and hasattr(events, "columns") and not (inp.generating is None or inp.completed):
            take_in_runs(ingest, self._flow, inp, events, out, self._sampler)
        else:  # a completed input's error is the per-event way's
            ingest.run(self._flow, inp, events, out, self._sampler)
        return self._done(out)

    def on_tick(self, arrival_time: float, partition: Hashable | None = None, *, strict: bool = False) -> Output:
        """The processing clock reached ``arrival_time`` with nothing new (all inputs when
        ``partition`` is None): late-arrival watermarks and idle timeouts move.

        ``strict``: the clock is a record's arrival (a backlog read, or the catch-up before a
        batch), and a record arriving at this very instant counts first (time-semantics: an
        event at the instant a timeout falls due is ingested first), so only the timeouts due
        strictly before ``arrival_time`` fire; one due exactly then fires with the next
        observation past it."""
        out = Output()
        flow, late = self._flow, self._parts.late
        arrival_time = bound_micros(arrival_time)  # as every time inside, from here on
        targets = self._inputs if partition is None else (self._input(partition),)
        for inp in targets:
            if inp.completed:
                continue
            _clock(inp, arrival_time)
            if late < FOREVER:
                flow.lift(inp, arrival_time - late, arrival_time, out)
            if arrival_time > inp.idle_check or (arrival_time == inp.idle_check and not strict):
                flow.idle(inp, arrival_time, out, strict=strict)
        if flow.shape.every is not None:  # then the updates due by the clock, of windows still open
            flow.tick(arrival_time, out, strict=strict)
        return self._done(out)

    def advance_time(self, watermark: float, arrival_time: float | None, partition: Hashable = 0) -> Output:
        """A producer's punctuation (StreamInsight CTI): the input's watermark moves to at
        least ``watermark``; later events below it follow the policy's action. With
        ``arrival_time`` None the clock stays where it is (its arrival is not known)."""
        out = Output()
        inp = self._input(partition)
        arrival = None if arrival_time is None else bound_micros(arrival_time)
        self._observe(inp, arrival, out)
        self.counters.punctuations += 1
        self._flow.lift(inp, bound_micros(watermark), arrival, out)
        return self._done(out)

    def import_watermark(self, watermark: float, arrival_time: float, partition: Hashable = 0) -> Output:
        """Follow another stream's watermark (StreamInsight ``AdvanceTimeImportSettings``);
        the runtime calls this with each watermark the source stream publishes."""
        out = Output()
        inp = self._input(partition)
        arrival = bound_micros(arrival_time)
        self._observe(inp, arrival, out)
        self._flow.lift(inp, bound_micros(watermark), arrival, out)
        return self._done(out)

    def on_completed(self, partition: Hashable = 0, arrival_time: float | None = None) -> Output:
        """The input completed: its watermark becomes +infinity (a final CTI)."""
        out = Output()
        inp = self._input(partition)
        arrival = None if arrival_time is None else bound_micros(arrival_time)
        if arrival is not None:
            _clock(inp, arrival)
        self._flow.lift(inp, FOREVER, arrival, out)
        inp.completed = True
        return self._done(out)

    def flush(self) -> Output:
        """Close the query: every input completes and every open window closes (``final``)."""
        out = Output()
        for inp in self._inputs:
            if not inp.completed:
                self._flow.lift(inp, FOREVER, None, out)
                inp.completed = True
        return self._done(out)

    # ------------------------------------------------------------------ state

    @property
    def watermark(self) -> float:
        """The watermark that closes windows, in seconds: the minimum over inputs (with
        substreams, the partition's floor, which every substream has passed)."""
        merged = self._flow.merged  # divided as to_seconds does, here: read at every step
        value = self._flow.inputs[0].value if merged is None else merged.value  # one input is its own watermark
        if value == FOREVER or value == NEVER:
            # The shared infinities: an activation keeps the last one it saw (a completed
            # stream's is +inf), and a float of its own would be 32 bytes a stream.
            return FOREVER if value > 0 else NEVER
        return value / PER_SECOND

    @property
    def clock(self) -> float | None:
        """The processing clock: the newest arrival time (of events, ticks, punctuation)
        any input has seen; None before the first.

        >>> p = Processor(OrderingPolicy())
        >>> p.clock, p.on_tick(5.0).watermark, p.clock
        (None, -inf, 5.0)
        """
        clock = max((i.clock for i in self._inputs), default=NEVER)
        return None if clock == NEVER else to_seconds(clock)

    @property
    def merged(self) -> MergedWatermark | None:
        """The merge of several inputs (``holder``, ``values()``); None with one input."""
        return self._flow.merged

    def held_since(self, partition: Hashable | None = None) -> object:
        """The oldest token still held in an open window or a join (of ``partition``, or of
        any input, when several inputs are merged), or None: the runtime must not checkpoint
        past it. Tokens are opaque to the core (the runtime's are ``SequenceToken``); they
        only compare."""
        oldest: Any = None
        for store in self._flow.stores():
            for held in store.tokens():
                tokens = [held]
                if self._by_name is not None:  # per input
                    tokens = list(held.values()) if partition is None else [held.get(partition)]
                for token in tokens:
                    if token is not None and (oldest is None or token < oldest):
                        oldest = token
        return oldest

    def join_pending(self) -> list[EventOutcome]:
        """The left events of an interval join whose pairs are not emitted yet (none
        without a join)."""
        store = self._flow.store
        return store.pending() if isinstance(store, JoinStore) else []

    def snapshot(self) -> bytes:
        """This processor's state as bytes (:mod:`streams.eventtime.snapshot`); raises
        ``SnapshotError`` when it cannot be serialized."""
        return snapshot(self)

    def restore(self, state: bytes) -> None:
        """Take the state :meth:`snapshot` gave (of a processor declared the same way)."""
        restore(self, state)

    def next_tick(self) -> float:
        """The earliest processing time at which :meth:`on_tick` would close a window, fire
        an idle timeout or emit an update, in seconds (``inf``: a tick would change nothing but the
        watermark), so a runtime with many quiet processors ticks only those that are due."""
        due, late = FOREVER, self._parts.late
        if late < FOREVER:
            for store in self._flow.stores():
                if store.next_close < FOREVER:
                    due = min(due, store.next_close + late)
        for inp in self._inputs:
            if not inp.completed and inp.idle_check < due:
                due = inp.idle_check
        if self._flow.shape.every is not None:  # an update due by the clock (Every(seconds))
            for store in self._flow.stores():
                if isinstance(store, WindowStore) and store.early is not None:
                    due = min(due, store.early.next_due)
        return to_seconds(due)

    def open_windows(self) -> list[tuple[Hashable, float, float]]:
        """``(key, start, end)`` of every open window holding data (in seconds), by end then key order."""
        found: list[tuple[float, int, Hashable, float]] = []
        for store in self._flow.stores():
            found.extend((end, store.order, key, start) for end, key, start in store.entries())
        found.sort(key=lambda f: (f[0], f[1]))
        return [(key, to_seconds(start), to_seconds(end)) for end, _, key, start in found]

    def metrics(self) -> EventTimeMetrics:
        """A snapshot of the counters and watermarks (ASA's job metrics)."""
        clock = max((i.clock for i in self._inputs), default=NEVER)  # microseconds
        merged = self._flow.merged
        mark = merged.value if merged is not None else self._flow.inputs[0].value
        wm = to_seconds(mark)
        return EventTimeMetrics(
            counters=self.counters.as_dict(),
            watermark=wm,
            watermarks={i.name: to_seconds(i.mark.value) for i in self._inputs},
            # A substream's own value may lag the floor until it is next visited.
            substream_watermarks={k: max(to_seconds(lane[0].value), wm) for k, lane in self._flow.lanes.items()},
            delay=to_seconds(clock - mark) if mark > NEVER and clock > NEVER else FOREVER,
            holder=self._flow.merged.holder if self._flow.merged is not None else None,
            open_windows=len(self.open_windows()) if self.window is not None else 0,
        )

    # ------------------------------------------------------------------ helpers

    def _input(self, partition: Hashable) -> Input:
        by_name = self._by_name
        if by_name is None:
            inp = self._flow.inputs[0]
            if inp.name == partition:
                return inp
        else:
            found = by_name.get(partition)
            if found is not None:
                return found
        raise ConfigurationError(
            f"unknown input {partition!r}: declare it in Processor(inputs=[...]) "
            f"(declared: {[i.name for i in self._inputs]!r})"
        )

    def _observe(self, inp: Input, arrival_time: float | None, out: Output) -> None:
        """An observation carried in the queue: like an event, it moves the clock and fires
        the idle timeouts that fell due strictly before it."""
        if inp.completed:
            raise StreamCompletedError(f"input {inp.name!r} has completed; it takes nothing more")
        if arrival_time is None:
            return
        _clock(inp, arrival_time)
        if arrival_time > inp.idle_check:
            self._flow.idle(inp, arrival_time, out, strict=True)

    def _done(self, out: Output) -> Output:
        out.watermark = self.watermark
        return out


def _clock(inp: Input, arrival_time: float) -> None:
    if arrival_time > inp.clock:
        inp.clock = arrival_time
