"""The Spark side of headrace: the handoff log and the ``headrace`` DataSource.

The runtime hands what its watermark-aware consumers finalize to a durable log, one
partition per queue, with dense offsets; Spark reads it in batch or as micro-batches::

    import spark_sink
    spark_sink.register(spark)
    df = (spark.readStream.format("headrace")
          .option("path", "/var/lib/headrace").option("stream", "averages").load())

With the queues on Kafka the log is in Kafka topics, and Spark reads it with
``.option("kafka.bootstrap.servers", "broker:9092")`` instead of ``path``.

This package is what every backend's handoff log shares (the declarations, the schema, the
offsets, the storage protocol) and the DataSource; each backend keeps its own log: the embedded
store's in :mod:`streams.backends.embedded.handoff_log`, Kafka's in
:mod:`streams.backends.kafka.handoff_log`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Loaded on first use (PEP 562): a worker that only declares ``Handoff`` needs neither
# pyspark nor the Kafka client, and a Spark executor reading the log needs no runtime.
_HOMES = {
    "HeadraceDataSource": "spark_sink.datasource",
    "register": "spark_sink.datasource",
    "HandoffDataLostError": "streams.core.errors",
    "HandoffSchemaError": "streams.core.errors",
    "HandoffStoreNotFoundError": "streams.core.errors",
    "UnknownHandoffStreamError": "streams.core.errors",
    "EventHandoff": "spark_sink.handoff",
    "Handoff": "spark_sink.handoff",
    "HandoffSink": "spark_sink.protocols",
    "check_handoff": "spark_sink.handoff",
    "handoff_of": "spark_sink.handoff",
    "ReadOptions": "spark_sink.options",
    "HandoffColumn": "spark_sink.schema",
    "HandoffSchema": "spark_sink.schema",
    "HandoffSplit": "spark_sink.storage",
    "HandoffStorage": "spark_sink.storage",
    "OffsetRange": "spark_sink.offsets",
}

__all__ = [
    "EventHandoff",
    "Handoff",
    "HandoffColumn",
    "HandoffDataLostError",
    "HandoffSchema",
    "HandoffSchemaError",
    "HandoffSink",
    "HandoffSplit",
    "HandoffStorage",
    "HandoffStoreNotFoundError",
    "HeadraceDataSource",
    "OffsetRange",
    "ReadOptions",
    "UnknownHandoffStreamError",
    "check_handoff",
    "handoff_of",
    "register",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'spark_sink' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


if TYPE_CHECKING:  # the lazy names, for type checkers (streams.runtime.backends types its handoff sinks by them)
    from spark_sink.datasource import HeadraceDataSource, register
    from spark_sink.handoff import EventHandoff, Handoff, check_handoff, handoff_of
    from spark_sink.offsets import OffsetRange
    from spark_sink.options import ReadOptions
    from spark_sink.protocols import HandoffSink
    from spark_sink.schema import HandoffColumn, HandoffSchema
    from spark_sink.storage import HandoffSplit, HandoffStorage
    from streams.core.errors import (
        HandoffDataLostError,
        HandoffSchemaError,
        HandoffStoreNotFoundError,
        UnknownHandoffStreamError,
    )
