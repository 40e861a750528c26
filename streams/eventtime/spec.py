"""How a consumer type declares that it works in event time.

:class:`EventTime` is that declaration (settings), never an instant: one event's time is a
float of POSIX seconds (``Event.event_time``, ``EventOutcome.event_time``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from streams.core.errors import ConfigurationError
from streams.core.observer import TypeHooks, hooks_of
from streams.eventtime.declaration import Declaration
from streams.eventtime.parts import ProcessorParts
from streams.eventtime.processor import Processor


@dataclass(frozen=True)
class EventTime(Declaration):
    """A consumer type's event-time settings, set as its ``event_time`` class attribute: a
    :class:`~streams.eventtime.declaration.Declaration` whose inputs are namespaces.

    The runtime then feeds the type's activations through the event-time core and calls
    ``on_window(result)`` for every closed window (or, with no window,
    ``on_events(outcomes)`` with the events that passed the ordering policy).

    >>> from streams.eventtime import Count, OrderingPolicy, Tumbling
    >>> class BoothCounts:
    ...     event_time = EventTime(OrderingPolicy(out_of_order=5, timestamp_by="time"),
    ...                            Tumbling(60), Count(), group_by="booth")
    ...     def __init__(self, stream_id): self.results = []
    ...     async def on_window(self, result): self.results.append(result)

    ``inputs`` merges several namespaces into one clock, for a type registered with
    ``@provider.implicit(*inputs)`` (one activation per key): each namespace is an input with
    its own watermark; the activation's watermark is their minimum; ``imports`` maps an input
    to the input whose watermark it follows instead of generating its own (a slow reference
    stream following a fast one). Without a window, ``on_events(events)`` then receives the
    events of every input in event-time order, each once, when the merged watermark has
    passed them (see ``docs/event-time.md``, "Several inputs, one clock").

    >>> EventTime(OrderingPolicy(timestamp_by="time"), inputs=("tolls", "prices"),
    ...           imports={"prices": "tolls"}).processor().watermark
    -inf

    ``join`` joins the two ``inputs`` (left, right) by key and time (an
    :class:`~streams.eventtime.joins.IntervalJoin`); the pairs go to ``on_join(pairs)``
    (or, with an ``EventHandoff``, to Spark: one row a pair). See ``docs/event-time.md``,
    "Interval joins".

    >>> from streams.eventtime.joins import IntervalJoin
    >>> spec = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("clicks", "orders"),
    ...                  join=IntervalJoin(lower=0, upper=600, how="left"), group_by="user")
    >>> spec.processor().merged.holder
    'clicks'

    ``dedup`` drops an event whose key was already seen within a horizon of event time (a
    :class:`~streams.eventtime.dedup.Dedup`), after the ordering policy and before the
    windows; the drop is lettered ``duplicate``. See ``docs/event-time.md``, "Deduplication".

    >>> from types import SimpleNamespace as Ev
    >>> from streams.eventtime.dedup import Dedup
    >>> p = EventTime(dedup=Dedup(key="id", within=60)).processor()
    >>> out = p.on_events([Ev(value={"id": "p1"}, event_time=t, arrival_time=t, token=t) for t in (1.0, 2.0)])
    >>> [o.record.value for o in out.events], [d.reason for d in out.dead_letters]
    ([{'id': 'p1'}], ['duplicate'])
    """

    inputs: tuple[str, ...] = field(default=(), kw_only=True)  # namespaces

    def __post_init__(self) -> None:
        inputs = self.inputs
        if isinstance(inputs, str) or not all(isinstance(n, str) and n for n in inputs):
            raise ConfigurationError(f"inputs is a tuple of namespaces, not {inputs!r}")
        if self.trace:
            raise ConfigurationError("trace is a Processor's (a replay's): a consumer type's activations keep none")
        super().__post_init__()
        inputs = self.inputs
        if inputs and (len(inputs) < 2 or len(set(inputs)) != len(inputs)):
            raise ConfigurationError(f"inputs names two or more distinct namespaces, not {inputs!r}")
        if self.imports and not inputs:
            raise ConfigurationError("imports maps one of the inputs to another: declare inputs=(...)")
        if inputs and self.policy.substreams:
            raise ConfigurationError("substreams (policy.over) apply within one input: merged inputs take none")
        if self.join is not None and (len(inputs) != 2 or self.window is not None):
            raise ConfigurationError("join takes inputs=(left, right), two namespaces, and no window")
        if inputs:
            self.processor()  # refuses imports outside the inputs, or in a cycle, now

    def __hash__(self) -> int:
        return hash(
            (
                self.policy,
                self.window,
                self.group_by,
                self.inputs,
                tuple((self.imports or {}).items()),
                self.join,
                self.dedup,
            )
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_parts", None)  # made again where it is needed (it holds functions)
        return state

    def check_consumer(self, cls: type) -> TypeHooks:
        """Refuse, at registration, a consumer type that could not receive the results;
        its hooks (checked once per type, however many activations it has)."""
        needed = "on_join" if self.join is not None else "on_window" if self.window is not None else "on_events"
        hooks = hooks_of(cls)
        if needed in hooks.checked:
            return hooks
        if hasattr(cls, "handoff"):
            pass  # its windows (or events) go to Spark; on_window (on_events) is optional
        elif not callable(getattr(cls, needed, None)):
            raise ConfigurationError(
                f"{cls.__qualname__} declares event_time "
                + (
                    "with a join: it needs on_join(pairs)"
                    if self.join is not None
                    else "with a window: it needs on_window(result)"
                    if self.window is not None
                    else "without a window: it needs on_events(outcomes)"
                )
            )
        hooks.checked.add(needed)
        return hooks

    def processor(self, partition: Hashable = 0) -> Processor:
        """A fresh processor with these settings (one per activation): one input named
        ``partition``, or the declared ``inputs``. What its activations share is prepared
        once (:meth:`parts`); each gets only its own state."""
        return Processor.of(self.parts(), partition)

    def parts(self) -> ProcessorParts:
        """These settings checked and prepared for building processors, once per declaration.

        >>> from streams.eventtime import Tumbling
        >>> spec = EventTime(window=Tumbling(60))
        >>> spec.parts() is spec.parts(), spec.processor("a").policy is spec.policy
        (True, True)
        """
        parts: ProcessorParts | None = self.__dict__.get("_parts")
        if parts is None:
            parts = ProcessorParts(self)
            object.__setattr__(self, "_parts", parts)  # a cache, not a setting: frozen still
        return parts
