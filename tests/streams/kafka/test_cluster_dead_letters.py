"""Dead letters on Kafka live in the cluster's dead-letter topic: the README's Kafka example
keeps its letters across a restart with no local store, and ``headrace dlq`` lists, shows
and replays them from any directory through ``--config`` (a Kafka adapter)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.backends.kafka.clients import read_partition
from streams.backends.kafka.deadletters import KafkaDeadLetterStore, dead_letter_topic
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.topic_log import LogRecord
from streams.core.deadletters import DeadLetter, letter_fields
from streams.core.errors import ConfigurationError
from tests.kafka_fixtures import create_topic
from tests.sensor_workload import readings, write_json
from tests.streams.cli.helpers import clean_env, headrace, one_error_line

README = Path(__file__).resolve().parents[3] / "README.md"
_UNTIMED = {"sensor": "sensor-0", "ts": "soon", "value": 99.5}


def _example(kafka_broker: str, kafka_topic: str) -> str:
    text = README.read_text()
    code = re.search(r"### I already have a Kafka topic of JSON events\n.*?```python\n(.*?)```", text, re.S).group(1)
    assert "store=" not in code  # the example keeps nothing on the machine
    code = code.replace('"localhost:9092",', f'"{kafka_broker}",').replace('"sensor-readings",', f'"{kafka_topic}",')
    # The test broker has no idempotent producer, and holds a join for half the group's
    # session: a 3 s session (not 10 s) has each run's join wait 1.5 s.
    session = "balancer_options=BalancerOptions(3.0, renew_period=1.0, refresh_period=0.5),"
    code = code.replace(
        'group_id="sensor-counts",', f'group_id="sensor-counts", kafka={{"idempotent": False}}, {session}'
    )
    return "from balancer import BalancerOptions\n" + code


async def _write_topic(kafka_broker: str, kafka_topic: str) -> tuple[int, int]:
    """300 s of readings of 3 sensors, a record that is not JSON, then a reading of sensor-0
    whose time is no time; the partition and offset of the record that is not JSON."""
    await create_topic(kafka_broker, kafka_topic, 8)
    await write_json(kafka_broker, kafka_topic, list(readings(300, sensors=3, spacing=1.0, late_share=0.5, late=1)))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await producer.start()
    try:
        sent = await (await producer.send(kafka_topic, b"{not json", key=b"sensor-1"))
    finally:
        await producer.stop()
    await write_json(kafka_broker, kafka_topic, [(b"sensor-0", _UNTIMED)])
    return sent.partition, sent.offset


def test_the_kafka_example_keeps_its_dead_letters_in_the_cluster(kafka_broker, kafka_topic, tmp_path):
    partition, offset = anyio.run(_write_topic, kafka_broker, kafka_topic)
    script = tmp_path / "worker" / "kafka_json.py"
    script.parent.mkdir()
    script.write_text(_example(kafka_broker, kafka_topic))
    for run in (1, 2):  # the second run is the restart: it reads from the committed offsets
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=script.parent
        )
        assert result.returncode == 0, (run, result.stderr)
    assert sorted(p.name for p in script.parent.iterdir()) == ["kafka_json.py"]  # nothing kept there

    elsewhere = tmp_path / "operator"
    elsewhere.mkdir()
    config = elsewhere / "cluster.toml"
    config.write_text(
        '[provider]\nadapter = "kafka"\nqueues = 8\n\n[provider.kafka]\n'
        f'bootstrap_servers = "{kafka_broker}"\ntopic = "{kafka_topic}"\ngroup = "sensor-counts"\n'
        'records = "json"\nnamespace = "sensors"\nidempotent = false\n'
    )
    cwd = tmp_path  # neither the worker's directory nor the configuration's
    env = clean_env()
    listed = headrace("dlq", "list", "--config", config, "--json", cwd=cwd, env=env)
    assert listed.returncode == 0, listed.stderr
    letters = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(x["reason"] for x in letters) == ["invalid_timestamp", "undecodable"], letters
    late, raw = sorted(letters, key=lambda x: x["reason"])
    assert (raw["queue"], raw["sequence_number"], bytes.fromhex(raw["payload"])) == (partition, offset, b"{not json")
    assert (late["reason"], late["stream"], late["value"]) == ("invalid_timestamp", "sensors/sensor-0", _UNTIMED)

    shown = headrace("dlq", "show", "--config", config, str(raw["id"]), cwd=cwd, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "7b 6e 6f 74 20 6a 73 6f 6e" in shown.stdout  # "{not json", byte by byte

    refused = headrace("dlq", "replay", "--config", config, str(raw["id"]), cwd=cwd, env=env)
    assert "never decoded" in one_error_line(refused, "dlq")

    replayed = headrace("dlq", "replay", "--config", config, str(late["id"]), cwd=cwd, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 1 dead letter: 1 to sensors/sensor-0" in replayed.stdout
    again = headrace("dlq", "replay", "--config", config, str(late["id"]), cwd=cwd, env=env)
    assert "was replayed already" in one_error_line(again, "dlq")
    pending = headrace("dlq", "list", "--config", config, "--pending", "--json", cwd=cwd, env=env)
    assert [json.loads(line)["id"] for line in pending.stdout.splitlines()] == [raw["id"]]
    replayed_list = headrace("dlq", "list", "--config", config, cwd=cwd, env=env)
    assert replayed_list.stdout.count("invalid_timestamp") == 1 and replayed_list.stdout.count("undecodable") == 1

    async def records_of_sensor_0() -> list[bytes]:
        settings = KafkaSettings(kafka_broker, kafka_topic)
        # a short fetch wait: each partition is read in turn, the other seven empty meanwhile
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker, enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        try:
            tps = [TopicPartition(kafka_topic, p) for p in range(8)]
            consumer.assign(tps)
            return [
                r.value for tp in tps for r in await read_partition(consumer, tp, 0, settings) if r.key == b"sensor-0"
            ]
        finally:
            await consumer.stop()

    # The replay published the value again to the topic, as its stream's record.
    values = [json.loads(r) for r in anyio.run(records_of_sensor_0)]
    assert values.count(_UNTIMED) == 2


async def test_a_letter_is_kept_once_whole_and_read_from_any_store(kafka_broker, kafka_topic):
    settings = KafkaSettings(kafka_broker, kafka_topic, idempotent=False, dead_letter_topic=f"{kafka_topic}-errors")
    one, other = KafkaDeadLetterStore(settings), KafkaDeadLetterStore(settings)
    letter = DeadLetter("late_arrival", "s/k", 2, 40, value={"v": 1}, event_time=5.0, detail="late", event_index=3)
    try:
        await one.add([letter, letter])
        await other.add([letter])  # another worker read the range again: letters it again
        await other.add([DeadLetter("invalid_value", "s/k", 2, 41, value={1, 2}, event_index=0)])
        assert dead_letter_topic(settings) == f"{kafka_topic}-errors"
        first, second = await one.entries()
        assert letter_fields(first.letter) == letter_fields(letter)  # every field, as written
        assert (second.letter.value, second.letter.detail) == (
            "{1, 2}",
            "value stored as its repr (not msgpack-encodable)",
        )
        assert await other.count() == 2 and await other.count("late_arrival") == 1
        assert await one.mark_replayed([first.letter_id, 999]) == 1
        assert [s.replayed_at is not None for s in await other.entries()] == [True, False]
        assert await other.counts() == {"invalid_value": (1, 0), "late_arrival": (1, 1)}
        # The raw record: three letters and a replay mark, the duplicate a record of its own.
        raw = await one.log.read(0)
        assert [dict(r.headers)["headrace.kind"] for r in raw] == [b"letter", b"letter", b"letter", b"replayed"]
        assert dict(raw[0].headers)["headrace.offset"] == b"40" and raw[0].key == b"s/k"
        assert msgpack.unpackb(raw[0].value)["letter"]["event_index"] == 3
    finally:
        await one.close()
        await other.close()


async def test_a_record_not_a_letter_is_skipped_and_a_topic_of_several_partitions_refused(kafka_broker, kafka_topic):
    settings = KafkaSettings(kafka_broker, kafka_topic, idempotent=False)
    letters = KafkaDeadLetterStore(settings)
    try:
        await letters.add([DeadLetter("undecodable", queue=1, sequence_number=5, payload=b"?")])
        # Another program writes to the topic: its record is skipped, the letters stay readable.
        await letters.log.append([LogRecord(b"k", b"not msgpack \xc1", (("headrace.kind", b"letter"),))])
        await letters.log.append([LogRecord(None, b"{}")])
        await letters.add([DeadLetter("undecodable", queue=1, sequence_number=6, payload=b"!")])
        assert [(s.letter_id, s.letter.sequence_number) for s in await letters.entries()] == [(1, 5), (4, 6)]
        # The newest first, for the status page
        assert [s.letter_id for s in await letters.latest(5)] == [4, 1]
        assert [s.letter_id for s in await letters.latest(1)] == [4] and await letters.latest(0) == []
    finally:
        await letters.close()

    await create_topic(kafka_broker, f"{kafka_topic}-wide.dlq", 3)
    wide = KafkaDeadLetterStore(KafkaSettings(kafka_broker, f"{kafka_topic}-wide", idempotent=False))
    try:
        with pytest.raises(ConfigurationError, match=r"has 3 partitions: headrace keeps its records in one"):
            await wide.count()
    finally:
        await wide.close()


def test_dlq_of_an_application_with_letters_in_memory_is_one_clear_error(tmp_path):
    (tmp_path / "memapp.py").write_text("from streams import StreamProvider\n\nprovider = StreamProvider.memory(2)\n")
    result = headrace("dlq", "list", "--app", "memapp:provider", cwd=tmp_path)
    assert one_error_line(result, "dlq") == (
        "memapp:provider keeps its dead letters in this process's memory (MemoryDeadLetterStore): "
        "nothing outside it can list them"
    )
