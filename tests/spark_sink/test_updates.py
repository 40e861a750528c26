"""Early and updated window results in Spark: the handoff stream carries every update and
final result with its revision, and the upsert of docs/spark.md ("Updates") leaves exactly
the table Spark's own batch ``groupBy(window(...))`` over the raw events gives, whatever the
micro-batches and however often a replay wrote an update again."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_sink import Handoff
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter
from streams.backends.embedded.store import EmbeddedStore
from streams.eventtime import Combined, Count, Every, OrderingPolicy, Processor, Sum, Tumbling, WindowResult
from tests.spark_sink.handoff_testkit import (
    STREAM,
    WINDOW_SECONDS,
    RawEvent,
    collect_windows,
    partition_of,
    source_of,
    spark_warnings,
)

DECLARED = Handoff(STREAM, {"count": "bigint", "total": "double"})


# The upsert of docs/spark.md, as it stands there.
WINDOW = ["stream_id", "key", "window_start", "window_end"]


def latest(rows: DataFrame) -> DataFrame:
    """Each window's row with the highest revision."""
    newest_first = Window.partitionBy(*WINDOW).orderBy(F.col("revision").desc())
    return rows.withColumn("_n", F.row_number().over(newest_first)).where("_n = 1").drop("_n")


def upsert_into(spark: SparkSession, table: str):
    def each(batch: DataFrame, batch_id: int) -> None:
        # Looked for, not read and caught: Spark logs a Java stack trace for a missing path.
        if Path(table, "_SUCCESS").exists():  # a table written whole before
            current = spark.read.parquet(table)
        else:  # the first batch: no table yet
            current = batch.limit(0)
        # materialized before the overwrite: the new table no longer reads the old one
        merged = latest(current.unionByName(batch)).localCheckpoint()
        merged.write.mode("overwrite").parquet(table)

    return each


def results_of(events: list[RawEvent]) -> list[tuple[int, WindowResult]]:
    """The updates (every 4 events of a window) and final results a windowed consumer
    emits for ``events`` in time order, each with the partition its key's stream maps to."""
    processor = Processor(
        OrderingPolicy(),
        Tumbling(WINDOW_SECONDS, emit=Every(events=4)),
        Combined({"count": Count(), "total": Sum()}),
        group_by="key",
        select="value",
    )
    ordered = sorted(events)
    records = [
        SimpleNamespace(value={"key": key, "value": value}, event_time=m / 1e6, arrival_time=m / 1e6, token=i)
        for i, (m, key, value) in enumerate(ordered)
    ]
    out = []
    for i in range(0, len(records), 250):
        out += processor.on_events(records[i : i + 250]).windows
    out += processor.flush().windows
    return [(partition_of(w.key), w) for w in out]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[HandoffWriter]:
    store = EmbeddedStore(tmp_path / "store")
    yield HandoffWriter(HandoffLog(store), STREAM, DECLARED.schema())
    store.close()


def test_the_upsert_of_updates_leaves_the_batch_recomputation(spark, events, expected, log, tmp_path):
    results = results_of(events)
    updates = [w for _, w in results if not w.final]
    assert len(updates) > len(expected)  # windows were updated, many of them more than once
    assert max(w.revision for w in updates) >= 2
    rng = random.Random(3)
    store = log.log.store
    for partition, result in results:
        appended = [result, result] if not result.final and rng.random() < 0.1 else [result]  # a replay
        with store.transaction() as conn:
            log.append(conn, partition, [DECLARED.row(source_of(partition), r) for r in appended])
    # A reader that takes the final rows alone gets the same table (read before the stream,
    # whose commits trim what it consumed).
    handed = spark.read.format("headrace").option("path", str(tmp_path / "store")).option("stream", STREAM).load()
    assert collect_windows(handed.where("final")) == expected
    assert handed.where("not final").count() > 0
    table = str(tmp_path / "table")
    with spark_warnings(spark) as warned:
        query = (
            spark.readStream.format("headrace")
            .option("path", str(tmp_path / "store"))
            .option("stream", STREAM)
            .option("maxRecordsPerTrigger", "500")
            .load()
            .writeStream.foreachBatch(upsert_into(spark, table))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        logged = warned()
    # The first batch found no table without Spark's stack trace for a missing path.
    assert "Assume no metadata directory" not in logged and "FileNotFoundException" not in logged, logged[:2000]
    assert len([p for p in query.recentProgress if p["numInputRows"]]) > 3  # several micro-batches
    upserted = spark.read.parquet(table)
    assert collect_windows(upserted) == expected
    assert upserted.where("not final").count() == 0  # every window ended at its final result
