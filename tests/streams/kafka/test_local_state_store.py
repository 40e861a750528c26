"""A Kafka worker's local state store (streams.backends.kafka.changelog,
streams.backends.embedded.changelog_copy): a worker restarted after a SIGKILL reads only the
changelog's tail; a new owner, a deleted, damaged or impossible store is rebuilt from the
changelog; the running totals of ``orders_app`` stay exact through each; parked durable
states are on disk only, read back by key."""

from __future__ import annotations

import logging
import re
import shutil
import signal
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from streams import Durable, StreamId, StreamProvider
from streams.backends.embedded import changelog_copy
from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.kafka import changelog as changelog_module
from streams.backends.kafka import clients, own_copies
from streams.backends.kafka.changelog import DELETE_RETENTION, KafkaChangelog
from streams.backends.kafka.clients import kafka_outage_log
from streams.backends.kafka.own_copies import OwnCopies
from streams.backends.kafka.settings import KafkaSettings
from streams.core.errors import LocalStoreDamagedError
from streams.core.ids import QueueId, SequenceToken
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_durable_state import Worker, client
from tests.end_to_end.durable.test_parked_durable import counting_devices
from tests.helpers import assert_started_over, idle_past_ttl, wait_until_async
from tests.streams.kafka.test_saved_state import changelog_records
from tests.streams.kafka.test_saved_state import saved_states as changelog_states

KEYS = [f"k{i}" for i in range(10)]
LOAD = re.compile(
    r"queue-(\d+): local state store (at changelog offset \d+: read its tail|rebuilt from the changelog \((.*?)\)); "
    r"read (\d+) changelog record\(s\) \(offsets (\d+) to (\d+)\)"
)


@dataclass(frozen=True)
class Load:
    """One queue load a worker logged."""

    queue: int
    tail: bool  # read on from the local offset (else rebuilt, for ``why``)
    why: str
    read: int
    start: int
    end: int


def loads(worker: Worker) -> list[Load]:
    """The queue loads in ``worker``'s log, in order (its log spans its restarts)."""
    text = worker.log.read_text() if worker.log.exists() else ""
    return [
        Load(int(q), how.startswith("at "), why or "", int(read), int(start), int(end))
        for q, how, why, read, start, end in LOAD.findall(text)
    ]


def kafka_worker(tmp_path: Path, name: str, broker: str, topic: str) -> Worker:
    """An ``orders_app`` worker on ``topic``, its local state store under ``<name>/state``."""
    (tmp_path / name).mkdir()
    state = str(tmp_path / name / "state")
    return Worker(tmp_path / name, HEADRACE_TEST_KAFKA=broker, HEADRACE_TEST_TOPIC=topic, HEADRACE_TEST_STATE_DIR=state)


class Totals:
    """Integers sent to ``RunningTotal``'s keys, and the sums and counts they make."""

    def __init__(self) -> None:
        self.expected = {key: [0, 0] for key in KEYS}
        self.next = 0

    async def add(self, worker: Worker, records: int) -> None:
        """``records`` records of 10 integers, to the keys in turn."""
        async with client(worker).client() as producer:
            for n in range(records):
                key = KEYS[n % len(KEYS)]
                values = list(range(self.next, self.next + 10))
                self.next += 10
                self.expected[key][0] += sum(values)
                self.expected[key][1] += len(values)
                await producer.get_stream(StreamId("amounts", key)).on_next_batch(values)

    def saved(self, worker: Worker) -> dict[str, list[int]]:
        return {
            s["stream"].split("/")[1]: [s["fields"].get("total"), s["fields"].get("count")]
            for s in worker.state("RunningTotal", saved=False)
        }

    async def exact(self, worker: Worker) -> None:
        """Wait until the changelog holds exactly the expected totals (each look is a
        ``headrace state`` process: the last one's answer is the one asserted)."""
        deadline = time.monotonic() + 60
        saved = self.saved(worker)
        while saved != self.expected and time.monotonic() < deadline:
            await anyio.sleep(0.2)
            saved = self.saved(worker)
        assert saved == self.expected, worker.log.read_text()[-3000:]


async def test_a_worker_killed_and_restarted_reads_only_the_changelogs_tail(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    """A is SIGKILLed; B (another machine's store) takes both queues and writes more state;
    A restarted reads from its local offset to the changelog's end, the records B wrote, and
    goes on from the exact totals."""
    a = kafka_worker(tmp_path, "a", kafka_broker, kafka_topic)
    b = kafka_worker(tmp_path, "b", kafka_broker, kafka_topic)
    totals = Totals()
    a.start()
    await totals.add(a, 40)
    await totals.exact(a)
    a.stop(signal.SIGKILL)
    assert [(load.tail, load.read) for load in loads(a)] == [(False, 0), (False, 0)]  # a new, empty changelog

    b.start()
    await totals.add(b, 40)
    await totals.exact(b)
    assert b.stop(signal.SIGTERM) == 0
    first_of_b = {load.queue: load for load in reversed(loads(b))}
    assert sorted(first_of_b) == [0, 1]
    for load in first_of_b.values():  # a new owner reads the whole changelog partition
        assert not load.tail and load.why == "no local copy of the partition"
        assert load.read == load.end > 0 and load.start == 0

    seen = len(loads(a))
    a.start()
    await totals.add(a, 20)
    await totals.exact(a)
    assert a.stop(signal.SIGTERM) == 0
    restarted = loads(a)[seen:]
    assert sorted(load.queue for load in restarted) == [0, 1], restarted
    for load in restarted:  # only what B wrote after A's local offset
        assert load.tail and load.start > 0, load
        assert load.read == load.end - load.start > 0, load
    assert sum(load.read for load in restarted) < sum(load.end for load in restarted)


async def test_a_deleted_damaged_or_impossible_local_store_is_rebuilt_and_exact(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    a = kafka_worker(tmp_path, "a", kafka_broker, kafka_topic)
    state = Path(a.env["HEADRACE_TEST_STATE_DIR"])
    database = state / f"headrace.state.{kafka_topic}" / "worker-0" / "headrace.db"
    totals = Totals()

    async def restart(expected_why: str, how: signal.Signals = signal.SIGTERM) -> None:
        seen = len(loads(a))
        a.start()
        await totals.add(a, 10)
        await totals.exact(a)
        a.stop(how)
        again = loads(a)[seen:]
        assert sorted(load.queue for load in again) == [0, 1], again
        for load in again:
            assert not load.tail and load.why.startswith(expected_why), load
            assert load.start == 0 and load.read == load.end > 0, load

    a.start()
    await totals.add(a, 30)
    await totals.exact(a)
    a.stop(signal.SIGKILL)
    assert database.is_file()

    for part in (database, database.with_name("headrace.db-wal")):  # no longer a database, nor a log
        if part.exists():
            part.write_bytes(b"not a database " * (part.stat().st_size // 15 + 1))
    await restart("no local copy", signal.SIGKILL)
    assert "is damaged" in a.log.read_text()
    assert database.parent.with_name("worker-0.damaged").is_dir()

    shutil.rmtree(state)  # deleted
    await restart("no local copy")

    with sqlite3.connect(database) as conn:  # ahead of the changelog: never trusted past its end
        conn.execute("UPDATE changelog_offsets SET next_offset = next_offset + 1000000")
    await restart("its offset")
    assert "past the changelog's end" in a.log.read_text()

    with sqlite3.connect(database) as conn:  # brought up to date before compaction forgets deletions
        conn.execute("UPDATE changelog_offsets SET synced = synced - 86400")
    await restart("its copy is 24.0 h old")
    assert "compaction may have dropped deletions" in a.log.read_text()


async def test_a_queue_moved_by_a_rebalance_is_restored_exactly(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    """B joins while A reads both queues: the group gives B one, which B builds from the
    changelog; the totals of every key stay exact as both go on."""
    a = kafka_worker(tmp_path, "a", kafka_broker, kafka_topic)
    b = kafka_worker(tmp_path, "b", kafka_broker, kafka_topic)
    totals = Totals()
    a.start()
    try:
        await totals.add(a, 30)
        await totals.exact(a)
        b.start()
        try:
            assert await wait_until_async(lambda: bool(loads(b)), 60), b.log.read_text()[-3000:]
            await totals.add(b, 30)
            await totals.exact(b)
        finally:
            assert b.stop(signal.SIGTERM) == 0
    finally:
        assert a.stop(signal.SIGTERM) == 0
    moved = loads(b)[0]
    assert not moved.tail and moved.why == "no local copy of the partition"
    assert moved.read == moved.end > 0


def parking_provider(broker: str, topic: str, state_dir: Path) -> StreamProvider:
    """One queue of ``topic``, read in this process, its local state store in ``state_dir``;
    a stream quiet for 0.3 s is parked."""
    return StreamProvider.kafka(
        broker,
        topic,
        queues=1,
        kafka={"idempotent": False, "group_membership": False},
        state_dir=state_dir,
        stream_inactivity_period=0.3,
    )


async def test_parked_durable_states_of_a_kafka_worker_are_on_disk_only(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    """50, then 150 parked streams: the worker holds none of their states in memory (the
    local store has each), and each stream's next event reads its state back by key."""
    provider = parking_provider(kafka_broker, kafka_topic, tmp_path)
    counts = counting_devices(provider)
    keys = [f"d{i}" for i in range(150)]

    async def parked(how_many: int) -> None:
        for key in keys[how_many - 50 : how_many]:
            await provider.get_stream(StreamId("devices", key)).on_next(1)
        await drained(provider, 30)
        assert await wait_until_async(lambda: not any(a.stream_ids() for a in provider.agents), 15)
        local = provider.agents[0].receiver.changelog.local
        assert await wait_until_async(lambda: local.count(0) == how_many, 15), local.count(0)
        # White-box: the worker keeps no parked state (none of the streams is active).
        assert [agent._catalog.parked_by_type() for agent in provider.agents] == [{}]

    async with provider:
        await parked(50)
        await parked(100)
        await parked(150)
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).on_next_batch([2, 3])
        await drained(provider, 30)
    assert counts == {key: [1, 3] for key in keys}


async def test_an_idle_parked_state_expires_from_the_local_store_and_the_changelog(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    """A parked durable state past its ``ttl`` is deleted by key: a tombstone in the changelog,
    then from the local store; its stream's next event starts from the defaults."""
    provider = parking_provider(kafka_broker, kafka_topic, tmp_path)
    seen: list[tuple[str, int]] = []

    @provider.implicit("devices")
    class LastSeen:
        count = Durable(0, ttl=3.0)  # above commit_interval (1 s): an active stream's is rewritten first

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)
            seen.append((self.key, self.count))

    async with provider:
        local = provider.agents[0].receiver.changelog.local
        # "kept" stays active; "gone" is parked, then idle past its ttl
        gone = await idle_past_ttl(provider, lambda: local.count(0) == 2, rounds=12)
        name = LastSeen.__headrace_consumer_name__  # type: ignore[attr-defined]
        keys = [(name, "devices/gone"), (name, "devices/kept")]
        assert local.saved_states(0, keys).keys() == {(name, "devices/kept")}
        assert [stream for stream, _, _ in await changelog_states(kafka_broker, kafka_topic)] == ["devices/kept"]
        await gone.on_next(3)
        await drained(provider, 30)
    assert_started_over(seen, kept_count=13)


@pytest.mark.parametrize("refreshed_by", ["reads", "unload"])
async def test_an_own_queue_idle_past_the_deletion_retention_is_read_on_from_its_offset(
    tmp_path: Path,
    kafka_broker: str,
    kafka_topic: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    refreshed_by: str,
) -> None:
    """A day and an hour pass with no write to a worker's own queue: its copy, at the end its
    receiver last wrote, keeps a fresh "synced" time (moved on as the queue is read, or as it
    is let go), and the restarted worker reads on from its offset, the counts exact."""
    caplog.set_level(logging.INFO, "headrace.kafka")
    ahead = [0.0]  # how far the wall clock is moved on
    for module in (changelog_module, changelog_copy, own_copies):
        monkeypatch.setattr(module, "wall_time", lambda: time.time() + ahead[0])
    if refreshed_by == "unload":  # never while it is read: only as the queue is let go
        monkeypatch.setattr(own_copies, "REFRESH", 1e9)
    keys = [f"d{i}" for i in range(5)]
    provider = parking_provider(kafka_broker, kafka_topic, tmp_path)
    counts = counting_devices(provider)
    async with provider:
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).on_next(1)
        await drained(provider, 30)
        local = provider.agents[0].receiver.changelog.local
        assert await wait_until_async(lambda: local.count(0) == len(keys), 15), local.count(0)
        at = local.offset(0)
        ahead[0] = DELETE_RETENTION + 3600.0
        fresh = lambda: (local.synced(0) or (0, 0.0))[1] >= time.time() + ahead[0] - 60  # noqa: E731
        assert await wait_until_async(fresh, 10) == (refreshed_by == "reads"), local.synced(0)
    with sqlite3.connect(tmp_path / f"headrace.state.{kafka_topic}" / "worker-0" / "headrace.db") as conn:
        next_offset, synced = conn.execute("SELECT next_offset, synced FROM changelog_offsets").fetchone()
    assert next_offset == at and synced >= time.time() + ahead[0] - 60

    provider = parking_provider(kafka_broker, kafka_topic, tmp_path)
    counts = counting_devices(provider)
    async with provider:
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).on_next_batch([2, 3])
        await drained(provider, 30)
    assert counts == {key: [3] for key in keys}
    assert f"queue-0: local state store at changelog offset {at}: read its tail; read 0 changelog record(s)" in (
        caplog.text
    )
    assert "h old" not in caplog.text


def damage_state_pages(database: Path) -> int:
    """Overwrite the root page of every table and index of the local store's file (not the
    schema's page), once its write-ahead log is folded in; then touch the schema's page
    through the log, so that the worker's connections drop the pages they hold and read the
    damaged ones. How many pages were damaged."""
    with sqlite3.connect(database, isolation_level=None) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        roots = [row[0] for row in conn.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 1")]
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # a reader in the way
            time.sleep(0.05)
        with database.open("r+b") as file:
            for page in roots:
                file.seek((page - 1) * page_size)
                file.write(b"\xff" * page_size)
        conn.execute("PRAGMA user_version = 7")
    return len(roots)


@pytest.mark.parametrize("found_by", ["lookup", "write"])
async def test_a_local_store_damaged_while_in_use_is_set_aside_and_its_states_stay_exact(
    tmp_path: Path, kafka_broker: str, kafka_topic: str, caplog: pytest.LogCaptureFixture, found_by: str
) -> None:
    """Pages of the running worker's local store are damaged: parked streams whose next
    events look their states up there ("lookup"), or active ones whose next commit writes
    there ("write"). The file is set aside (one line), the queue's states come from the
    changelog, the worker goes on, and every count is exact, then and after a restart."""
    caplog.set_level(logging.INFO, "headrace.kafka")
    keys = [f"d{i}" for i in range(20)]
    parked = found_by == "lookup"

    def started() -> tuple[StreamProvider, dict[str, list[int]]]:
        provider = StreamProvider.kafka(
            kafka_broker,
            kafka_topic,
            queues=1,
            kafka={"idempotent": False, "group_membership": False},
            state_dir=tmp_path,
            stream_inactivity_period=0.3 if parked else 600.0,
        )
        return provider, counting_devices(provider)

    async def send(provider: StreamProvider, values: list[int]) -> None:
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).on_next_batch(values)
        await drained(provider, 30)

    database = tmp_path / f"headrace.state.{kafka_topic}" / "worker-0" / "headrace.db"
    provider, counts = started()
    async with provider:
        await send(provider, [1])
        local = provider.agents[0].receiver.changelog.local
        assert await wait_until_async(lambda: local.count(0) == len(keys), 15), local.count(0)
        if parked:
            assert await wait_until_async(lambda: not any(a.stream_ids() for a in provider.agents), 15)
        assert damage_state_pages(database) >= 2
        await send(provider, [2, 3])
        assert await wait_until_async(lambda: "is damaged" in caplog.text, 15), caplog.text
        await send(provider, [4])
        assert await wait_until_async(lambda: local.count(0) == len(keys), 15), local.count(0)
        assert local.set_aside == 1
    assert counts == {key: [1, 3, 4] for key in keys}, counts
    damaged = [line for line in caplog.text.splitlines() if "is damaged" in line]
    assert len(damaged) == 1 and "worker-0.damaged" in damaged[0], damaged
    assert database.parent.with_name("worker-0.damaged").is_dir()

    provider, counts = started()  # the states the rebuilt file holds, read back
    async with provider:
        await send(provider, [5])
    assert counts == {key: [5] for key in keys}, counts


async def test_a_load_cut_by_a_set_aside_of_the_local_store_rebuilds_its_copy_whole(
    tmp_path: Path, kafka_broker: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another call finds the local store damaged while a queue's copy is read in, between
    two fetches: the file is set aside, and the load starts over into the empty one rather
    than leave a copy holding the later fetches only, at the changelog's end."""
    monkeypatch.setattr(clients, "_FETCH_RECORDS", 10)  # the 30 records in three fetches
    settings = KafkaSettings(kafka_broker, kafka_topic, queues=2, idempotent=False, state_dir=tmp_path)
    writer = KafkaChangelog(settings, kafka_outage_log(settings))
    changelog = KafkaChangelog(settings, kafka_outage_log(settings), open_local=open_changelog_copy)
    keys = [("Counts", f"m/{i}") for i in range(30)]
    applied = changelog_module.apply_records

    async def damaged_after_the_first_fetch(local: Any, queue: QueueId, records: Any) -> int:
        reached = await applied(local, queue, records)
        if local.set_aside == 0:  # another queue's lookup finds the damage meanwhile
            damage_state_pages(local.path)
            with pytest.raises(LocalStoreDamagedError):
                local.count(1)
        return reached

    try:
        await writer.ensure_topic()
        for key in keys:
            assert await writer.write(QueueId(0), ([(*key, 1, 0, b"kept")], []))
        local = await changelog.local_states()
        assert local is not None
        monkeypatch.setattr(changelog_module, "apply_records", damaged_after_the_first_fetch)
        await changelog.load(QueueId(0))
        assert local.set_aside == 1
        assert local.offset(0) == len(keys)
        assert local.count(0) == len(keys), local.count(0)
        assert local.saved_states(0, keys) == {key: (SequenceToken(1, 0), b"kept") for key in keys}
    finally:
        await changelog.close()
        await writer.close()


async def test_a_synced_time_that_cannot_be_written_now_is_left_and_the_read_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Moving an idle copy's "synced" time on is a receiver's aside as it reads: a store that
    cannot take the row now (its file system turned read-only, or full) leaves the time as it
    was, in one line, rather than fail the read whose records are already fetched."""
    local = open_changelog_copy(tmp_path)
    try:
        await local.apply(0, ([("Counts", "m/1", 1, 0, b"s")], []), next_offset=5)
        before = local.synced(0)
        with local.store.connection() as conn:  # the store's one connection, from now read-only
            conn.execute("PRAGMA query_only = ON")
        copies = OwnCopies()
        await copies.keep_synced(local, QueueId(0), anyio.Lock(), (5, time.time() + 120), lambda: True, every=0.0)
        await copies.keep_synced(local, QueueId(0), anyio.Lock(), (5, time.time() + 121), lambda: True)  # a read
        with local.store.connection() as conn:
            conn.execute("PRAGMA query_only = OFF")
        assert local.synced(0) == before
        # Once: the read after it waits its turn, REFRESH seconds on, as after a success.
        assert caplog.text.count("synced time cannot be moved on now") == 1, caplog.text
        await copies.keep_synced(local, QueueId(0), anyio.Lock(), (5, time.time() + 120), lambda: True, every=0.0)
        synced = local.synced(0)
        assert synced is not None and before is not None and synced[0] == 5 and synced[1] > before[1]
    finally:
        local.close()


async def test_a_lost_copys_stand_in_is_read_again_after_a_write_its_rebuild_could_not_follow(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    """The local store was set aside: lookups of the queue's parked states come from its
    changelog partition, read once. A write lands in Kafka but the rebuild after it fails
    (the new file read-only): the next lookup answers with the written state, not the one
    read before it."""
    settings = KafkaSettings(kafka_broker, kafka_topic, queues=1, idempotent=False, state_dir=tmp_path)
    changelog = KafkaChangelog(settings, kafka_outage_log(settings), open_local=open_changelog_copy)
    key, queue = ("Counts", "m/1"), QueueId(0)
    try:
        await changelog.ensure_topic()
        local = await changelog.local_states()
        assert local is not None
        await changelog.load(queue)
        assert await changelog.write(queue, ([(*key, 1, 0, b"one")], []))
        damage_state_pages(local.path)
        assert changelog.saved_states(queue, [key]) == {key: (SequenceToken(1, 0), b"one")}  # from Kafka
        assert local.set_aside == 1
        with local.store.connection() as conn:  # the new file's one connection: writes fail
            conn.execute("PRAGMA query_only = ON")
        assert not await changelog.write(queue, ([(*key, 2, 0, b"two")], []))  # in Kafka, not rebuilt
        assert changelog.lost(queue)
        assert changelog.saved_states(queue, [key]) == {key: (SequenceToken(2, 0), b"two")}
    finally:
        await changelog.close()


async def test_a_commit_larger_than_a_record_batch_lands_whole_at_consecutive_offsets(
    tmp_path: Path, kafka_broker: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit's states go to Kafka in record batches of up to ``BATCH_BYTES``: a write of
    three batches' worth lands in order, the local store records the changelog offset after
    its last record, and a new owner reading the changelog finds every state, a later write
    of the same keys winning."""
    settings = KafkaSettings(kafka_broker, kafka_topic, queues=1, idempotent=False, state_dir=tmp_path / "one")
    changelog = KafkaChangelog(settings, kafka_outage_log(settings), open_local=open_changelog_copy)
    queue = QueueId(0)
    keys = [("Counts", f"m/{i}") for i in range(600)]
    value = b"v" * 1024  # 600 states of 1 KiB: more than two batches of 256 KiB
    batches: list[int] = []
    send_batch = AIOKafkaProducer.send_batch

    async def counted(self: AIOKafkaProducer, batch: Any, topic: str, *, partition: int) -> Any:
        batches.append(partition)
        return await send_batch(self, batch, topic, partition=partition)

    monkeypatch.setattr(AIOKafkaProducer, "send_batch", counted)
    try:
        await changelog.ensure_topic()
        local = await changelog.local_states()
        assert local is not None
        await changelog.load(queue)
        assert await changelog.write(queue, ([(*key, 1, 0, value) for key in keys], [("Counts", "m/gone")]))
        assert local.offset(0) == 601  # a tombstone, then 600 states
        assert batches == [0, 0, 0]
        assert await changelog.write(queue, ([(*keys[7], 2, 0, b"newer")], []))
        assert local.offset(0) == 602
        assert local.count(0) == 600
    finally:
        await changelog.close()
    fresh = KafkaSettings(kafka_broker, kafka_topic, queues=1, idempotent=False, state_dir=tmp_path / "two")
    new_owner = KafkaChangelog(fresh, kafka_outage_log(fresh), open_local=open_changelog_copy)
    try:
        await new_owner.load(queue)
        found = new_owner.saved_states(queue, keys)
        assert len(found) == 600
        assert found[keys[7]] == (SequenceToken(2, 0), b"newer")
        assert all(found[key] == (SequenceToken(1, 0), value) for key in keys if key != keys[7])
        in_order = [("m/gone", True), *((f"m/{i}", False) for i in range(600)), ("m/7", False)]
        assert await changelog_records(kafka_broker, kafka_topic) == in_order
    finally:
        await new_owner.close()
