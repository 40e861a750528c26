"""Standby replicas (``standby_replicas``, streams.backends.kafka.standby): a worker that kept a
warm copy of a queue takes it over reading only the changelog written after its copy's
offset, where one without reads the whole partition; a copy the local store cannot be trusted
with is rebuilt; an idle caught-up copy stays fresh past the changelog's deletion retention; a
queue that stops being a standby here has its copy deleted; a record that is not a saved state
and a cluster that is away never stop the follower; a bad setting is one clear line."""

from __future__ import annotations

import logging
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from streams.adapters.protocols import LocalStates
from streams.backends.embedded import changelog_copy
from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.kafka import changelog as changelog_module
from streams.backends.kafka import own_copies
from streams.backends.kafka import standby as standby_module
from streams.backends.kafka.changelog import DELETE_RETENTION, KafkaChangelog, changelog_topic
from streams.backends.kafka.clients import kafka_outage_log
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.standby import StandbyReplicas
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, SequenceToken
from streams.core.retry import Backoff
from streams.runtime.config import load_config
from tests.end_to_end.durable.test_durable_state import Worker
from tests.helpers import wait_until_async
from tests.kafka_broker import produce_raw
from tests.streams.kafka.test_local_state_store import Load, Totals, kafka_worker, loads


def copy_offset(worker: Worker, topic: str, queue: int) -> int | None:
    """The changelog offset ``worker``'s local state store records for ``queue``."""
    state = Path(worker.env["HEADRACE_TEST_STATE_DIR"]) / f"headrace.state.{topic}" / "worker-0" / "headrace.db"
    if not state.is_file():
        return None
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT next_offset FROM changelog_offsets WHERE queue = ?", (queue,)).fetchone()
    return None if row is None else int(row[0])


async def failover(tmp_path: Path, broker: str, topic: str, replicas: int) -> tuple[Load, int, Worker]:
    """A reads both queues; B joins (one queue each, with ``replicas`` standby copies); once
    B's copy of A's queue is where A's is, A is SIGKILLed and B takes A's queue over, then
    more is written. B's load of A's queue, the offset B's copy of it was at as A died (without
    a copy: A's offset), and B (stopped)."""
    a, b = (kafka_worker(tmp_path, name, broker, topic) for name in ("a", "b"))
    for worker in (a, b):
        worker.env["HEADRACE_TEST_STANDBY_REPLICAS"] = str(replicas)
    totals = Totals()
    a.start()
    try:
        assert await wait_until_async(lambda: len(loads(a)) == 2, 60), a.log.read_text()[-3000:]  # both queues
        b.start()
        assert await wait_until_async(lambda: bool(loads(b)), 60), b.log.read_text()[-3000:]
        theirs = 1 - loads(b)[0].queue  # the queue A kept
        await totals.add(b, 30)
        await totals.exact(b)
        if replicas:  # B's standby copy has caught up with what A wrote (A's copy has it all)
            caught_up = lambda: (copy_offset(b, topic, theirs) or -1) >= (copy_offset(a, topic, theirs) or 1)  # noqa: E731
            assert await wait_until_async(caught_up, 30), b.log.read_text()[-3000:]
        at = copy_offset(b if replicas else a, topic, theirs)  # B's copy's offset as A dies; A's
        assert at is not None and at > 0
    finally:
        a.stop(signal.SIGKILL)
    try:
        assert await wait_until_async(lambda: any(load.queue == theirs for load in loads(b)[1:]), 60)
        await totals.add(b, 20)
        await totals.exact(b)  # every state exact
    finally:
        assert b.stop(signal.SIGTERM) == 0
    taken = next(load for load in loads(b)[1:] if load.queue == theirs)  # B's first load of A's queue
    return taken, at, b


async def test_a_standby_takes_a_killed_workers_queue_over_reading_only_the_tail(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    taken, at, b = await failover(tmp_path, kafka_broker, kafka_topic, replicas=1)
    assert taken.tail and taken.start == at, taken  # read on from its copy's offset
    assert taken.read == taken.end - at == 0, taken  # A wrote nothing after B's copy caught up
    assert f"queue-{taken.queue}: standby copy rebuilt (no local copy of the partition)" in b.log.read_text()
    assert f"standby copies of [{taken.queue}]" in b.log.read_text()


async def test_without_standby_the_new_owner_reads_the_whole_changelog(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    taken, at, b = await failover(tmp_path, kafka_broker, kafka_topic, replicas=0)
    assert not taken.tail and taken.why == "no local copy of the partition", taken
    assert taken.start == 0 and taken.read == taken.end >= at > 0, taken
    assert "standby cop" not in b.log.read_text()


def follower_settings(broker: str, topic: str, state_dir: Path, **more: object) -> KafkaSettings:
    return KafkaSettings(broker, topic, queues=2, idempotent=False, state_dir=state_dir, standby_replicas=1, **more)


@dataclass(frozen=True)
class Follower:
    writer: KafkaChangelog  # another worker's: no local store
    changelog: KafkaChangelog  # this worker's, with its local state store
    local: LocalStates


@asynccontextmanager
async def changelogs(tmp_path: Path, kafka_broker: str, kafka_topic: str) -> AsyncIterator[Follower]:
    """A changelog of two queues, written by another worker, and this worker's, closed after."""
    settings = follower_settings(kafka_broker, kafka_topic, tmp_path)
    writer = KafkaChangelog(settings, kafka_outage_log(settings))
    changelog = KafkaChangelog(settings, kafka_outage_log(settings), open_local=open_changelog_copy)
    try:
        await writer.ensure_topic()
        local = await changelog.local_states()
        assert local is not None
        yield Follower(writer, changelog, local)
    finally:
        await changelog.close()
        await writer.close()


async def test_a_standby_copy_is_rebuilt_follows_writes_and_hands_over_its_tail(
    tmp_path: Path, kafka_broker: str, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy whose offset is past the changelog's end is rebuilt; it then follows states,
    deletions and a record that is no saved state (skipped); the load that makes the queue
    this worker's stops following it and reads nothing more."""
    caplog.set_level(logging.INFO, "headrace.kafka")
    async with changelogs(tmp_path, kafka_broker, kafka_topic) as follower:
        writer, changelog, local = follower.writer, follower.changelog, follower.local
        assert await writer.write(QueueId(1), ([("Counts", "m/1", 5, 0, b"one")], []))
        await local.apply(1, ([("Counts", "stale", 1, 0, b"x")], []), next_offset=10_000)  # never trusted past the end
        standby = StandbyReplicas(changelog)
        m1, m2 = ("Counts", "m/1"), ("Counts", "m/2")
        async with anyio.create_task_group() as tg:
            tg.start_soon(standby.run)
            standby.follow([QueueId(1)])
            assert await wait_until_async(lambda: local.saved_state(1, m1) is not None, 20), caplog.text
            assert local.saved_state(1, ("Counts", "stale")) is None
            await produce_raw(kafka_broker, changelog_topic(changelog.settings), 1, b"not a saved state")
            assert await writer.write(QueueId(1), ([("Counts", "m/2", 6, 0, b"two")], [m1]))
            assert await wait_until_async(lambda: local.offset(1) == 4, 20), (local.offset(1), caplog.text)
            assert local.saved_state(1, m1) is None
            assert local.saved_state(1, m2) == (SequenceToken(6, 0), b"two")
            assert standby.records_read == 4

            await changelog.load(QueueId(1))  # queue 1 is this worker's now
            assert changelog.records_read == 0 and standby.wanted == frozenset()
            assert await writer.write(QueueId(1), ([("Counts", "m/3", 7, 0, b"three")], []))
            await anyio.sleep(1.5)  # a follower still at it would apply the write by now
            assert local.saved_state(1, ("Counts", "m/3")) is None and standby.records_read == 4
            tg.cancel_scope.cancel()
        assert "queue-1: standby copy rebuilt (its offset 10000 is past the changelog's end 1)" in caplog.text
        assert "changelog record b'someone-else' is not a saved state" in caplog.text


async def test_an_idle_caught_up_copy_is_read_on_from_after_the_deletion_retention_has_passed(
    tmp_path: Path,
    kafka_broker: str,
    kafka_topic: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A day and an hour pass with no write to a followed queue: its copy, caught up all the
    while, is read on from its offset at the takeover; a copy no one kept in step meanwhile
    (a copy this worker keeps with no receiver reading its queue) is rebuilt as too old."""
    caplog.set_level(logging.INFO, "headrace.kafka")
    ahead = [0.0]  # how far the wall clock is moved on
    for module in (changelog_module, changelog_copy, own_copies, standby_module):
        monkeypatch.setattr(module, "wall_time", lambda: time.time() + ahead[0])
    async with changelogs(tmp_path, kafka_broker, kafka_topic) as follower:
        writer, changelog, local = follower.writer, follower.changelog, follower.local
        m1 = ("Counts", "m/1")
        for queue in (QueueId(0), QueueId(1)):
            assert await writer.write(queue, ([(*m1, 5, queue.number, b"one")], []))
        await local.apply(0, ([(*m1, 5, 0, b"one")], []), next_offset=1)  # queue 0's copy: this worker's own
        standby = StandbyReplicas(changelog)
        async with anyio.create_task_group() as tg:
            tg.start_soon(standby.run)
            standby.follow([QueueId(1)], owned=[QueueId(0)])
            assert await wait_until_async(lambda: local.offset(1) == 1, 20), caplog.text
            ahead[0] = DELETE_RETENTION + 3600.0
            fresh = lambda: (local.synced(1) or (0, 0.0))[1] >= time.time() + ahead[0] - 60  # noqa: E731
            assert await wait_until_async(fresh, 20), (local.synced(1), caplog.text)
            assert await changelog.load(QueueId(1)) == {m1: (SequenceToken(5, 1), b"one")}  # taken over
            tg.cancel_scope.cancel()
        assert changelog.records_read == 0 and local.offset(1) == 1
        await changelog.load(QueueId(0))
        assert changelog.records_read == 1 and local.saved_state(0, m1) == (SequenceToken(5, 0), b"one")
        assert "queue-1: local state store at changelog offset 1: read its tail" in caplog.text
        assert "queue-0: local state store rebuilt from the changelog (its copy is 25.0 h old" in caplog.text


async def test_a_queue_that_stops_being_a_standby_here_has_its_copy_deleted(
    tmp_path: Path, kafka_broker: str, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Copies of queues 0 and 1 followed; 0 becomes this worker's own (its rows stay), 1 is no
    longer kept here (its rows and offset go); followed again, 1 is rebuilt from the changelog."""
    caplog.set_level(logging.INFO, "headrace.kafka")
    async with changelogs(tmp_path, kafka_broker, kafka_topic) as follower:
        writer, changelog, local = follower.writer, follower.changelog, follower.local
        m1, m2 = ("Counts", "m/1"), ("Counts", "m/2")
        for queue in (QueueId(0), QueueId(1)):
            assert await writer.write(queue, ([(*m1, 5, 0, b"one"), (*m2, 6, 0, b"two")], []))
        standby = StandbyReplicas(changelog)
        async with anyio.create_task_group() as tg:
            tg.start_soon(standby.run)
            standby.follow([QueueId(0), QueueId(1)])
            assert await wait_until_async(lambda: local.offset(0) == local.offset(1) == 2, 20), caplog.text
            standby.follow([QueueId(1)], owned=[QueueId(0)])  # 0 is this worker's now
            standby.follow([], owned=[QueueId(0)])  # 1 is kept elsewhere
            assert await wait_until_async(lambda: local.offset(1) is None, 20), caplog.text
            assert local.count(1) == 0 and local.saved_state(1, m1) is None
            assert local.offset(0) == 2 and local.count(0) == 2  # the own queue's rows stay
            standby.follow([QueueId(1)], owned=[QueueId(0)])
            assert await wait_until_async(lambda: local.offset(1) == 2, 20), caplog.text
            assert local.saved_state(1, m2) == (SequenceToken(6, 0), b"two")
            tg.cancel_scope.cancel()
        assert "queue-1: no longer a standby here: its copy's 2 state(s) deleted from the local store" in caplog.text
        assert "queue-0: no longer a standby" not in caplog.text
        assert caplog.text.count("queue-1: standby copy rebuilt (no local copy of the partition)") == 2


async def test_a_standby_copy_whose_cluster_is_away_logs_one_line_and_keeps_retrying(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = follower_settings("127.0.0.1:1", "sensors", tmp_path, request_timeout=0.5)  # nothing listens
    changelog = KafkaChangelog(settings, kafka_outage_log(settings), open_local=open_changelog_copy)
    attempts: list[int] = []
    standby = StandbyReplicas(changelog, Backoff(0.05, 0.05))
    step = standby._step

    async def counted() -> None:
        attempts.append(1)
        await step()

    standby._step = counted  # type: ignore[method-assign]
    try:
        with anyio.move_on_after(3.0):
            standby.follow([QueueId(0)])
            await standby.run()  # returns only when cancelled: a failure is never raised
    finally:
        await changelog.close()
    assert len(attempts) >= 3, attempts
    failed = [r for r in caplog.records if "following the changelog failed" in r.getMessage()]
    assert len(failed) == 1, caplog.text
    assert "standby copies of queues [0]" in failed[0].getMessage()


def test_a_bad_standby_replicas_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"^standby_replicas is an int >= 0 .*not -1$"):
        KafkaSettings("k:9092", "t", standby_replicas=-1)
    with pytest.raises(ConfigurationError, match="standby_replicas is an int >= 0 .*not '1'"):
        KafkaSettings("k:9092", "t", standby_replicas="1")  # type: ignore[arg-type]
    environ = {
        "HEADRACE_PROVIDER__ADAPTER": "kafka",
        "HEADRACE_PROVIDER__KAFKA__BOOTSTRAP_SERVERS": "k:9092",
        "HEADRACE_PROVIDER__KAFKA__TOPIC": "t",
    }
    with pytest.raises(ConfigurationError, match="HEADRACE_PROVIDER__KAFKA__STANDBY_REPLICAS.*>= 0.*not -2"):
        load_config(environ={**environ, "HEADRACE_PROVIDER__KAFKA__STANDBY_REPLICAS": "-2"})
    config = load_config(environ={**environ, "HEADRACE_PROVIDER__KAFKA__STANDBY_REPLICAS": "2"})
    assert config.provider().factory.settings.standby_replicas == 2
