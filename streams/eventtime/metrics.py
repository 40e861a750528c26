"""What the event-time core makes observable (ASA's job metrics, at least).

:class:`Counters` are updated in place by the processor; :class:`EventTimeMetrics` is a
snapshot with the counters and the watermarks, taken by ``Processor.metrics()``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Counters:
    """Event counts by fate. An event both late and out of order counts in both families
    (and once in ``adjusted``, when both moved its timestamp).

    ``*_accepted`` count events kept unchanged under ``action="accept"``.
    """

    events: int = 0  # every event observed
    early_arrival: int = 0  # dropped: too far ahead of its arrival time
    late_arrival_adjusted: int = 0
    late_arrival_dropped: int = 0
    late_arrival_accepted: int = 0
    out_of_order_adjusted: int = 0
    out_of_order_dropped: int = 0
    out_of_order_accepted: int = 0
    adjusted: int = 0  # events whose timestamp moved (late, out of order or both), once each
    window_closed: int = 0  # dead-lettered: every window for it had closed
    invalid_timestamp: int = 0  # dead-lettered: TIMESTAMP BY found no usable time
    invalid_value: int = 0  # dead-lettered: its key or aggregate raised
    windows_emitted: int = 0
    idle_timeouts: int = 0
    punctuations: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EventTimeMetrics:
    """A snapshot of a processor's metrics.

    - ``watermark``: the merged watermark (the only one with a single input);
    - ``watermarks``: each input's (partition's) watermark;
    - ``substream_watermarks``: each substream's, when substreams are on;
    - ``delay``: processing clock minus the merged watermark (ASA's *watermark delay*);
    - ``holder``: the input holding the merged watermark back (None with a single input).
    """

    counters: dict[str, int]
    watermark: float
    watermarks: dict[Hashable, float]
    substream_watermarks: dict[Hashable, float] = field(default_factory=dict)
    delay: float = 0.0
    holder: Hashable | None = None
    open_windows: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
