"""Observability: a worker's state as Prometheus metrics, and structured logs.

>>> from streams.observability import configure_logging, serve_metrics, take_snapshot

``docs/observability.md`` lists every metric and the log format.
"""

from streams.core.logcontext import log_context
from streams.runtime.logs import (
    JsonFormatter,
    KeyValueFormatter,
    LogContextFilter,
    TextFormatter,
    configure_logging,
)
from streams.runtime.metrics import HeadraceCollector, MetricsServer, metric_families, serve_metrics
from streams.runtime.snapshot import (
    DEAD_LETTER_REASONS,
    EventTimeTotals,
    QueueSnapshot,
    WorkerSnapshot,
    dead_letter_counts,
    take_snapshot,
)

__all__ = [
    "DEAD_LETTER_REASONS",
    "EventTimeTotals",
    "HeadraceCollector",
    "JsonFormatter",
    "KeyValueFormatter",
    "LogContextFilter",
    "TextFormatter",
    "MetricsServer",
    "QueueSnapshot",
    "WorkerSnapshot",
    "configure_logging",
    "dead_letter_counts",
    "log_context",
    "metric_families",
    "serve_metrics",
    "take_snapshot",
]
