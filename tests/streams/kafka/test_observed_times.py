"""On Kafka: the status topic carries each queue's observed lateness and disorder,
and ``headrace export`` reads a topic of another program's JSON records into a sample that
``headrace simulate`` replays. A real broker (Tansu)."""

from __future__ import annotations

import csv
import time

import anyio
import pytest

from streams.adapters.status import AgentStatus, observed_by_type
from streams.backends.kafka.retained import KafkaRecords
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.status import KafkaStatusBoard, read_reports
from streams.core.errors import ConfigurationError
from streams.eventtime.lateness import LatenessSketch, advise
from tests.kafka_fixtures import create_topic
from tests.sensor_workload import T0_MS, readings, write_json
from tests.streams.cli.helpers import headrace


def _row(queue: int, sketch: LatenessSketch, now: float) -> AgentStatus:
    return AgentStatus(
        "w1", queue, 0, 4096, False, 1, 10, 0, None, None, now, now + 15, observed={"app.T": sketch.observed(now)}
    )


def test_the_status_topic_carries_observed_times(kafka_broker, kafka_topic):
    settings = KafkaSettings(kafka_broker, kafka_topic, queues=2, idempotent=False)
    now = time.time()
    sketches = []
    for q in range(2):
        sketch = LatenessSketch(every=1, out_of_order=1.0, late_arrival=30.0, substreams=4)
        for i in range(200):
            t = now - 2.0 - (i % 10) * (q + 1)  # queue 1 twice as late
            sketch.record(now, t, now - 2.0, f"s{i % 3}")
        sketches.append(sketch)
    rows = [_row(q, s, now) for q, s in enumerate(sketches)]

    async def publish_and_read() -> dict[str, object]:
        board = KafkaStatusBoard(settings)
        try:
            await board.publish("w1", rows, now, now + 15)
        finally:
            await board.close()
        return await read_reports(settings)  # type: ignore[return-value]

    reports = anyio.run(publish_and_read)
    [agents] = [r.agents for r in reports.values()]  # type: ignore[attr-defined]
    assert [a.observed for a in agents] == [r.observed for r in rows]  # every bucket, substream and setting
    merged = observed_by_type(agents)["app.T"]
    assert merged.samples == 400 and (merged.out_of_order, merged.late_arrival) == (1.0, 30.0)
    assert sorted(name for name, _, _ in agents[1].observed["app.T"].substreams) == ["s0", "s1", "s2"]
    # The worst lateness, queue 1's 20 s (2 + 9 * 2), read back within its bucket.
    assert 20.0 <= advise(merged, 0.999).late_arrival <= 20.0 * 1.05  # type: ignore[operator]


CONFIG = """
[provider]
adapter = "kafka"
queues = 2

[provider.kafka]
bootstrap_servers = "{server}"
topic = "{topic}"
group = "export-test"
records = "json"
namespace = "sensors"
idempotent = false

[time]
timestamp_by = "ts"
unit = "ms"
"""


def test_export_reads_a_topic_of_json_records(kafka_broker, kafka_topic, tmp_path):
    async def write() -> None:
        await create_topic(kafka_broker, kafka_topic, 2)
        await write_json(kafka_broker, kafka_topic, items)

    items = list(readings(60, sensors=3, spacing=1.0, late_share=0.2, late=4.0))
    before = time.time()
    anyio.run(write)
    after = time.time()
    (tmp_path / "kafka.toml").write_text(CONFIG.format(server=kafka_broker, topic=kafka_topic))

    result = headrace(
        "export", "--config", "kafka.toml", "--stream", "sensors", "--since", "1h", "--value-by", "value", "s.csv",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with (tmp_path / "s.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    # Every reading once: its sensor (the record key), its ts ([time] timestamp_by, in ms), its value.
    assert sorted((r["key"], float(r["event_time"]), float(r["value"])) for r in rows) == sorted(
        (k.decode(), int(v["ts"]) / 1000, float(v["value"]))
        for k, v in items  # type: ignore[call-overload]
    )
    arrivals = [float(r["arrival_time"]) for r in rows]  # the records' Kafka timestamps
    assert arrivals == sorted(arrivals) and before - 1 <= arrivals[0] and arrivals[-1] <= after + 1
    assert min(float(r["event_time"]) for r in rows) >= T0_MS / 1000 - 4

    one = headrace(
        "export", "--config", "kafka.toml", "--stream", "sensors/sensor-1", "--since", "1h", "one.csv", cwd=tmp_path
    )
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith("headrace export: 20 events of sensors/sensor-1 ")

    swept = headrace(
        "simulate", "--sweep", "out_of_order=0s,5s", "--window", "tumbling:10s", "--substreams", "s.csv", cwd=tmp_path
    )
    assert swept.returncode == 0, swept.stderr
    zero, five = (line.split()[:4] for line in swept.stdout.splitlines()[1:3])
    assert zero[:2] == ["0s", "60"] and int(zero[2]) > 0  # the late ones, below their sensor's newest
    assert five == ["5s", "60", "0", "0"]

    missing = headrace("export", "--config", "kafka.toml", "--stream", "nope", "--since", "1h", "x.csv", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "headrace export: error: no events of namespace 'nope' are retained (namespaces with events: sensors)"
    )


def test_export_refuses_several_topics_read_together():
    settings = KafkaSettings(
        "127.0.0.1:1", "t-tolls", topics={"tolls": "t-tolls", "prices": "t-prices"}, records="json"
    )
    with pytest.raises(ConfigurationError) as refused:
        anyio.run(KafkaRecords.read, settings)  # refused before any connection
    assert str(refused.value) == (
        "headrace export reads one topic; this configuration reads 2 together (t-prices, t-tolls): "
        "give a configuration of the one to export"
    )
