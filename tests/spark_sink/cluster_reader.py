"""Reads a handoff stream on a Spark cluster of two executor JVMs (``local-cluster``), as a
real cluster does: the DataSource plans in the driver, and each executor's own Python
workers import ``spark_sink`` and read the splits.

Run as ``cluster_reader.py STORE STREAM CHECKPOINT``; prints one JSON line: the executors
that registered, the window rows of a batch read and of a streaming read
(``availableNow``), each row ``[start µs, end µs, key, count, total]``, and the rows of each
micro-batch.

Its own process: the suite's Spark session runs on ``local[2]``, and one JVM holds one
SparkContext."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from tests.helpers import wait_until
from tests.spark_sink.handoff_testkit import QUICK_JVMS, collect_windows, spark_session

EXECUTORS = 2
ROWS_PER_BATCH = 300  # two micro-batches of the ~500 rows: offsets carried from one to the next


def executors(spark: SparkSession) -> int:
    """The executors registered, once both are."""

    def registered() -> int:  # the driver's block manager is listed too
        return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1  # type: ignore[union-attr]

    wait_until(lambda: registered() >= EXECUTORS, 60, 0.2)
    return registered()


def main(store: str, stream: str, checkpoint: str) -> None:
    spark = spark_session(f"local-cluster[{EXECUTORS},1,1024]", "headrace-local-cluster", **QUICK_JVMS)
    try:
        registered = executors(spark)
        batch = collect_windows(spark.read.format("headrace").option("path", store).option("stream", stream).load())
        query = (
            spark.readStream.format("headrace")
            .option("path", store)
            .option("stream", stream)
            .option("trimOnCommit", "false")
            .option("maxRecordsPerTrigger", str(ROWS_PER_BATCH))
            .load()
            .writeStream.format("memory")
            .queryName("handed_off")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        streamed = collect_windows(spark.table("handed_off"))
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        print(json.dumps({"executors": registered, "batch": batch, "stream": streamed, "batches": batches}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
