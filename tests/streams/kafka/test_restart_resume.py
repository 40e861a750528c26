"""Kafka workers restarted on the test broker resume at their group's committed offset (whose
ListOffsets answer is short of the records: :mod:`streams.backends.kafka.ends`): after a
clean stop nothing is read twice, after a SIGKILL only what was not committed; a topic
deleted and recreated under the group still takes the documented fallback, with its warning;
``headrace status`` counts the lag from the records. The worker is ``headrace worker`` with
a default-settings app, as a user runs it: it starts, serves and stops cleanly on SIGTERM.
The tests that restart it shorten its group session (``SESSION``): each join waits less."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams import StreamId, StreamProvider
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.status import read_kafka_status, read_reports
from tests.agents.delivery.conftest import drained
from tests.helpers import ROOT, collected, python_env
from tests.kafka_fixtures import delete_topic
from tests.streams.cli.helpers import running_worker
from tests.streams.kafka.orders_app import NAMESPACE, QUEUES
from tests.streams.kafka.test_foreign_records import make_topic

FALLBACK = "is past the end of the partition"
APP = ("--app", "tests.streams.kafka.orders_app:app")  # the worker of these tests
STREAMS = 40  # many streams: records land in batches of several, whose end Tansu misreports
SESSION = "3"  # seconds: a restarted worker's join waits half of it, a killed one's expiry all of it


class Worker:
    """``headrace worker --app tests.streams.kafka.orders_app:app`` in a subprocess, its
    stderr in ``<name>.log``."""

    def __init__(self, tmp_path: Path, name: str, env: dict[str, str]) -> None:
        self.log_path = tmp_path / f"{name}.log"
        self.process = running_worker(
            ROOT, *APP, "--name", name, "--log-format", "logfmt", log=self.log_path, env=env, name=re.escape(name)
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


class Orders:
    """The topic, group and record file of one test, and the events published to it."""

    def __init__(self, tmp_path: Path, bootstrap: str, topic: str, **env: str) -> None:
        self.tmp_path, self.bootstrap, self.topic = tmp_path, bootstrap, topic
        self.group = f"{topic}-app"
        self.records = tmp_path / "seen"
        self.records.touch()
        self.env = python_env(
            HEADRACE_TEST_KAFKA=bootstrap,
            HEADRACE_TEST_TOPIC=topic,
            HEADRACE_TEST_GROUP=self.group,
            HEADRACE_TEST_RECORDS=str(self.records),
            **env,
        )
        self.client = StreamProvider.kafka(bootstrap, topic, queues=QUEUES, kafka={"idempotent": False})
        self.published = 0

    def worker(self, name: str) -> Worker:
        return Worker(self.tmp_path, name, self.env)

    async def publish(self, count: int) -> None:
        """``count`` more events, ``send`` each then one ``flush``, as the issue's user did."""
        async with self.client.client():
            for n in range(self.published, self.published + count):
                await self.client.get_stream(StreamId(NAMESPACE, f"o{n % STREAMS}")).send(n)
            await self.client.flush()
        self.published += count

    def seen(self) -> list[tuple[int, str, int]]:
        """(value, stream, offset) of every event the workers' consumer got, in order."""
        lines = self.records.read_text().splitlines()
        return [(int(v), s, int(o)) for v, s, o in (line.split() for line in lines)]

    async def until_seen(self, values: set[int], seconds: float = 60) -> None:
        with anyio.fail_after(seconds):
            while not values <= {v for v, _, _ in self.seen()}:
                await anyio.sleep(0.1)

    def partition(self, stream: str) -> int:
        return self.client.mapper.get_queue_for_stream(StreamId(NAMESPACE, stream)).number

    async def committed(self) -> dict[int, int | None]:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False)
        await consumer.start()
        try:
            return {p: await consumer.committed(TopicPartition(self.topic, p)) for p in range(QUEUES)}
        finally:
            await consumer.stop()


async def record_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end as its records show it: the last record's offset + 1, read by a
    plain consumer to the end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(QUEUES)]
        consumer.assign(tps)
        last = dict.fromkeys(range(QUEUES), 0)
        quiet = 0
        while quiet < 5:  # five empty fetches in a row: everything is read
            fetched = await consumer.getmany(timeout_ms=200)
            quiet = 0 if fetched else quiet + 1
            for tp, records in fetched.items():
                last[tp.partition] = records[-1].offset + 1
        return last
    finally:
        await consumer.stop()


def assert_clean(worker: Worker, rc: int) -> None:
    log = worker.log()
    assert rc == 0, log
    assert "Traceback" not in log and "ExceptionGroup" not in log, log
    assert FALLBACK not in log, log


async def read_and_stopped(tmp_path: Path, kafka_broker: str, kafka_topic: str, count: int) -> Orders:
    """``count`` orders on a new topic, read by a worker "w1" that then stopped cleanly
    (committing at its first acknowledgement and at the stop)."""
    orders = Orders(
        tmp_path, kafka_broker, kafka_topic, HEADRACE_TEST_COMMIT_INTERVAL="600", HEADRACE_TEST_SESSION=SESSION
    )
    await make_topic(kafka_broker, kafka_topic, QUEUES)
    await orders.publish(count)
    worker = orders.worker("w1")
    await orders.until_seen(set(range(count)))
    assert_clean(worker, worker.stop())
    return orders


async def test_a_restarted_worker_resumes_at_its_committed_offset_after_a_stop_and_after_a_kill(
    tmp_path, kafka_broker, kafka_topic
):
    # Commits at a worker's first acknowledgement and at a clean stop: a kill leaves a tail.
    orders = await read_and_stopped(tmp_path, kafka_broker, kafka_topic, 1000)
    stopped_at = await orders.committed()
    ends = await record_ends(kafka_broker, kafka_topic)
    assert stopped_at == ends  # everything read was committed at the stop
    listed = await _listed_ends(kafka_broker, kafka_topic)
    assert any(listed[p] < ends[p] for p in range(QUEUES)), (listed, ends)  # the broker's quirk is there

    # On the same records: its committed offsets are past the listed ends. A replay from the
    # partitions' start would give each partition's old records before its new ones, so by
    # the time the new ones are all seen the count below holds every duplicate.
    second = orders.worker("w2")
    await orders.publish(500)
    await orders.until_seen(set(range(1500)))
    assert_clean(second, second.stop())
    counts = Counter(v for v, _, _ in orders.seen())
    assert sorted(counts) == list(range(1500)) and set(counts.values()) == {1}  # none twice
    committed = await orders.committed()

    await orders.publish(300)
    third = orders.worker("w3")
    await orders.until_seen(set(range(1800)))
    with anyio.fail_after(30):  # w3's first acknowledgement committed (on a busy machine, it can come late)
        while await orders.committed() == committed:
            await anyio.sleep(0.1)
    await orders.publish(200)  # read after w3's first commit: not committed before the kill
    await orders.until_seen(set(range(2000)))
    third.kill()
    at_kill = await orders.committed()
    before = len(orders.seen())
    uncommitted = {v for v, s, offset in orders.seen()[1500:before] if offset >= at_kill[orders.partition(s)]}
    # the first acknowledgement committed, the rest waited for the interval: a tail was left
    assert set(range(1800, 2000)) <= uncommitted < set(range(1500, 2000)), (at_kill, committed)

    fourth = orders.worker("w4")
    with anyio.fail_after(30):
        while len(orders.seen()) < before + len(uncommitted):
            await anyio.sleep(0.1)
    await anyio.sleep(1)
    assert_clean(fourth, fourth.stop())
    again = Counter(v for v, _, _ in orders.seen()[before:])
    assert set(again) == uncommitted and set(again.values()) == {1}  # the uncommitted tail, once
    assert FALLBACK not in third.log()


async def test_a_default_settings_worker_runs_serves_and_stops_cleanly(tmp_path, kafka_broker, kafka_topic):
    orders = Orders(tmp_path, kafka_broker, kafka_topic)  # idempotent left on: the broker refuses it
    worker = orders.worker("w1")
    await orders.publish(200)
    await orders.until_seen(set(range(200)))
    # Past the status topic's first publish (its producer starts then).
    settings = KafkaSettings(kafka_broker, kafka_topic, QUEUES, group_id=orders.group)
    with anyio.fail_after(30):
        while "w1" not in await read_reports(settings):
            await anyio.sleep(0.2)
    assert worker.process.poll() is None, worker.log()
    rc = worker.stop()
    log = worker.log()
    assert_clean(worker, rc)
    assert log.count("refused an idempotent producer") == 1, log
    # aiokafka's INFO lines (joins, syncs, assignments) are not shown at --log-level info
    assert not re.search(r"level=(info|debug) logger=aiokafka", log), log
    assert sorted(v for v, _, _ in orders.seen()) == list(range(200))


def test_aiokafkas_info_lines_show_only_at_debug(tmp_path, kafka_broker, kafka_topic):
    """Counted lines of a worker's start and stop: at info only headrace's; at debug aiokafka's
    INFO lines too."""
    processes = {}
    for level in ("info", "debug"):  # two workers of their own topics and groups, at once
        env = python_env(
            HEADRACE_TEST_KAFKA=kafka_broker,
            HEADRACE_TEST_TOPIC=f"{kafka_topic}-{level}",
            HEADRACE_TEST_GROUP=f"{kafka_topic}-{level}",
            HEADRACE_TEST_RECORDS=str(tmp_path / f"seen-{level}"),
            HEADRACE_TEST_SESSION=SESSION,
        )
        processes[level] = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--app", "tests.streams.kafka.orders_app:app"]
            + ["--log-format", "logfmt", "--log-level", level],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / f"{level}.log", "w"),
        )
    counts = {}
    try:
        for level, process in processes.items():
            log_path = tmp_path / f"{level}.log"
            assert process.stdout is not None
            assert "running" in process.stdout.readline(), log_path.read_text()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, log_path.read_text()
            lines = log_path.read_text().splitlines()
            counts[level] = Counter(
                ("aiokafka" if "logger=aiokafka" in line else "headrace", line.split("level=")[1].split()[0])
                for line in lines
                if "level=" in line
            )
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    # at info: headrace's lines, and aiokafka's warnings and errors only (here its one error
    # about the refused InitProducerId, which headrace's warning explains)
    assert {level for source, level in counts["info"] if source == "aiokafka"} <= {"warning", "error"}, counts
    assert counts["info"][("aiokafka", "info")] == 0 and sum(counts["info"].values()) <= 16, counts
    assert counts["debug"][("aiokafka", "info")] >= 10, counts  # joins, syncs, assignments


async def test_a_topic_recreated_under_the_group_takes_the_fallback_with_its_warning(kafka_broker, kafka_topic, caplog):
    await make_topic(kafka_broker, kafka_topic, QUEUES)
    options = {"idempotent": False, "group_membership": False}

    first = StreamProvider.kafka(kafka_broker, kafka_topic, queues=QUEUES, kafka=options)
    seen = collected(first, NAMESPACE)
    async with first:
        for n in range(300):
            await first.get_stream(StreamId(NAMESPACE, f"o{n % STREAMS}")).send(n)
        await first.flush()
        await drained(first, 30)
    assert sorted(seen) == list(range(300))

    group = KafkaSettings(kafka_broker, kafka_topic).group_id
    tps = [TopicPartition(kafka_topic, p) for p in range(QUEUES)]
    member = AIOKafkaConsumer(bootstrap_servers=kafka_broker, group_id=group, enable_auto_commit=False)
    await member.start()
    try:
        committed = {tp: await member.committed(tp) for tp in tps}
        assert all(offset is not None and offset > 10 for offset in committed.values()), committed
        await delete_topic(kafka_broker, kafka_topic)
        await make_topic(kafka_broker, kafka_topic, QUEUES)
        # The broker drops a deleted topic's offsets; a member of the group still running
        # commits its own again, now onto the recreated topic.
        member.assign(tps)
        await member.commit({tp: offset for tp, offset in committed.items() if offset is not None})
    finally:
        await member.stop()

    second = StreamProvider.kafka(kafka_broker, kafka_topic, queues=QUEUES, kafka=options)
    again = collected(second, NAMESPACE)
    caplog.set_level(logging.WARNING, "headrace.kafka")
    async with second:
        for n in range(1000, 1010):  # fewer records than the group committed in each partition
            await second.get_stream(StreamId(NAMESPACE, f"o{n % STREAMS}")).on_next(n)
        await drained(second, 30)
    assert sorted(again) == list(range(1000, 1010))  # read from the recreated topic's start
    warnings = [r.getMessage() for r in caplog.records if FALLBACK in r.getMessage()]
    assert len(warnings) == QUEUES, warnings
    assert all("the topic was recreated? reading from the oldest retained record 0" in w for w in warnings)


async def test_status_counts_the_lag_from_the_records(tmp_path, kafka_broker, kafka_topic):
    orders = await read_and_stopped(tmp_path, kafka_broker, kafka_topic, 600)
    written_from = time.time()
    await orders.publish(400)  # no worker reads these: the lag
    written_to = time.time()
    ends = await record_ends(kafka_broker, kafka_topic)
    committed = await orders.committed()
    listed = await _listed_ends(kafka_broker, kafka_topic)
    assert any(listed[p] < ends[p] for p in range(QUEUES)), (listed, ends)  # the broker's quirk is there

    settings = KafkaSettings(kafka_broker, kafka_topic, QUEUES, group_id=orders.group)
    status = await read_kafka_status(settings, suspicion_timeout=10)
    queues = {q.queue: q for q in status.queues}
    assert {p: queues[p].next_sequence for p in range(QUEUES)} == ends
    lags = {p: queues[p].checkpoint_lag for p in range(QUEUES)}
    assert lags == {p: ends[p] - committed[p] for p in range(QUEUES)}
    assert all(lag > 0 for lag in lags.values()), lags
    # behind in time: since the oldest record not committed, one of the 400, was written (ms)
    oldest = {q.queue: status.taken_at - q.lag_seconds for q in status.queues}
    assert all(written_from - 0.001 <= t <= written_to + 0.001 for t in oldest.values()), (oldest, written_from)

    # and as the command shows it
    out = subprocess.run(
        [sys.executable, "-m", "streams.cli", "status", "--app", "tests.streams.kafka.orders_app:app", "--json"],
        cwd=ROOT,
        env=orders.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    shown = {q["queue"]: q["checkpoint_lag"] for q in json.loads(out.stdout)["queues"]}
    assert shown == lags


async def _listed_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(QUEUES)]
        return {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
