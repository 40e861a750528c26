"""The whole path: producers → embedded queues → a worker's windowed consumer → the handoff
log → a Spark streaming query. The worker is killed (SIGKILL) and restarted, the query is
stopped and restarted, and the final table still equals Spark's own ``groupBy(window)`` over
the raw events: no window lost, none duplicated or changed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
from pyspark.sql import functions as F

from spark_sink import HandoffLog
from streams import StreamId, StreamProvider

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("pipeline_worker.py")
BASE = 1_700_000_000 // 60 * 60  # a window boundary
WINDOW = 60


def start_worker(store: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(store)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def make_events() -> list[tuple[str, dict]]:
    """(stream key, value): 8 plazas, 2 booths each, times in order up to 5 s of jitter."""
    rng = random.Random(11)
    out = []
    for plaza in range(8):
        for j in range(120):
            t = BASE + j * 4 + rng.randrange(4)  # within the 5 s out-of-order tolerance
            booth = f"p{plaza}-b{rng.randrange(2)}"
            out.append((f"plaza-{plaza}", {"t": t, "booth": booth, "toll": float(rng.randrange(1, 20))}))
    return out


async def publish(store: Path, events: list[tuple[str, dict]], complete: bool = False) -> None:
    async with StreamProvider.embedded(store, queues=2).client() as client:
        for plaza, value in events:
            await client.get_stream(StreamId("tolls", plaza)).on_next(value)
        if complete:
            for plaza in sorted({p for p, _ in events}):
                await client.get_stream(StreamId("tolls", plaza)).on_completed()


def handed_off(store: Path) -> int:
    try:
        log = HandoffLog.open(store)
        return sum(log.end_offsets("tolls").values())
    except Exception:  # the stream is declared by the worker on its first start
        return 0


def run_query(spark, store: Path, out: Path, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("headrace").option("path", str(store)).option("stream", "tolls").load()
        .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(120)


def test_pipeline_survives_worker_kill_and_query_restart(spark, tmp_path):
    store, out, checkpoint = tmp_path / "store", tmp_path / "out", tmp_path / "checkpoint"
    events = make_events()
    rng = random.Random(3)
    order = sorted(range(len(events)), key=lambda i: (events[i][1]["t"], rng.random()))
    ordered = [events[i] for i in order]
    first, second = ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]

    worker = start_worker(store)
    anyio.run(publish, store, first)
    deadline = time.monotonic() + 30
    while handed_off(store) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert handed_off(store) > 0
    run_query(spark, store, out, checkpoint)  # a first micro-batch run, then the query stops
    worker.send_signal(signal.SIGKILL)  # mid-stream: open windows and unacknowledged input
    worker.wait()

    anyio.run(publish, store, second, True)
    worker = start_worker(store)  # replays from the checkpoint; handed-off windows are skipped
    try:
        expected = (
            spark.createDataFrame([(v["t"], v["booth"], v["toll"]) for _, v in events], "t long, booth string, toll double")
            .groupBy(F.window(F.timestamp_seconds("t"), f"{WINDOW} seconds"), "booth")
            .agg(F.count("*").alias("count"), F.sum("toll").alias("total"))
            .select(F.col("window.start").alias("s"), F.col("window.end").alias("e"), "booth", "count", "total")
            .collect()
        )
        deadline = time.monotonic() + 60
        while handed_off(store) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    run_query(spark, store, out, checkpoint)  # the restarted query resumes from its offsets

    got = spark.read.parquet(str(out)).select(
        F.col("window_start").alias("s"), F.col("window_end").alias("e"), F.col("key").alias("booth"), "count", "total"
    ).collect()
    as_rows = lambda rows: sorted((r.s, r.e, r.booth, r["count"], r.total) for r in rows)  # noqa: E731
    assert len(got) == len(expected)  # no window lost, none duplicated
    assert as_rows(got) == as_rows(expected)  # none changed
