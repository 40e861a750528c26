"""Throughput of the ``headrace`` DataSource, next to a minimal Arrow source, in one run.

Both read the same rows into Spark's ``noop`` sink on the same session:

* ``headrace``: the handoff log of an embedded store (SQLite index, an Arrow IPC segment per
  append, joined by compaction into files of a Spark batch, two partitions), through
  :mod:`spark_sink.datasource`;
* ``minimal``: a bare Python DataSource that memory-maps one Arrow IPC file holding the same
  rows and yields its record batches, two partitions: the floor any Python source pays;
* with ``--kafka``, also ``kafka``: the same appends in the Kafka handoff log on the test
  broker (Tansu, started for the run), read with ``kafka.bootstrap.servers``.

Each is read as a batch query and as a streaming query (``availableNow``), after a warm-up;
the best of ``--repeat`` runs is reported, and the ratio headrace/minimal.

    .venv/bin/python bench/spark.py [--rows 2000000] [--segment-rows 5000] [--repeat 3] [--kafka]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

import anyio
import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming import DataStreamReader
from pyspark.sql.types import StructType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import spark_sink  # noqa: E402
from bench import timing  # noqa: E402
from bench._common import keep_compiled_modules  # noqa: E402
from bench.timing import Report, best, coverage_line, figure, timed  # noqa: E402
from spark_sink import HandoffSchema  # noqa: E402
from spark_sink.storage import BATCH_ROWS  # noqa: E402
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter  # noqa: E402
from streams.backends.embedded.handoff_retention import compact  # noqa: E402
from streams.backends.embedded.store import EmbeddedStore  # noqa: E402
from streams.backends.kafka.handoff_log import KafkaHandoffLog  # noqa: E402
from tests.kafka_broker import TansuBroker  # noqa: E402

STREAM = "bench"
LOGS = {"headrace": "embedded log", "kafka": "Kafka log"}  # the sources as docs/benchmarks.md names them
PARTITIONS = 2
SCHEMA = HandoffSchema.windows({"count": "bigint", "total": "double"})
Reader = DataFrameReader | DataStreamReader


class MinimalArrowSource(DataSource):
    """Memory-maps one Arrow IPC file and yields its batches, split in two partitions."""

    @classmethod
    def name(cls) -> str:
        return "minimal_arrow"

    def schema(self) -> StructType:
        return StructType.fromJson(SCHEMA.spark_json())

    def reader(self, schema: StructType) -> DataSourceReader:
        return MinimalArrowReader(self.options["path"])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MinimalArrowStreamReader(self.options["path"])


def _halves(path: str) -> list[InputPartition]:
    with pa.memory_map(path) as source:
        n = pa.ipc.open_file(source).num_record_batches
    cut = [n * i // PARTITIONS for i in range(PARTITIONS + 1)]
    return [InputPartition((path, lo, hi)) for lo, hi in pairwise(cut)]


def _batches(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    path, lo, hi = partition.value
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(lo, hi):
            yield reader.get_batch(i)


class MinimalArrowReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[InputPartition]:
        return _halves(self.path)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _batches(partition)


class MinimalArrowStreamReader(DataSourceStreamReader):
    """The whole file is one micro-batch: offset 0 → 1."""

    def __init__(self, path: str) -> None:
        self.path = path

    def initialOffset(self) -> dict[str, int]:
        return {"file": 0}

    def latestOffset(self, start: dict[str, int], limit: object) -> dict[str, int]:
        return {"file": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return _halves(self.path) if start["file"] < end["file"] else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _batches(partition)


def make_rows(rows: int) -> pa.Table:
    """Window results: 1-minute windows over 1000 keys, with a count and a total."""
    i = np.arange(rows, dtype=np.int64)
    start = (1_700_000_000 + (i // 1000) * 60) * 1_000_000
    keys = np.array([f"key-{k:04d}" for k in range(1000)], dtype=object)
    micros = pa.timestamp("us", tz="UTC")
    return SCHEMA.to_table(
        pa.table(
            {
                "window_start": pa.array(start, micros),
                "window_end": pa.array(start + 60_000_000, micros),
                "key": pa.array(keys[i % 1000], pa.string()),
                "count": i % 97,
                "total": (i % 1013) * 0.5,
            }
        )
    )


def build_store(path: str, table: pa.Table, segment_rows: int) -> int:
    """Hand ``table`` off as the runtime would: one append per segment, alternating
    partitions, each in its own transaction, and the appender's compaction, which joins small
    files into files of a Spark batch each (run once at the end: the files come out the same
    as when it runs every ``BATCH_ROWS`` rows). Returns how many files the log holds."""
    with EmbeddedStore(path) as store:
        writer = HandoffWriter(HandoffLog(store), STREAM, SCHEMA)
        for n, offset in enumerate(range(0, table.num_rows, segment_rows)):
            with store.transaction() as conn:
                writer.append(conn, n % PARTITIONS, table.slice(offset, segment_rows))
        for partition in range(PARTITIONS):
            compact(writer.log, STREAM, partition, SCHEMA.arrow)
        ends = writer.end_offsets()
        return sum(len(writer.log.segments(STREAM, p, 0, end)) for p, end in ends.items())


async def build_kafka_log(bootstrap: str, table: pa.Table, segment_rows: int) -> None:
    """The same appends in the Kafka handoff log: one record per segment, as a sink writes."""
    async with KafkaHandoffLog(bootstrap, "bench") as log:
        await log.declare(STREAM, SCHEMA, PARTITIONS)
        ends = dict.fromkeys(range(PARTITIONS), 0)
        for n, offset in enumerate(range(0, table.num_rows, segment_rows)):
            partition = n % PARTITIONS
            ends[partition] = 1 + await log.append(
                STREAM,
                partition,
                table.slice(offset, segment_rows),
                expected=ends[partition],
                source="bench",
                consumer="bench",
                marks={},
            )


def write_ipc(path: str, table: pa.Table) -> None:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=BATCH_ROWS):
            writer.write_batch(batch)


def best_rates(runs: dict[str, Callable[[], None]], rows: int, repeat: int) -> dict[str, Report]:
    """Warm each run up once, then time them in turns (so that load from elsewhere on the
    machine falls on both alike); the best run of each (bench/timing.py: a blocking job,
    timed from its call to its return)."""
    for run in runs.values():
        run()
    reports: dict[str, list[Report]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            with timed(rows, freeze=False) as clock:
                run()
            reports[name].append(clock.report())
    return {name: best(done) for name, done in reports.items()}


def batch_run(df: Callable[[], DataFrame]) -> Callable[[], None]:
    return lambda: df().write.format("noop").mode("overwrite").save()


def stream_run(df: Callable[[], DataFrame], workdir: str) -> Callable[[], None]:
    def run() -> None:
        checkpoint = tempfile.mkdtemp(dir=workdir)  # a fresh query reads everything
        (
            df()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--segment-rows", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kafka", action="store_true", help="also read the Kafka handoff log")
    args = parser.parse_args(argv)

    keep_compiled_modules()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{PARTITIONS}]")
        .appName("headrace-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_sink.register(spark)
    spark.dataSource.register(MinimalArrowSource)

    try:
        with contextlib.ExitStack() as stack:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="headrace-bench-"))
            broker = stack.enter_context(TansuBroker()).bootstrap if args.kafka else None
            compare(spark, workdir, args, broker)
    finally:
        spark.stop()


def compare(spark: SparkSession, workdir: str, args: argparse.Namespace, broker: str | None) -> None:
    """Build the same rows as a handoff log and as one IPC file (and in Kafka, with a
    broker); print the read rates side by side."""
    table = make_rows(args.rows)
    store, ipc = os.path.join(workdir, "store"), os.path.join(workdir, "rows.arrow")
    files = build_store(store, table, args.segment_rows)
    write_ipc(ipc, table)
    if broker is not None:
        anyio.run(build_kafka_log, broker, table, args.segment_rows)
    segments = -(-args.rows // args.segment_rows)

    def headrace(reader: Reader) -> DataFrame:
        return reader.format("headrace").option("path", store).option("stream", STREAM).load()

    def kafka(reader: Reader) -> DataFrame:
        source = reader.format("headrace").option("kafka.bootstrap.servers", broker)
        return source.option("topicPrefix", "bench").option("stream", STREAM).load()

    def minimal(reader: Reader) -> DataFrame:
        return reader.format("minimal_arrow").option("path", ipc).load()

    def make_run(mode: str, source: Callable[[Reader], DataFrame]) -> Callable[[], None]:
        if mode == "batch":
            return batch_run(lambda: source(spark.read))
        return stream_run(lambda: source(spark.readStream), workdir)

    print(
        f"{args.rows:,} rows ({table.nbytes / 2**20:.0f} MiB in Arrow), {PARTITIONS} partitions, "
        f"handoff log of {segments} appends of {args.segment_rows:,} rows (compacted into {files} files); "
        f"best of {args.repeat} after a warm-up"
    )
    print(f"{'mode':<8} {'source':<9} {'rows/s':>12}")
    for mode in ("batch", "stream"):
        runs = {"headrace": make_run(mode, headrace), "minimal": make_run(mode, minimal)}
        if broker is not None:
            runs["kafka"] = make_run(mode, kafka)
        rates = best_rates(runs, args.rows, args.repeat)
        for name, report in rates.items():
            print(f"{mode:<8} {name:<9} {figure(report):>12}")
            if report.rate is not None:
                timing.note(
                    f"{LOGS.get(name, name)}, {'batch' if mode == 'batch' else 'streaming'}, rows/s", report.rate
                )
        print(f"{mode:<8} {coverage_line(rates.values())}")
        base = rates["minimal"].rate
        for name in ("headrace", "kafka") if broker is not None else ("headrace",):
            ours = rates[name].rate
            if ours and base:
                label = f"{LOGS[name]}, {'batch' if mode == 'batch' else 'streaming'} / minimal source"
                print(f"{mode:<8} ratio {name}/minimal = {timing.note(label, ours / base):.2f}")
    print("(each stream run includes starting and stopping a query, ~2 s here, alike for both)")
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
