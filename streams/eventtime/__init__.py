"""Event time: ordering policies, watermarks, windows and aggregates, as a pure core.

The contract is ``docs/event-time.md``. The core is synchronous and does no I/O; the runtime
(and ``headrace simulate``) feeds it observations and forwards what it returns.

>>> from streams.eventtime import OrderingPolicy, Processor, Tumbling
>>> p = Processor(OrderingPolicy(out_of_order=5.0), Tumbling(60.0), group_by="device")
"""

from streams.eventtime.aggregates import Collect, Combined, Count, First, Last, Max, Mean, Min, Reducer, Sum
from streams.eventtime.dedup import Dedup
from streams.eventtime.joins import IntervalJoin
from streams.eventtime.policy import Action, EventLike, Extractor, OrderingPolicy, Reason
from streams.eventtime.processor import Processor
from streams.eventtime.results import (
    ADJUSTED,
    DEAD_LETTER,
    DROPPED,
    KEPT,
    Counters,
    EventOutcome,
    EventTimeMetrics,
    JoinResult,
    Output,
    TraceItem,
    WatermarkAdvance,
    WindowResult,
)
from streams.eventtime.spec import EventTime
from streams.eventtime.watermark import EVERY_EVENT, MergedWatermark, Watermark, WatermarkGeneration
from streams.eventtime.windows import Hopping, Session, Sliding, Tumbling, WindowAssigner, WindowSpec, WindowStore

__all__ = [
    "ADJUSTED",
    "DEAD_LETTER",
    "DROPPED",
    "EVERY_EVENT",
    "KEPT",
    "Action",
    "Collect",
    "Combined",
    "Count",
    "Counters",
    "Dedup",
    "EventLike",
    "EventOutcome",
    "EventTime",
    "EventTimeMetrics",
    "Extractor",
    "First",
    "Hopping",
    "IntervalJoin",
    "JoinResult",
    "Last",
    "Max",
    "Mean",
    "MergedWatermark",
    "Min",
    "OrderingPolicy",
    "Output",
    "Processor",
    "Reason",
    "Reducer",
    "Session",
    "Sliding",
    "Sum",
    "TraceItem",
    "Tumbling",
    "Watermark",
    "WatermarkAdvance",
    "WatermarkGeneration",
    "WindowAssigner",
    "WindowResult",
    "WindowSpec",
    "WindowStore",
]
