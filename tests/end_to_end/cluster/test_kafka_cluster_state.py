"""On Kafka nothing lives on one machine: ``headrace worker`` processes, each in a directory of
its own with no file shared, see every durable subscription whichever process made it, keep
them across a restart of all of them, and show up together in ``headrace status --config``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from streams import StreamId
from streams.backends.kafka.pubsub import KafkaPubSubStore
from streams.backends.kafka.settings import KafkaSettings
from tests.end_to_end.cluster.kafka_cluster_app import QUEUES, provider_for
from tests.streams.cli.helpers import headrace

ROOT = Path(__file__).resolve().parents[3]


class Workers:
    """``headrace worker`` processes of ``tests.end_to_end.cluster.kafka_cluster_app``, each in its own
    directory (``tmp_path/<name>``), where its log and what its consumers got are kept."""

    def __init__(self, tmp_path: Path, bootstrap: str, topic: str, **env: str) -> None:
        self.root = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEADRACE_")}
        self.env |= {"PYTHONPATH": str(ROOT), "HEADRACE_TEST_KAFKA": bootstrap, "HEADRACE_TEST_TOPIC": topic, **env}
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def launch(self, name: str) -> None:
        home = self.root / name
        home.mkdir(exist_ok=True)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--app", "tests.end_to_end.cluster.kafka_cluster_app:app"]
            + ["--name", name],
            cwd=home,
            env={**self.env, "HEADRACE_TEST_OUT": str(home / "got.txt")},
            text=True,
            stdout=subprocess.PIPE,
            stderr=open(home / "worker.log", "a"),
        )

    def running(self, name: str) -> str:
        """The worker's first line, once it has joined and taken its first share."""
        stdout = self.procs[name].stdout
        assert stdout is not None
        line = stdout.readline()
        assert line.startswith(f"headrace worker {name}: running"), (line, self.log(name))
        return line

    def start(self, *names: str) -> None:
        for name in names:
            self.launch(name)
        for name in names:
            self.running(name)

    def stop(self, *names: str) -> None:
        for name in names:
            self.procs[name].send_signal(signal.SIGTERM)
        for name in names:
            assert self.procs.pop(name).wait(timeout=30) == 0, self.log(name)

    def got(self, name: str) -> list[str]:
        path = self.root / name / "got.txt"
        return path.read_text().splitlines() if path.exists() else []

    def log(self, name: str) -> str:
        return (self.root / name / "worker.log").read_text()

    def kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


async def _until_got(workers: Workers, names: tuple[str, ...], lines: set[str], seconds: float = 30) -> set[str]:
    """The workers that got every one of ``lines``, once they have all been got."""
    with anyio.fail_after(seconds):
        while not lines <= {line for name in names for line in workers.got(name)}:
            await anyio.sleep(0.1)
    return {name for name in names if lines & set(workers.got(name))}


async def test_a_subscription_made_anywhere_reaches_its_owner_and_survives_a_restart_of_both(
    tmp_path, kafka_broker, kafka_topic
):
    workers = Workers(tmp_path, kafka_broker, kafka_topic)
    client = provider_for(kafka_broker, kafka_topic)  # the third process: this one
    stream = client.get_stream(StreamId("readings", "r-1"))
    names = ("w1", "w2")
    try:
        workers.start(*names)
        async with client.client():
            await stream.on_next_batch([0])  # the stream is active on its owner before anyone subscribes
            await anyio.sleep(1)
            handle = await stream.subscribe(client.registry.get_type("Recorder"))
            # The owner follows the subscriptions topic: the next events reach the new
            # subscriber without the stream being activated again.
            with anyio.fail_after(30):
                probes = 0
                while not any(line.startswith("readings/r-1 probe") for n in names for line in workers.got(n)):
                    probes += 1
                    await stream.on_next_batch([f"probe{probes}"])
                    await anyio.sleep(0.2)
            await stream.on_next_batch([1, 2, 3])
        first = await _until_got(workers, names, {"readings/r-1 1", "readings/r-1 2", "readings/r-1 3"})
        assert len(first) == 1  # the worker owning the stream's queue, and only it
        assert "readings/r-1 0" not in workers.got(first.pop())  # it came before the subscription

        workers.stop(*names)  # both go; nothing of theirs is kept but their logs
        workers.start(*names)
        async with client.client():
            await stream.on_next_batch([4, 5, 6])
            await _until_got(workers, names, {"readings/r-1 4", "readings/r-1 5", "readings/r-1 6"})
            await handle.unsubscribe()  # a tombstone
        every = [line.split()[1] for name in names for line in workers.got(name)]
        assert {v for v in every if not v.startswith("probe")} == {"1", "2", "3", "4", "5", "6"}

        anywhere = KafkaPubSubStore(KafkaSettings(kafka_broker, kafka_topic))
        try:
            assert await anywhere.subscriptions() == []
        finally:
            await anywhere.close()
        workers.stop(*names)
    finally:
        workers.kill_all()
    assert {p.name for p in (tmp_path / "w1").iterdir()} <= {"got.txt", "worker.log"}


def _config(tmp_path: Path, kafka_broker: str, kafka_topic: str) -> Path:
    """An operator's configuration naming the cluster, in a directory of its own."""
    operator = tmp_path / "operator"
    operator.mkdir()
    config = operator / "cluster.toml"
    config.write_text(
        f'[provider]\nadapter = "kafka"\nqueues = {QUEUES}\n\n[provider.kafka]\n'
        f'bootstrap_servers = "{kafka_broker}"\ntopic = "{kafka_topic}"\nidempotent = false\n'
    )
    return config


def _status(config: Path, cwd: Path) -> dict[str, Any]:
    result = headrace("status", "--config", config, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    status: dict[str, Any] = json.loads(result.stdout)
    return status


async def _until_status(config: Path, cwd: Path, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    with anyio.fail_after(60):
        while not holds(status := _status(config, cwd)):
            await anyio.sleep(0.3)
    return status


async def test_status_shows_both_workers_every_partitions_lag_and_the_letters(tmp_path, kafka_broker, kafka_topic):
    workers = Workers(tmp_path, kafka_broker, kafka_topic, HEADRACE_WORKER__STATUS_INTERVAL="500ms")
    config = _config(tmp_path, kafka_broker, kafka_topic)
    operator = config.parent
    client = provider_for(kafka_broker, kafka_topic)
    streams = [StreamId("readings", f"r-{n}") for n in range(8)]
    records = Counter(client.mapper.get_queue_for_stream(sid).number for sid in streams)
    async with client.client():
        for sid in streams:
            await client.get_stream(sid).on_next_batch([1, 2])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await producer.start()
    try:
        junk = await producer.send_and_wait(kafka_topic, b"junk", partition=0)  # not a batch container
    finally:
        await producer.stop()
    records[0] += 1
    names = ("w1", "w2")
    try:
        workers.start(*names)

        def settled(status: dict[str, Any]) -> bool:
            owners = {q["owner"] for q in status["queues"]}
            live = {w["name"] for w in status["workers"] if w["state"] == "live"}
            return live == owners == set(names) and all(q["checkpoint_lag"] == 0 for q in status["queues"])

        status = await _until_status(config, tmp_path, settled)
        assert status["kind"] == "cluster" and status["queue_count"] == QUEUES
        assert len(status["group_members"]) == 2  # Kafka names them; Tansu gives member ids only
        assert [(q["queue"], q["next_sequence"], q["checkpoint"]) for q in status["queues"]] == [
            (q, records[q], records[q] - 1 if records[q] else None) for q in range(QUEUES)
        ]
        held = {w["name"]: w["queues"] for w in status["workers"]}
        assert sorted(held["w1"] + held["w2"]) == list(range(QUEUES)) and held["w1"] and held["w2"]
        assert all(q["agent"]["cache_max"] > 0 for q in status["queues"])  # the workers' own snapshots
        assert status["dead_letters"] == [{"reason": "undecodable", "count": 1, "replayed": 0}]
        table = headrace("status", "--config", config, cwd=operator)
        assert table.returncode == 0, table.stderr
        assert table.stdout.startswith(
            f"headrace cluster Kafka at {kafka_broker}, topic '{kafka_topic}': 4 queues, 2 live workers"
        )
        assert "consumer group: 2 members" in table.stdout and "undecodable" in table.stdout
        # The same letter through the application, as `headrace worker --app` runs it.
        app_env = {**workers.env, "HEADRACE_TEST_OUT": str(operator / "unused")}
        listed = headrace(
            "dlq",
            "list",
            "--app",
            "tests.end_to_end.cluster.kafka_cluster_app:app",
            "--json",
            cwd=operator,
            env=app_env,
        )
        assert listed.returncode == 0, listed.stderr
        [letter] = [json.loads(line) for line in listed.stdout.splitlines()]
        assert (letter["reason"], letter["queue"], letter["sequence_number"]) == ("undecodable", 0, junk.offset)

        workers.stop(*names)  # they leave: their status goes with them
        async with client.client():
            await client.get_stream(streams[0]).on_next_batch([3])
            await client.get_stream(streams[0]).on_next_batch([4])
        behind = client.mapper.get_queue_for_stream(streams[0]).number
        status = _status(config, tmp_path)
        assert status["workers"] == [] and status["group_members"] == []
        assert [q["checkpoint_lag"] for q in status["queues"]] == [2 if q == behind else 0 for q in range(QUEUES)]
        assert {q["owner"] for q in status["queues"]} == {None}
    finally:
        workers.kill_all()


@pytest.mark.parametrize("count", [2, 4])
async def test_workers_started_at_once_against_an_emptied_group_all_get_queues(
    tmp_path, kafka_broker, kafka_topic, count
):
    workers = Workers(tmp_path, kafka_broker, kafka_topic, HEADRACE_WORKER__STATUS_INTERVAL="500ms")
    config = _config(tmp_path, kafka_broker, kafka_topic)
    names = tuple(f"w{n}" for n in range(count))

    def shared(status: dict[str, Any]) -> bool:
        held = {w["name"]: w["queues"] for w in status["workers"] if w["state"] == "live"}
        return set(held) == set(names) and sorted(q for qs in held.values() for q in qs) == list(range(QUEUES))

    try:
        for _ in range(2):  # the group's first start, then all again at once once it is empty
            workers.start(*names)  # launched together; each has joined and got a share
            status = await _until_status(config, tmp_path, shared)
            assert all(w["queues"] for w in status["workers"]), status["workers"]  # nobody left out
            workers.stop(*names)
        for name in names:
            assert "got no assignment" not in workers.log(name)
    finally:
        workers.kill_all()
