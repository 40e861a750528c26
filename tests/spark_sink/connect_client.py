"""A Spark Connect client reading the handoff log, as a user's does: no JVM in this process,
``SparkSession.builder.remote(URL)``, ``spark_sink.register(spark)``, then reads that the
server plans and runs (its Python workers import ``spark_sink``).

Run as ``connect_client.py URL SCENARIO STORE WORKDIR``; prints one JSON line, window rows as
``[start µs, end µs, key, count, total]``:

- ``read``: ``{"batch": rows, "available_now": rows, "jvm": bool}``, a batch read and an
  ``availableNow`` streaming read into parquet of the whole log;
- ``restart``: ``{"stream": rows, "batches": micro-batches committed}``, a processing-time
  query started on what the log holds, stopped one micro-batch after ``WORKDIR/later.json``'s
  first rows are handed off, the second rows handed off while it is stopped, and the query
  restarted from its checkpoint (``availableNow``) to the end;
- ``unknown``: ``{"error": class, "message": text}``, a read of a stream that is not declared.

Its own process: a Connect client and a classic session cannot share one (creating the
client switches ``pyspark.sql.functions`` to Connect for the whole process)."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

import spark_sink
from tests.spark_sink.handoff_testkit import STREAM, WindowRow, collect_windows, open_handoff

warnings.simplefilter("ignore", FutureWarning)  # pyspark's note on the pandas version
LIMIT = {"maxRecordsPerTrigger": "100"}  # several micro-batches of the ~500 rows


def windows(spark: SparkSession, store: str, **options: str) -> DataFrame:
    # trimOnCommit off: the classic session reads the same log afterwards
    reader = spark.readStream.format("headrace").option("path", store).option("stream", STREAM)
    return reader.option("trimOnCommit", "false").options(**options).load()


def to_parquet(df: DataFrame, workdir: Path, **trigger: object):
    return (
        df.writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def committed(workdir: Path) -> int:
    """The micro-batches the query's checkpoint records as committed (Spark's own record:
    the progress a Connect client polls lags behind it)."""
    commits = workdir / "checkpoint" / "commits"
    return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.exists() else 0


def read(spark: SparkSession, store: str, workdir: Path) -> dict[str, object]:
    from pyspark.core.context import SparkContext

    batch = collect_windows(spark.read.format("headrace").option("path", store).option("stream", STREAM).load())
    to_parquet(windows(spark, store), workdir, availableNow=True).awaitTermination(300)
    streamed = collect_windows(spark.read.parquet(str(workdir / "out")))
    return {"batch": batch, "available_now": streamed, "jvm": SparkContext._active_spark_context is not None}


def restart(spark: SparkSession, store: str, workdir: Path) -> dict[str, object]:
    later: list[list[WindowRow]] = json.loads((workdir / "later.json").read_text())
    handoff = open_handoff(Path(store))
    try:
        running = to_parquet(windows(spark, store, **LIMIT), workdir, processingTime="100 milliseconds")
        running.processAllAvailable()
        seen = committed(workdir)
        handoff.append_windows([tuple(row) for row in later[0]])
        deadline = time.monotonic() + 300
        while committed(workdir) < seen + 1:  # stopped after one of the new rows' batches, one most likely to do
            if time.monotonic() > deadline:
                raise TimeoutError(f"no micro-batch after the append ({committed(workdir)} committed)")
            time.sleep(0.05)
        running.stop()
        handoff.append_windows([tuple(row) for row in later[1]])
        to_parquet(windows(spark, store, **LIMIT), workdir, availableNow=True).awaitTermination(300)
    finally:
        handoff.store.close()
    return {"stream": collect_windows(spark.read.parquet(str(workdir / "out"))), "batches": committed(workdir)}


def unknown(spark: SparkSession, store: str, workdir: Path) -> dict[str, object]:
    try:
        spark.read.format("headrace").option("path", store).option("stream", "no-such-stream").load().collect()
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
    return {"error": None, "message": ""}


SCENARIOS = {"read": read, "restart": restart, "unknown": unknown}


def main(url: str, scenario: str, store: str, workdir: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        spark_sink.register(spark)
        print(json.dumps(SCENARIOS[scenario](spark, store, Path(workdir))))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
