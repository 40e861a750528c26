"""What every processor of one declaration shares: its settings, checked and prepared once.

A worker makes a processor per activation, so per stream id; everything that depends only on
the declaration (the policy's tolerances, the window assigner, the aggregate, the key and
timestamp readers, the inputs and imports) is worked out here once, and each processor is
built from these parts with only its own mutable state (watermarks, windows, counters).
``EventTime`` keeps one :class:`ProcessorParts` for all its activations.

>>> from streams.eventtime.policy import OrderingPolicy
>>> from streams.eventtime.windows import Tumbling
>>> from streams.eventtime.declaration import Declaration
>>> parts = ProcessorParts(Declaration(OrderingPolicy(out_of_order=5), Tumbling(60), group_by="booth"))
>>> parts.delay, parts.assigner.step, parts.key_field, parts.inputs  # microseconds inside
(5000000, 60000000, 'booth', None)

The merged inputs of a processor: each one's clock, watermark and idle bookkeeping, and
which input follows (imports) another's watermark.

>>> check_acyclic({"prices": "tolls"})
>>> check_acyclic({"a": "b", "b": "a"})
Traceback (most recent call last):
...
streams.core.errors.ConfigurationError: imports form a cycle through input 'a'
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from streams.core.errors import ConfigurationError
from streams.core.micros import to_micros
from streams.eventtime.aggregates import Reducer
from streams.eventtime.counted import CountStore
from streams.eventtime.declaration import Declaration
from streams.eventtime.joins import JoinStore
from streams.eventtime.policy import Action, key_extractor, timestamp_extractor
from streams.eventtime.sessions import SessionStore
from streams.eventtime.sliding import SlidingStore
from streams.eventtime.watermark import FOREVER, NEVER, Watermark, WatermarkGeneration
from streams.eventtime.windows import (
    Hopping,
    Session,
    Sliding,
    Tumbling,
    WindowAssigner,
    WindowStore,
    counted,
)

Store = WindowStore | SessionStore | JoinStore | CountStore | SlidingStore
"""The open windows governed by one watermark: fixed windows' panes, sessions, the state
of an interval join, windows of a count of events, or sliding windows."""

Lane = tuple[Watermark, Store | None]
"""A substream's watermark and its windows (None without a window)."""


class Input(Watermark):
    """One merged input (a partition or a stream): its clock, and its watermark, which it is
    itself (``mark``): a stream's activation holds one object for both, not two (48 bytes
    less an activation).

    With substreams, ``mark`` is the partition's *floor*: what every substream has passed.
    """

    __slots__ = ("clock", "idle_check", "completed", "importers", "floor_close")

    def __init__(self, name: Hashable, generation: WatermarkGeneration | None, delay: float) -> None:
        super().__init__(name, generation, delay)
        self.clock = NEVER  # processing clock: the newest arrival time seen
        self.idle_check = FOREVER  # lower bound of the next idle timeout due
        self.completed = False
        self.importers: tuple[Input, ...] = ()  # the inputs following this one's watermark
        # Substreams: at most the earliest close time of any substream's windows. A rise of
        # the floor (mark) below it closes nothing, so it need not visit every substream.
        self.floor_close = FOREVER

    @property
    def mark(self) -> Watermark:
        """Its watermark: itself."""
        return self

    def __repr__(self) -> str:
        return f"Input({self.name!r}, watermark={self.value})"


def check_acyclic(imports: Mapping[Hashable, Hashable]) -> None:
    """Refuse imports that follow each other round in a cycle."""
    for start in imports:
        seen, node = {start}, imports[start]
        while node in imports:
            if node in seen:
                raise ConfigurationError(f"imports form a cycle through input {node!r}")
            seen.add(node)
            node = imports[node]


class ProcessorParts:
    """A processor declaration, validated, with what its processors read prepared.

    ``inputs`` None (none declared): each processor has one input, named when it is made (a
    stream's activation names it after its stream); otherwise the merged inputs every
    processor has.
    Raises :class:`~streams.core.errors.ConfigurationError` for a declaration no processor
    could follow.
    """

    __slots__ = (
        "policy",
        "window",
        "reducer",
        "trace",
        "substreams",
        "generation",
        "early",
        "late",
        "delay",
        "idle_timeout",
        "action",
        "assigner",
        "session",
        "counted",
        "sliding",
        "join",
        "timestamp_of",
        "key_of",
        "key_field",
        "select",
        "reducer_name",
        "inputs",
        "imports",
        "dedup",
        "ingest",
        "flow_shape",
    )

    def __init__(self, declared: Declaration) -> None:
        policy, window, group_by, join = declared.policy, declared.window, declared.group_by, declared.join
        inputs, trace = declared.inputs or None, declared.trace
        self.policy = policy
        self.join = join
        self.dedup = declared.dedup
        self.window = window
        self.reducer: Reducer[Any, Any] = declared.aggregate
        self.trace = trace
        self.substreams = substreams = policy.substreams
        if substreams and group_by is not None and group_by != policy.over:
            raise ConfigurationError(
                "with substreams (policy.over) windows are per substream key: leave group_by "
                "unset or give it the same value as over"
            )
        key_spec = policy.over if substreams else group_by
        self.generation = declared.generation
        # Tolerances and timeouts in integer microseconds, as every time inside the core.
        self.early = FOREVER if policy.early_arrival is None else to_micros(policy.early_arrival)
        self.late = FOREVER if policy.late_arrival is None else to_micros(policy.late_arrival)
        self.delay = to_micros(policy.out_of_order)
        self.idle_timeout = FOREVER if window is None or window.idle_timeout is None else to_micros(window.idle_timeout)
        self.action = Action(policy.action)
        # Fixed windows (tumbling, hopping) have an assigner; sessions have none.
        self.session = window if isinstance(window, Session) else None
        # Windows of a count of events have a store of their own (streams.eventtime.counted).
        timed = isinstance(window, (Tumbling, Hopping)) and not counted(window)
        self.counted = window if isinstance(window, (Tumbling, Hopping)) and not timed else None
        self.assigner = WindowAssigner(window) if isinstance(window, (Tumbling, Hopping)) and timed else None
        self.sliding = window if isinstance(window, Sliding) else None
        self.timestamp_of: Callable[[Any], int] | None = timestamp_extractor(policy.timestamp_by, policy.unit)
        self.key_of: Callable[[Any], Hashable] | None = key_extractor(key_spec)
        # A key given as a field name is read inline by the hot path.
        self.key_field = key_spec if isinstance(key_spec, str) else None
        self.select: Callable[[Any], Any] | None = key_extractor(declared.select)  # None: the event's value
        self.reducer_name = type(self.reducer).__name__
        self.imports: dict[Hashable, Hashable] = dict(declared.imports or {})
        # What its processors share, made by the first (streams.eventtime.processor): the
        # per-event way (streams.eventtime.ingest.Ingest) and the flows' FlowShape.
        self.ingest: Any = None
        self.flow_shape: Any = None
        self.inputs = None if inputs is None else self._checked_inputs(tuple(inputs))
        if inputs is None and join is not None:
            raise ConfigurationError("an interval join takes two inputs (left, right): declare the inputs")
        if inputs is None and self.imports:
            raise ConfigurationError("imports maps one of the inputs to another: declare the inputs")

    def _checked_inputs(self, names: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
        """The declared inputs, refused where the rest of the declaration cannot have them."""
        if self.counted is not None and len(names) > 1:
            # Counted in the order one input accepts its events: several have no such order.
            raise ConfigurationError("a window of events counts one input's events: declare it on a single input")
        if self.sliding is not None and len(names) > 1:
            raise ConfigurationError("sliding windows take the events of one input: declare them on a single input")
        if self.dedup is not None and len(names) > 1:
            # Its horizon is measured against one watermark: an input's (or a substream's).
            raise ConfigurationError("dedup applies to the events of one input: declare it on a single-input consumer")
        if not names or len(set(names)) != len(names):
            raise ConfigurationError(f"inputs must be distinct names, at least one: {list(names)!r}")
        if self.substreams and len(names) > 1:
            raise ConfigurationError(
                "substreams (policy.over) apply within one input: use one Processor per "
                "partition, or merge the inputs without substreams"
            )
        for follower, source in self.imports.items():
            if follower not in names or source not in names or follower == source:
                raise ConfigurationError(
                    f"imports maps an input to another declared input, not {follower!r} -> {source!r}"
                )
        check_acyclic(self.imports)
        if self.join is not None and (len(names) != 2 or self.window is not None):
            raise ConfigurationError("an interval join takes two inputs (left, right) and no window")
        return names
