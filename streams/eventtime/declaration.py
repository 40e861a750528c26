"""What one event-time query declares: its policy, window, aggregate, keys, inputs and the rest.

Written once here and passed through: :class:`~streams.eventtime.spec.EventTime` (a consumer
type's declaration) is one, :class:`~streams.eventtime.parts.ProcessorParts` prepares one for
its processors, and :class:`~streams.eventtime.processor.Processor` takes its fields as its
own arguments (:func:`declared_by`).

>>> from streams.eventtime.windows import Tumbling
>>> Declaration(OrderingPolicy(out_of_order=5), Tumbling(60), group_by="booth").inputs
()
>>> Declaration(inputs=["a", "b"], imports={"b": "a"}).inputs
('a', 'b')
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from streams.eventtime.aggregates import Count, Reducer
from streams.eventtime.dedup import Dedup
from streams.eventtime.joins import IntervalJoin
from streams.eventtime.policy import Extractor, OrderingPolicy
from streams.eventtime.watermark import EVERY_EVENT, WatermarkGeneration
from streams.eventtime.windows import WindowSpec

P = ParamSpec("P")
S = TypeVar("S")


@dataclass(frozen=True)
class Declaration:
    """An event-time query's settings (``docs/event-time.md`` describes each).

    ``inputs`` empty: one input, named when a processor is made (a stream's activation names
    it after its stream); otherwise the merged inputs every processor has, ``imports``
    mapping an input to the input whose watermark it follows. ``trace`` records every step
    of a processor (for a replay's explanation; it grows with the events).
    """

    policy: OrderingPolicy = field(default_factory=OrderingPolicy)
    window: WindowSpec | None = None
    aggregate: Reducer[Any, Any] = field(default_factory=Count)
    _: KW_ONLY
    group_by: str | Extractor | None = None
    select: str | Extractor | None = None
    generation: WatermarkGeneration = EVERY_EVENT
    inputs: Sequence[Hashable] = ()
    imports: Mapping[Hashable, Hashable] | None = field(default_factory=dict)  # None: no imports
    join: IntervalJoin | None = None
    dedup: Dedup | None = None
    trace: bool = False

    def __post_init__(self) -> None:
        # Arguments as given, settings as kept: a tuple of inputs and a dict of imports.
        if not isinstance(self.inputs, str):
            object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "imports", dict(self.imports or {}))


def declared_by(
    declaration: Callable[P, Declaration],
) -> Callable[[Callable[[S, Declaration], None]], Callable[Concatenate[S, P], None]]:
    """Give an ``__init__`` that takes a :class:`Declaration` the declaration's own arguments:
    they are written once, in the declaration, and checked there.

    >>> class Query:
    ...     @declared_by(Declaration)
    ...     def __init__(self, declared: Declaration) -> None:
    ...         self.declared = declared
    >>> Query(group_by="booth").declared.group_by
    'booth'
    """

    def wrap(init: Callable[[S, Declaration], None]) -> Callable[Concatenate[S, P], None]:
        @functools.wraps(init)
        def __init__(self: S, /, *args: P.args, **kwargs: P.kwargs) -> None:
            init(self, declaration(*args, **kwargs))

        # What help() and inspect show: the declaration's arguments, after self.
        own = inspect.signature(init)
        vars(__init__)["__signature__"] = own.replace(
            parameters=[*list(own.parameters.values())[:1], *inspect.signature(declaration).parameters.values()]
        )
        return __init__

    return wrap
