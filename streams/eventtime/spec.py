"""How a consumer type declares that it works in event time."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from .aggregates import Count, Reducer
from .policy import Extractor, OrderingPolicy
from .processor import Processor
from .watermark import EVERY_EVENT, WatermarkGeneration
from .windows import WindowSpec


@dataclass(frozen=True)
class EventTime:
    """A consumer type's event-time settings, set as its ``event_time`` class attribute.

    The runtime then feeds the type's activations through the event-time core and calls
    ``on_window(result)`` for every closed window (or, with no window,
    ``on_events(outcomes)`` with the events that passed the ordering policy).

    >>> from streams.eventtime import Tumbling, Count
    >>> class BoothCounts:
    ...     event_time = EventTime(OrderingPolicy(out_of_order=5, timestamp_by="time"),
    ...                            Tumbling(60), Count(), group_by="booth")
    ...     def __init__(self, stream_id): self.results = []
    ...     async def on_window(self, result): self.results.append(result)
    """

    policy: OrderingPolicy = field(default_factory=OrderingPolicy)
    window: WindowSpec | None = None
    aggregate: Reducer[Any, Any] = field(default_factory=Count)
    group_by: str | Extractor | None = None
    select: str | Extractor | None = None
    generation: WatermarkGeneration = EVERY_EVENT

    def check_consumer(self, cls: type) -> None:
        """Refuse, at registration, a consumer type that could not receive the results."""
        needed = "on_window" if self.window is not None else "on_events"
        if hasattr(cls, "handoff"):
            return  # its windows (or events) go to Spark; on_window (on_events) is optional
        if not callable(getattr(cls, needed, None)):
            raise ConfigurationError(
                f"{cls.__qualname__} declares event_time "
                + ("with a window: it needs on_window(result)" if self.window is not None
                   else "without a window: it needs on_events(outcomes)")
            )

    def processor(self, partition: Hashable = 0) -> Processor:
        """A fresh processor with these settings (one per activation)."""
        return Processor(
            self.policy,
            self.window,
            self.aggregate,
            group_by=self.group_by,
            select=self.select,
            inputs=(partition,),
            generation=self.generation,
        )
