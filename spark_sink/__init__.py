"""The Spark side of headrace: the handoff log and the ``headrace`` DataSource.

The runtime hands what its watermark-aware consumers finalize to a durable log, one
partition per queue, with dense offsets; Spark reads it in batch or as micro-batches::

    import spark_sink
    spark_sink.register(spark)
    df = (spark.readStream.format("headrace")
          .option("path", "/var/lib/headrace").option("stream", "averages").load())

With the queues on Kafka the log is in Kafka topics, and Spark reads it with
``.option("kafka.bootstrap.servers", "broker:9092")`` instead of ``path``.

The writer side of the embedded log (used by the runtime)::

    log = spark_sink.HandoffLog(store)           # store: streams.embedded.store.EmbeddedStore
    writer = spark_sink.HandoffWriter(log, "averages",
                                      spark_sink.HandoffSchema.windows({"mean": "double"}))
    with store.transaction() as conn:            # the caller's transaction
        writer.append(conn, queue_id, rows)
        ...                                      # the caller's input checkpoint, same conn
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
    "EmbeddedHandoffSink": "spark_sink.handoff",
    "EventHandoff": "spark_sink.handoff",
    "Handoff": "spark_sink.handoff",
    "HandoffSink": "spark_sink.protocols",
    "check_handoff": "spark_sink.handoff",
    "handoff_of": "spark_sink.handoff",
    "KafkaHandoffLog": "spark_sink.kafka.log",
    "KafkaHandoffSink": "spark_sink.kafka.sink",
    "KafkaStorage": "spark_sink.kafka.storage",
    "HandoffLog": "spark_sink.log",
    "Segment": "spark_sink.log",
    "ReadOptions": "spark_sink.options",
    "HandoffColumn": "spark_sink.schema",
    "HandoffSchema": "spark_sink.schema",
    "EmbeddedStorage": "spark_sink.log",
    "HandoffSplit": "spark_sink.log",
    "HandoffStorage": "spark_sink.log",
    "OffsetRange": "spark_sink.offsets",
    "HandoffWriter": "spark_sink.log",
}

__all__ = [
    "EmbeddedHandoffSink",
    "EmbeddedStorage",
    "EventHandoff",
    "Handoff",
    "HandoffColumn",
    "HandoffDataLostError",
    "HandoffLog",
    "HandoffSchema",
    "HandoffSchemaError",
    "HandoffSink",
    "HandoffSplit",
    "HandoffStorage",
    "HandoffStoreNotFoundError",
    "HandoffWriter",
    "HeadraceDataSource",
    "KafkaHandoffLog",
    "KafkaHandoffSink",
    "KafkaStorage",
    "OffsetRange",
    "ReadOptions",
    "Segment",
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
    from spark_sink.handoff import EmbeddedHandoffSink, EventHandoff, Handoff, check_handoff, handoff_of
    from spark_sink.kafka.log import KafkaHandoffLog
    from spark_sink.kafka.sink import KafkaHandoffSink
    from spark_sink.kafka.storage import KafkaStorage
    from spark_sink.log import EmbeddedStorage, HandoffLog, HandoffSplit, HandoffStorage, HandoffWriter, Segment
    from spark_sink.offsets import OffsetRange
    from spark_sink.options import ReadOptions
    from spark_sink.protocols import HandoffSink
    from spark_sink.schema import HandoffColumn, HandoffSchema
    from streams.core.errors import (
        HandoffDataLostError,
        HandoffSchemaError,
        HandoffStoreNotFoundError,
        UnknownHandoffStreamError,
    )
