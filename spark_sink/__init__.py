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

    log = spark_sink.HandoffLog(store)           # store: streams.store.EmbeddedStore
    writer = spark_sink.HandoffWriter(log, "averages",
                                      spark_sink.HandoffSchema.windows({"mean": "double"}))
    with store.transaction() as conn:            # the caller's transaction
        writer.append(conn, queue_id, rows)
        ...                                      # the caller's input checkpoint, same conn
"""

from .datasource import HeadraceDataSource, register
from .errors import (
    HandoffDataLostError,
    HandoffSchemaError,
    HandoffStoreNotFoundError,
    UnknownHandoffStreamError,
)
from .handoff import EmbeddedHandoffSink, EventHandoff, Handoff, HandoffSink
from .kafka_log import KafkaHandoffLog
from .kafka_sink import KafkaHandoffSink
from .kafka_storage import KafkaStorage
from .log import HandoffLog, Segment
from .options import ReadOptions
from .schema import HandoffColumn, HandoffSchema
from .storage import EmbeddedStorage, HandoffSplit, HandoffStorage, OffsetRange
from .writer import HandoffWriter

__all__ = [
    "Handoff",
    "HandoffSink",
    "EmbeddedHandoffSink",
    "EmbeddedStorage",
    "EventHandoff",
    "HandoffColumn",
    "HandoffDataLostError",
    "HandoffLog",
    "HandoffSchema",
    "HandoffSchemaError",
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
    "register",
]
