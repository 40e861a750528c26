"""The whole path: producers → durable queues → a worker's windowed consumer → the handoff
log → a Spark streaming query, on the embedded store and on Kafka. The worker is killed
(SIGKILL) and restarted, the query is stopped and restarted, and the final table still equals
Spark's own ``groupBy(window)`` over the raw events: no window lost, none duplicated or
changed. Two workers sharing the queues, one of which stops answering with windows open,
reach the same table."""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from pyspark.sql import functions as F

from streams import StreamId, StreamProvider
from streams.backends.kafka.handoff_log import KafkaHandoffLog
from tests.helpers import handoff_count, start_worker, wait_until

WORKER = Path(__file__).with_name("pipeline_worker.py")
BASE = 1_700_000_000 // 60 * 60  # a window boundary
WINDOW = 60


@dataclass
class Pipeline:
    """Where the queues and the handoff log are: an embedded store, or a Kafka topic."""

    store: Path
    kafka: tuple[str, str] | None = None  # (bootstrap servers, queue topic)

    def worker_args(self) -> list[str]:
        return ["kafka", *self.kafka] if self.kafka else ["embedded", str(self.store)]

    def client(self) -> StreamProvider:
        if self.kafka:
            bootstrap, topic = self.kafka
            return StreamProvider.kafka(bootstrap, topic, queues=2, kafka={"idempotent": False})
        return StreamProvider.embedded(self.store, queues=2)

    def source_options(self) -> dict[str, str]:
        if self.kafka:
            bootstrap, topic = self.kafka
            return {"kafka.bootstrap.servers": bootstrap, "topicPrefix": topic}
        return {"path": str(self.store)}

    def handed_off(self) -> int:
        """Rows handed off so far (0 until the worker has declared the stream)."""
        if self.kafka:
            return anyio.run(self._kafka_rows)
        return handoff_count(self.store, "tolls")

    async def _kafka_rows(self) -> int:
        bootstrap, topic = self.kafka  # type: ignore[misc]
        async with KafkaHandoffLog(bootstrap, topic) as log:
            if "tolls" not in await log.streams():
                return 0
            _, end = await log.offsets("tolls")
            rows = 0
            for partition, stop in end.items():
                rows += sum(r.rows for r in await log.records("tolls", partition, 0, stop) if r.valid)
            return rows


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


async def publish(pipeline: Pipeline, events: list[tuple[str, dict]], complete: bool = False) -> None:
    async with pipeline.client().client() as client:
        for plaza, value in events:
            await client.get_stream(StreamId("tolls", plaza)).on_next(value)
        if complete:
            for plaza in sorted({p for p, _ in events}):
                await client.get_stream(StreamId("tolls", plaza)).on_completed()


def run_query(spark, pipeline: Pipeline, out: Path, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("headrace")
        .options(**pipeline.source_options())
        .option("stream", "tolls")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)


@pytest.fixture(params=["embedded", "kafka"])
def pipeline(request: pytest.FixtureRequest, tmp_path: Path) -> Pipeline:
    if request.param == "kafka":
        kafka = (request.getfixturevalue("kafka_broker"), request.getfixturevalue("kafka_topic"))
        return Pipeline(tmp_path / "store", kafka)
    return Pipeline(tmp_path / "store")


def expected_windows(spark, events: list[tuple[str, dict]]) -> list:
    """Spark's own windows of the raw events: (start, end, booth, count, total) rows."""
    return (
        spark.createDataFrame([(v["t"], v["booth"], v["toll"]) for _, v in events], "t long, booth string, toll double")
        .groupBy(F.window(F.timestamp_seconds("t"), f"{WINDOW} seconds"), "booth")
        .agg(F.count("*").alias("count"), F.sum("toll").alias("total"))
        .select(F.col("window.start").alias("s"), F.col("window.end").alias("e"), "booth", "count", "total")
        .collect()
    )


def query_output(spark, out: Path) -> list:
    """What the query wrote, as (start, end, booth, count, total) rows."""
    return (
        spark.read.parquet(str(out))
        .select(
            F.col("window_start").alias("s"),
            F.col("window_end").alias("e"),
            F.col("key").alias("booth"),
            "count",
            "total",
        )
        .collect()
    )


def as_rows(rows: list) -> list[tuple]:
    return sorted((r.s, r.e, r.booth, r["count"], r.total) for r in rows)


def test_queues_taken_over_with_open_windows_reach_spark_once(spark, tmp_path):
    # Two workers share the embedded store's two queues; one stops answering with windows
    # open on its queue, the other takes that queue over with the windows' saved state.
    pipeline, out, checkpoint = Pipeline(tmp_path / "store"), tmp_path / "out", tmp_path / "checkpoint"
    events = sorted(make_events(), key=lambda e: e[1]["t"])
    first, second = events[: len(events) // 2], events[len(events) // 2 :]
    a = start_worker(WORKER, *pipeline.worker_args())
    b = start_worker(WORKER, *pipeline.worker_args())
    try:
        anyio.run(publish, pipeline, first)
        assert wait_until(lambda: pipeline.handed_off() > 0, 30, 0.1)
        run_query(spark, pipeline, out, checkpoint)  # a first run reads what is there
        a.send_signal(signal.SIGSTOP)  # its leases lapse; b takes its queue over
        anyio.run(publish, pipeline, second, True)
        expected = expected_windows(spark, events)
        assert wait_until(lambda: pipeline.handed_off() >= len(expected), 60, 0.2), pipeline.handed_off()
    finally:
        a.kill()
        a.wait()
        b.send_signal(signal.SIGTERM)
        b.wait(timeout=60)
    run_query(spark, pipeline, out, checkpoint)
    got = query_output(spark, out)
    assert len(got) == len(expected)  # no window lost, none handed off twice
    assert as_rows(got) == as_rows(expected)


def test_pipeline_survives_worker_kill_and_query_restart(spark, pipeline, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    events = make_events()
    rng = random.Random(3)
    order = sorted(range(len(events)), key=lambda i: (events[i][1]["t"], rng.random()))
    ordered = [events[i] for i in order]
    first, second = ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]

    worker = start_worker(WORKER, *pipeline.worker_args())
    anyio.run(publish, pipeline, first)
    assert wait_until(lambda: pipeline.handed_off() > 0, 30, 0.1)
    run_query(spark, pipeline, out, checkpoint)  # a first micro-batch run, then the query stops
    worker.send_signal(signal.SIGKILL)  # mid-stream: open windows and unacknowledged input
    worker.wait()

    anyio.run(publish, pipeline, second, True)
    worker = start_worker(
        WORKER, *pipeline.worker_args()
    )  # replays from the checkpoint; handed-off windows are skipped
    try:
        expected = expected_windows(spark, events)
        wait_until(lambda: pipeline.handed_off() >= len(expected), 60, 0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    run_query(spark, pipeline, out, checkpoint)  # the restarted query resumes from its offsets

    got = query_output(spark, out)
    assert len(got) == len(expected)  # no window lost, none duplicated
    assert as_rows(got) == as_rows(expected)  # none changed
