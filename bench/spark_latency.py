"""From a window's close to its row in a Spark micro-batch, steady, one worker, in parts.

One worker (one queue, one stream of 4 keys, tumbling windows of ``--window`` seconds, event
time = the wall clock when the event is published, no lateness allowed) and, in the same
process, a publisher sending ``--rate`` events a second. A Spark streaming query reads the
handoff stream with the shortest processing-time trigger Spark has (``0 seconds``: a
micro-batch as soon as the one before ends and ``latestOffset`` shows new data) into
``foreachBatch``. Per window end (its 4 rows go in one append), four instants, each taken
where it happens:

* ``closed``: the worker's watermark reaches the window's end (``WatermarkFlow.advance``);
* ``emitted``: the handoff sink's ``write`` is called with the window;
* ``durable``: that ``write`` returns (the rows are committed in the handoff log);
* ``seen``: a ``latestOffset`` call of the DataSource (in Spark's Python process) returns an
  offset past the rows;
* ``in batch``: ``foreachBatch`` has collected the rows (in this process, Spark's driver).

The parts printed: close = emitted - closed, commit = durable - emitted, offset = seen -
durable, batch = in batch - seen; total = in batch - closed. Windows closing in the first
``--warmup`` seconds are left out. The instants are wall-clock times of processes on one
machine.

    PYSPARK_PYTHON=$PWD/.venv/bin/python python bench/spark_latency.py [--seconds 30] [--kafka]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import spark_sink  # noqa: E402
from bench import timing  # noqa: E402
from bench._common import keep_compiled_modules, percentile  # noqa: E402
from spark_sink import Handoff  # noqa: E402
from streams import StreamId, StreamProvider  # noqa: E402
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling  # noqa: E402

STREAM = "latency"
KEYS = 4
PARTS = ("close", "commit", "offset", "batch")
# Steps of a micro-batch as Spark's progress times them (durationMs), printed beside the parts.
SPARK_STEPS = ("triggerExecution", "latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets")


# -- the worker (a process of its own) -------------------------------------------------------


def worker_main(backend: str, where: str, timings: str, window: float, rate: float) -> None:
    """Run one worker and a steady publisher; note the close and the commit of each window."""
    from streams.backends.embedded.handoff_sink import EmbeddedHandoffSink
    from streams.backends.kafka.handoff_sink import KafkaHandoffSink
    from streams.eventtime.processor import Processor

    notes = open(timings, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    on_events = Processor.on_events

    def timed_on_events(self: Processor, *args: Any, **kwargs: Any) -> Any:
        # The watermark moves as a batch of events is taken in: the windows that batch
        # closes closed when it began.
        began = time.time()
        out = on_events(self, *args, **kwargs)
        for end in sorted({round(w.end, 6) for w in out.windows}):
            notes.write(json.dumps({"closed": end, "at": began}) + "\n")
        return out

    def timed_write(original: Any) -> Any:
        async def write(self: Any, source: str, consumer: str, partition: int, windows: Any) -> int:
            began = time.time()
            written: int = await original(self, source, consumer, partition, windows)
            ends = sorted({round(w.end, 6) for w in windows})
            notes.write(json.dumps({"ends": ends, "rows": written, "emitted": began, "durable": time.time()}) + "\n")
            return written

        return write

    Processor.on_events = timed_on_events  # type: ignore[method-assign]
    EmbeddedHandoffSink.write = timed_write(EmbeddedHandoffSink.write)  # type: ignore[method-assign]
    KafkaHandoffSink.write = timed_write(KafkaHandoffSink.write)  # type: ignore[method-assign]

    def provider() -> StreamProvider:
        if backend == "kafka":
            settings = {"idempotent": False, "group_membership": False, "handoff_prefix": STREAM}
            return StreamProvider.kafka(where, STREAM, queues=1, kafka=settings)
        return StreamProvider.embedded(where, queues=1)

    worker = provider()

    @worker.implicit("meters")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(window), Count(), group_by="k")
        handoff = Handoff(STREAM, {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    async def run() -> None:
        async with worker, provider().client() as client:
            stream = client.get_stream(StreamId("meters", "m"))
            print("ready", flush=True)
            n = 0
            began = time.monotonic()
            while True:
                await stream.on_next({"t": time.time(), "k": f"k{n % KEYS}"})
                n += 1
                await anyio.sleep(max(0.0, began + n / rate - time.monotonic()))

    anyio.run(run)


# -- Spark's side ------------------------------------------------------------------------------


def read_lines(path: str) -> Iterator[dict[str, Any]]:
    with open(path) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def measure(spark: Any, backend: str, where: str, args: argparse.Namespace, workdir: str) -> dict[str, list[float]]:
    """Run the worker and the query for ``args.seconds``; each window's parts, in ms."""
    from pyspark.sql import functions as F

    worker_notes = os.path.join(workdir, f"{backend}-worker.jsonl")
    command = [sys.executable, __file__, "--worker", backend, where, worker_notes, str(args.window), str(args.rate)]
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    arrived: dict[float, float] = {}
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        options = {"kafka.bootstrap.servers": where, "topicPrefix": STREAM} if backend == "kafka" else {"path": where}
        while not os.path.exists(worker_notes) or not any("ends" in n for n in read_lines(worker_notes)):
            time.sleep(0.1)  # the stream is declared with its first append

        def batch(df: Any, batch_id: int) -> None:
            ends = df.select(F.unix_micros("window_end").alias("end")).collect()  # one stage, no shuffle
            now = time.time()
            for row in ends:
                arrived.setdefault(round(row.end / 1e6, 6), now)

        reader = spark.readStream.format("headrace").options(**options).option("stream", STREAM)
        query = (
            reader.option("startingOffsets", "latest")
            .load()
            .writeStream.foreachBatch(batch)
            .option("checkpointLocation", os.path.join(workdir, f"{backend}-checkpoint"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        while not arrived and query.isActive:  # the query's start: its Python runner, the JIT
            time.sleep(0.1)
        measured_from = time.time() + args.warmup
        time.sleep(args.warmup + args.seconds)
        query.stop()
        if query.exception() is not None:
            raise SystemExit(f"spark_latency: the query failed: {query.exception()}")
        progress = query.recentProgress
    finally:
        worker.terminate()
        worker.wait(10)
    parts = parts_of(list(read_lines(worker_notes)), offsets_seen(progress), arrived, backend, measured_from)
    # Spark's own account of the micro-batches that carried rows: where its time goes.
    for p in progress:
        if (
            p["numInputRows"]
            and datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() >= measured_from
        ):
            for step in SPARK_STEPS:
                parts.setdefault(f"spark {step}", []).append(float(p["durationMs"].get(step, 0)))
    return parts


def offsets_seen(progress: list[Any]) -> list[dict[str, Any]]:
    """When each micro-batch's ``latestOffset`` returned, and what: Spark's own account of
    the batch (its start, and the time ``latestOffset`` took)."""
    seen = []
    for p in progress:
        began = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        offset = json.loads(p["sources"][0]["endOffset"] or "{}")
        seen.append({"at": began + p["durationMs"].get("latestOffset", 0) / 1000, "offset": offset})
    return seen


def parts_of(
    worker: list[dict[str, Any]],
    offsets: list[dict[str, Any]],
    arrived: dict[float, float],
    backend: str,
    measured_from: float,
) -> dict[str, list[float]]:
    closed = {n["closed"]: n["at"] for n in worker if "closed" in n}
    # Offsets after each append: rows on the embedded log, one record per append on Kafka
    # (one partition, a fresh log, one writer).
    end = 0
    appended: dict[float, tuple[float, float, int]] = {}
    for note in (n for n in worker if "ends" in n and n["rows"]):
        end += 1 if backend == "kafka" else note["rows"]
        for e in note["ends"]:
            appended.setdefault(e, (note["emitted"], note["durable"], end))
    seen = [(n["at"], n["offset"].get("0", 0)) for n in offsets]
    parts: dict[str, list[float]] = {p: [] for p in ("total", *PARTS)}
    for e, (emitted, durable, needed) in sorted(appended.items()):
        if e not in arrived or e not in closed or closed[e] < measured_from:
            continue
        at = next((t for t, offset in seen if offset >= needed and t >= emitted), None)
        if at is None:
            continue
        instants = (closed[e], emitted, durable, at, arrived[e])
        parts["total"].append((instants[-1] - instants[0]) * 1000)
        for name, (a, b) in zip(PARTS, zip(instants, instants[1:], strict=False), strict=True):
            parts[name].append((b - a) * 1000)
    return parts


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        backend, where, notes, window, rate = argv[1:]
        worker_main(backend, where, notes, float(window), float(rate))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured, per log")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=0.25)
    parser.add_argument("--rate", type=float, default=200.0, help="events a second")
    parser.add_argument("--kafka", action="store_true", help="also on the Kafka handoff log (Tansu)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from tests.kafka_broker import TansuBroker

    keep_compiled_modules()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workdir = tempfile.mkdtemp(prefix="headrace-latency-")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("headrace-latency")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_sink.register(spark)
    print(
        f"one worker, one queue, {KEYS} keys, tumbling {args.window} s windows, {args.rate:.0f} events/s; "
        f"trigger processingTime 0 s; {args.seconds:.0f} s measured after {args.warmup:.0f} s"
    )
    print(f"{'log':<9} {'windows':>7}  " + "  ".join(f"{p + ' p50/p99 ms':>22}" for p in ("total", *PARTS)))
    try:
        runs = [("embedded", os.path.join(workdir, "store"))]
        broker = TansuBroker() if args.kafka else None
        if broker is not None:
            broker.start()
            runs.append(("kafka", broker.bootstrap))
        try:
            for backend, where in runs:
                parts = measure(spark, backend, where, args, workdir)
                cells = []
                for name, values in parts.items():
                    values.sort()
                    p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
                    timing.note(f"{backend} log, {name}, p50 ms", round(p50, 1))
                    timing.note(f"{backend} log, {name}, p99 ms", round(p99, 1))
                    cells.append(f"{p50:>10.1f} / {p99:>9.1f}")
                print(f"{backend:<9} {len(parts['total']):>7}  " + "  ".join(cells[: 1 + len(PARTS)]))
                steps = [
                    f"{name.removeprefix('spark ')} {cell.strip()}"
                    for name, cell in list(zip(parts, cells))[1 + len(PARTS) :]
                ]
                print(f"{'':<9} Spark's micro-batches with rows, p50 / p99 ms: " + "; ".join(steps))
        finally:
            if broker is not None:
                broker.stop()
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
