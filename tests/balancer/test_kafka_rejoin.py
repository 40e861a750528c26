"""A Kafka worker restarted after a SIGKILL rejoins its group as the member it was
(streams/backends/kafka/rejoin.py), on the Tansu broker: it gets its old queues back and a
live peer loses none; a second process on the same state directory never takes its member
id; a note whose member the broker no longer knows still joins. (The rejoin's one write to
aiokafka's private group coordinator is checked here: an aiokafka that moves it fails the
first test.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from balancer.protocols import QueueDistributionChange
from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.kafka.balancer import GroupMember, KafkaGroupBalancer
from streams.backends.kafka.changelog import local_state_dir
from streams.backends.kafka.rejoin import NOTE, Incarnation, Notes
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import QueueId
from tests.balancer.rejoin_member import SESSION
from tests.kafka_fixtures import create_topic

ROOT = Path(__file__).resolve().parents[2]
QUEUES = [QueueId(n) for n in range(4)]


class Member:
    """``tests/balancer/rejoin_member.py`` in a process of its own, and what it printed."""

    def __init__(self, broker: str, topic: str, state_dir: Path, worker: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.balancer.rejoin_member", broker, topic, str(state_dir), worker],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: list[dict[str, Any]] = []

    async def until(self, owned: int, within: float = 40) -> dict[str, Any]:
        """The first change after which it owns ``owned`` queues."""
        assert self.process.stdout is not None
        with anyio.fail_after(within):
            while True:
                line = await anyio.to_thread.run_sync(self.process.stdout.readline)
                assert line, f"the member exited ({self.process.wait()})"
                self.lines.append(json.loads(line))
                if len(self.lines[-1].get("owned", ())) == owned:
                    return self.lines[-1]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


def peer(broker: str, topic: str) -> tuple[KafkaGroupBalancer, list[QueueDistributionChange]]:
    """An in-process worker of the group (no notes) and the changes it is told."""
    balancer = KafkaGroupBalancer(KafkaSettings(broker, topic, queues=4), session_timeout=SESSION)
    changes: list[QueueDistributionChange] = []

    async def listener(change: QueueDistributionChange) -> None:
        changes.append(change)
        for queue in change.removed | change.lost:
            await balancer.release(queue)

    balancer.subscribe(listener)
    return balancer, changes


async def test_a_sigkilled_worker_restarted_on_its_state_dir_gets_its_queues_back_without_a_rebalance(
    kafka_broker, kafka_topic, tmp_path
):
    await create_topic(kafka_broker, kafka_topic, 4)
    live, changes = peer(kafka_broker, kafka_topic)
    first = Member(kafka_broker, kafka_topic, tmp_path, "w1")
    second: Member | None = None
    try:
        await first.until(4)
        async with anyio.create_task_group() as tg:
            await live.initialize("w0", QUEUES)
            tg.start_soon(live.run)
            was = await first.until(2)  # the group settled: two queues each
            with anyio.fail_after(20):
                while len(live.get_my_queues()) != 2:
                    await anyio.sleep(0.1)
            before = len(changes)
            first.kill()
            second = Member(kafka_broker, kafka_topic, tmp_path, "w1")
            back = await second.until(2)
            await anyio.sleep(SESSION + 2)  # past the dead member's session: nothing moves
            assert changes[before:] == []  # the live worker lost nothing, not even for a moment
            assert len(live.get_my_queues()) == 2
            await live.shutdown()
            tg.cancel_scope.cancel()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert back["member"] == back["rejoined"] == was["member"]
    assert back["owned"] == was["owned"] and back["added"] == was["owned"] and back["removed"] == []
    assert back["slot"] == was["slot"]
    assert second.lines == [back]  # its one change: its old queues, at once
    assert not list(tmp_path.rglob(f"{NOTE}.note"))  # the clean stop deleted the note


async def test_a_second_process_on_the_same_state_dir_never_takes_the_live_ones_member_id(
    kafka_broker, kafka_topic, tmp_path
):
    await create_topic(kafka_broker, kafka_topic, 4)
    first = Member(kafka_broker, kafka_topic, tmp_path, "w1")
    second: Member | None = None
    try:
        alone = await first.until(4)
        second = Member(kafka_broker, kafka_topic, tmp_path, "w1")  # same name, same directory
        joined = await second.until(2)
        shared = await first.until(2)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert joined["rejoined"] is None and joined["member"] != alone["member"]
    assert joined["slot"] != alone["slot"]  # the live one's slot (and note) is locked
    assert sorted(joined["owned"] + shared["owned"]) == [0, 1, 2, 3]


async def test_a_note_of_a_member_the_broker_no_longer_knows_still_joins(kafka_broker, kafka_topic, tmp_path):
    await create_topic(kafka_broker, kafka_topic, 4)
    settings = KafkaSettings(kafka_broker, kafka_topic, queues=4, state_dir=tmp_path)
    store = open_changelog_copy(local_state_dir(settings))
    stale = Incarnation("w1", "aiokafka-0-long-gone", 7, (), tuple(), (), None)
    store.write_note(NOTE, stale.encode())

    async def notes() -> Notes:
        return store

    balancer = KafkaGroupBalancer(settings, session_timeout=SESSION, notes=notes)
    try:
        await balancer.initialize("w1", QUEUES)
        assert balancer.rejoined == stale  # it did try the old id first
        owned = balancer.get_my_queues()
        assert balancer._consumer is not None
        member = GroupMember.of(balancer._consumer).member_id
        noted = Incarnation.decode(store.read_note(NOTE) or b"")
        await balancer.shutdown()
        left = store.read_note(NOTE)
    finally:
        store.close()
    assert owned == frozenset(QUEUES)
    assert left is None  # the clean stop deleted the note
    # Kafka answers the old id UNKNOWN_MEMBER_ID and aiokafka joins as new; Tansu takes the
    # id as given. Either way the worker joins, and notes the member it now is.
    assert noted is not None and noted.member_id == member and noted.worker == "w1"
    assert sorted(tp.partition for tp in noted.owned) == [0, 1, 2, 3]


def test_a_note_is_kept_only_while_the_slot_is_locked(tmp_path):
    store = open_changelog_copy(tmp_path)
    store.write_note(NOTE, b"x")
    assert store.read_note(NOTE) == b"x"
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.write_note(NOTE, b"y")
