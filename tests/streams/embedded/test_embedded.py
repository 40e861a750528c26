"""What only the embedded adapter has: the SQLite store, its layout checks, checkpoint
throttling, retention details, and the pub-sub and dead-letter tables."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_asyncio

from streams.adapters.retention import RetentionPolicy, RetentionReport
from streams.backends.embedded.adapter import EmbeddedAdapterFactory, EmbeddedQueueAdapter
from streams.backends.embedded.store import LAYOUT
from streams.core.batch import BatchContainer, BatchKind
from streams.core.deadletters import DeadLetter
from streams.core.errors import ConfigurationError, DecodeError, StoreLayoutError
from streams.core.ids import QueueId, SequenceToken, StreamId
from streams.core.pubsub import SubscriptionRecord, SubscriptionState
from tests.streams.adapters.harness import drain

Q0 = QueueId(0)


def payload(sid: StreamId, *values: object) -> bytes:
    return BatchContainer(sid, BatchKind.DATA, time.time(), list(values)).encode()


def stream_on(factory: EmbeddedAdapterFactory, queue: QueueId) -> StreamId:
    mapper = factory.get_queue_mapper()
    return next(sid for n in range(10_000) if mapper.get_queue_for_stream(sid := StreamId("embedded", str(n))) == queue)


@pytest_asyncio.fixture(loop_scope="function")
async def factory(tmp_path: Path) -> AsyncIterator[EmbeddedAdapterFactory]:
    async with EmbeddedAdapterFactory(tmp_path / "store", queues=2) as opened:
        yield opened


async def fill(adapter: EmbeddedQueueAdapter, sid: StreamId, count: int) -> None:
    await adapter.queue_message_batches([(Q0, sid, payload(sid, n)) for n in range(count)])


async def read_and_ack(adapter: EmbeddedQueueAdapter, acked: int) -> None:
    """Read queue 0 to the end and acknowledge its first ``acked`` records."""
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    messages = await drain(receiver)
    await receiver.messages_delivered([m.token for m in messages[:acked]])
    await receiver.shutdown()


# -- the store ---------------------------------------------------------------------------------


@pytest.mark.parametrize("synchronous, level", [("NORMAL", 1), ("FULL", 2)])
async def test_store_is_in_wal_mode_with_the_chosen_synchronous(tmp_path: Path, synchronous: str, level: int) -> None:
    async with EmbeddedAdapterFactory(tmp_path, queues=2, synchronous=synchronous) as factory:  # type: ignore[arg-type]
        await factory.create_adapter()
        with factory.store.connection() as conn:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
    outsider = sqlite3.connect(tmp_path / "headrace.db")
    try:
        assert outsider.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        outsider.close()


async def test_every_area_is_created_once_in_a_file_of_the_current_layout(tmp_path: Path) -> None:
    for _ in range(2):  # the second opening finds every area made and creates nothing
        async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
            await factory.create_adapter()
            await factory.create_pubsub_store().subscriptions()
            await factory.create_dead_letter_store().count()
            areas = await factory.store.read(lambda conn: [a for (a,) in conn.execute("SELECT area FROM store_areas")])
            (layout,) = await factory.store.read(lambda conn: conn.execute("PRAGMA user_version").fetchone())
    assert sorted(areas) == ["activation_state_ids", "deadletter", "pubsub", "queue"]
    assert layout == LAYOUT == 2


def old_layout_store(path: Path) -> None:
    """A store file as development builds wrote it: areas numbered in ``schema_versions``."""
    path.mkdir()
    with sqlite3.connect(path / "headrace.db") as conn:
        conn.execute("CREATE TABLE schema_versions(area TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_versions VALUES ('queue', 1)")
        conn.execute("CREATE TABLE queue_heads(queue INTEGER PRIMARY KEY, next_seq INTEGER NOT NULL)")
        conn.execute("INSERT INTO queue_heads VALUES (0, 7)")


async def test_a_store_of_the_old_layout_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    old_layout_store(tmp_path / "store")
    async with EmbeddedAdapterFactory(tmp_path / "store", queues=2) as factory:
        with pytest.raises(StoreLayoutError, match="older layout.*move its directory aside.*start with an empty one"):
            await factory.create_adapter()
        with pytest.raises(StoreLayoutError):  # every area, not only the first
            await factory.create_dead_letter_store().count()
    with sqlite3.connect(tmp_path / "store" / "headrace.db") as conn:
        tables = sorted(t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        assert tables == ["queue_heads", "schema_versions"]
        assert conn.execute("SELECT * FROM queue_heads").fetchall() == [(0, 7)]
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)


def test_the_cli_says_what_to_do_with_a_store_of_the_old_layout_in_one_line(tmp_path: Path) -> None:
    old_layout_store(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "produce", "--path", "store", "--queues", "2", "--stream", "a/b"],
        cwd=tmp_path,
        input="1\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "move its directory aside" in lines[0], done.stderr


async def test_a_store_from_a_newer_headrace_is_refused(tmp_path: Path) -> None:
    async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
        await factory.create_adapter()
        await factory.store.write(lambda conn: conn.execute(f"PRAGMA user_version = {LAYOUT + 1}"))
    async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
        with pytest.raises(StoreLayoutError, match=f"layout {LAYOUT + 1}, newer than this headrace reads.*upgrade"):
            await factory.create_pubsub_store().subscriptions()


async def test_opening_with_another_queue_count_is_a_clear_error(tmp_path: Path) -> None:
    async with EmbeddedAdapterFactory(tmp_path, queues=4) as factory:
        await factory.create_adapter()
    async with EmbeddedAdapterFactory(tmp_path, queues=8) as factory:
        with pytest.raises(ConfigurationError, match="has 4 queues, not 8: open it with queues=4"):
            await factory.create_adapter()
    async with EmbeddedAdapterFactory(tmp_path, queues=4) as factory:
        assert (await factory.create_adapter()).mapper.queue_count == 4


def test_bad_paths_and_settings_are_configuration_errors(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    with pytest.raises(ConfigurationError, match="is a file; give a directory"):
        EmbeddedAdapterFactory(a_file)
    with pytest.raises(ConfigurationError, match="queues is a positive int"):
        EmbeddedAdapterFactory(tmp_path, queues=0)
    with pytest.raises(ConfigurationError, match="synchronous is 'NORMAL' or 'FULL'"):
        EmbeddedAdapterFactory(tmp_path, synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_records_per_queue"):
        RetentionPolicy(max_records_per_queue=-1)


async def test_unknown_queues_are_refused(factory: EmbeddedAdapterFactory) -> None:
    adapter = await factory.create_adapter()
    sid = StreamId("embedded", "x")
    with pytest.raises(ConfigurationError, match="queue-7 is not one of this store's 2 queues"):
        await adapter.queue_message_batch(QueueId(7), sid, payload(sid, 1))
    with pytest.raises(ConfigurationError, match="queue-7"):
        adapter.create_receiver(QueueId(7))


async def test_closing_releases_the_database_and_a_later_use_reconnects(tmp_path: Path) -> None:
    factory = EmbeddedAdapterFactory(tmp_path, queues=2)
    adapter = await factory.create_adapter()
    sid = stream_on(factory, Q0)
    await adapter.queue_message_batch(Q0, sid, payload(sid, 1))
    assert (tmp_path / "headrace.db-wal").exists()
    await factory.close()
    # The last connection closed: SQLite folded the WAL back into the database file.
    assert not (tmp_path / "headrace.db-wal").exists()
    await adapter.queue_message_batch(Q0, sid, payload(sid, 2))  # a provider entered again
    assert (await adapter.positions(Q0)).next_sequence == 2
    await adapter.close()


async def test_a_store_locked_by_another_writer_past_busy_timeout_backs_off_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with EmbeddedAdapterFactory(tmp_path, queues=2, busy_timeout=0.1) as factory:
        adapter = await factory.create_adapter()
        sid = stream_on(factory, Q0)
        other = sqlite3.connect(tmp_path / "headrace.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # a writer that does not take turns (sqlite3 shell)
        caplog.set_level(logging.WARNING, logger="headrace.store")
        done = anyio.Event()

        async def write() -> None:
            await adapter.queue_message_batch(Q0, sid, payload(sid, 1))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await anyio.sleep(1.0)  # ten busy_timeouts: it used to fail after the first
            assert not done.is_set()
            other.execute("ROLLBACK")
            other.close()
        lines = [r.getMessage() for r in caplog.records if r.name == "headrace.store"]
        assert len([line for line in lines if "backing off" in line]) == 1, lines
        assert any("writable again" in line for line in lines), lines
        assert (await adapter.positions(Q0)).next_sequence == 1


# -- producing ---------------------------------------------------------------------------------


async def test_batched_inserts_get_dense_sequence_numbers_per_queue(
    factory: EmbeddedAdapterFactory,
) -> None:
    adapter = await factory.create_adapter()
    s0, s1 = stream_on(factory, QueueId(0)), stream_on(factory, QueueId(1))
    items = [(QueueId(n % 2), (s0, s1)[n % 2], payload((s0, s1)[n % 2], n)) for n in range(50)]
    await adapter.queue_message_batches(items)
    await adapter.queue_message_batches(items[:4])
    for queue in (QueueId(0), QueueId(1)):
        mine = [n for n in range(50) if n % 2 == queue.number]
        expected = mine + mine[:2]  # the second call wrote two more to each queue
        positions = await adapter.positions(queue)
        assert (positions.first_retained, positions.next_sequence) == (0, len(expected))
        assert positions.checkpoint is None
        receiver = adapter.create_receiver(queue)
        await receiver.initialize()
        messages = await drain(receiver)
        assert [m.sequence_number for m in messages] == list(range(len(expected)))
        assert [BatchContainer.decode(m.payload).values[0] for m in messages] == expected


async def test_concurrent_producers_are_all_written_in_their_own_order(
    factory: EmbeddedAdapterFactory,
) -> None:
    adapter = await factory.create_adapter()
    streams = [StreamId("embedded", f"p{p}") for p in range(20)]
    mapper = factory.get_queue_mapper()

    async def produce(sid: StreamId) -> None:
        for n in range(15):
            await adapter.queue_message_batch(mapper.get_queue_for_stream(sid), sid, payload(sid, n))

    async with anyio.create_task_group() as tg:
        for sid in streams:
            tg.start_soon(produce, sid)
    per_stream: dict[StreamId, list[int]] = {sid: [] for sid in streams}
    total = 0
    for queue in mapper.get_all_queues():
        receiver = adapter.create_receiver(queue)
        await receiver.initialize()
        messages = await drain(receiver)
        assert [m.sequence_number for m in messages] == list(range(len(messages)))
        total += len(messages)
        for container in map(BatchContainer.decode, (m.payload for m in messages)):
            per_stream[container.stream_id].extend(container.values)
    assert total == 300 and all(values == list(range(15)) for values in per_stream.values())


# -- checkpoints -------------------------------------------------------------------------------


async def test_checkpoint_writes_are_throttled_and_flushed_on_shutdown(tmp_path: Path) -> None:
    async with EmbeddedAdapterFactory(
        tmp_path, queues=2, checkpoint_persist_interval=3600, checkpoint_persist_every=3
    ) as factory:
        adapter = await factory.create_adapter()
        sid = stream_on(factory, Q0)
        await fill(adapter, sid, 10)
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        messages = await drain(receiver)
        persisted = []
        for m in messages[:5]:
            await receiver.messages_delivered([m.token])
            persisted.append((await adapter.positions(Q0)).checkpoint)
        # The first acknowledgement is written at once; then every third call.
        assert persisted == [0, 0, 0, 3, 3]
        assert receiver.checkpoint == 4
        await receiver.shutdown()
        assert (await adapter.positions(Q0)).checkpoint == 4


async def test_a_due_checkpoint_is_written_by_the_next_poll(tmp_path: Path) -> None:
    async with EmbeddedAdapterFactory(tmp_path, queues=2, checkpoint_persist_interval=0.05) as factory:
        adapter = await factory.create_adapter()
        sid = stream_on(factory, Q0)
        await fill(adapter, sid, 3)
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        messages = await drain(receiver)
        await receiver.messages_delivered([messages[0].token])
        await receiver.messages_delivered([messages[1].token])  # within the interval: held
        assert (await adapter.positions(Q0)).checkpoint == 0
        await anyio.sleep(0.06)
        assert await receiver.get_queue_messages(10) == []
        assert (await adapter.positions(Q0)).checkpoint == 1


async def test_a_checkpoint_never_moves_back(factory: EmbeddedAdapterFactory) -> None:
    adapter = await factory.create_adapter()
    await fill(adapter, stream_on(factory, Q0), 10)
    owner, former_owner = adapter.create_receiver(Q0), adapter.create_receiver(Q0)
    for receiver in (owner, former_owner):
        await receiver.initialize()
    await owner.messages_delivered([SequenceToken(8)])
    await former_owner.messages_delivered([SequenceToken(3)])
    await owner.shutdown()
    await former_owner.shutdown()
    assert (await adapter.positions(Q0)).checkpoint == 8


# -- retention ---------------------------------------------------------------------------------


async def test_retention_by_age_waits_for_age_and_for_acknowledgement(
    factory: EmbeddedAdapterFactory,
) -> None:
    adapter = await factory.create_adapter()
    await fill(adapter, stream_on(factory, Q0), 10)
    await read_and_ack(adapter, acked=7)
    policy = RetentionPolicy(max_age=60)
    young = await adapter.apply_retention(policy, now=time.time() + 30)
    assert young == [RetentionReport(QueueId(0)), RetentionReport(QueueId(1))]
    old = await adapter.apply_retention(policy, now=time.time() + 3600)
    assert old[0] == RetentionReport(Q0, expired=7)
    positions = await adapter.positions(Q0)
    assert (positions.first_retained, positions.next_sequence, positions.checkpoint) == (7, 10, 6)
    receiver = adapter.create_receiver(Q0)  # the unacknowledged three are read again, nothing else
    await receiver.initialize()
    read = await drain(receiver)
    assert [m.sequence_number for m in read] == [7, 8, 9]
    assert list(receiver.positions(read)) == [7, 8, 9]  # what the agent acknowledges by
    assert list(receiver.positions([])) == []


async def test_retention_by_size_drops_acknowledged_first_then_counts_and_logs_the_rest(
    factory: EmbeddedAdapterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await factory.create_adapter()
    await fill(adapter, stream_on(factory, Q0), 10)
    await read_and_ack(adapter, acked=2)
    with caplog.at_level(logging.WARNING, logger="headrace.embedded"):
        reports = await adapter.apply_retention(RetentionPolicy(max_age=None, max_records_per_queue=4))
    assert reports[0] == RetentionReport(Q0, expired=2, dropped_unacknowledged=4, dropped_first=2, dropped_last=5)
    assert reports[0].removed == 6
    assert "queue-0: retention dropped 4 unacknowledged records (seq 2..5)" in caplog.text
    assert (await adapter.positions(Q0)).first_retained == 6


async def test_an_emptied_queue_never_reuses_sequence_numbers(
    factory: EmbeddedAdapterFactory,
) -> None:
    adapter = await factory.create_adapter()
    sid = stream_on(factory, Q0)
    await fill(adapter, sid, 3)
    await read_and_ack(adapter, acked=3)
    await adapter.apply_retention(RetentionPolicy(max_age=0), now=time.time() + 1)
    positions = await adapter.positions(Q0)
    assert (positions.first_retained, positions.next_sequence, positions.retained) == (3, 3, 0)
    await fill(adapter, sid, 1)
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    assert [m.sequence_number for m in await drain(receiver)] == [3]


async def test_the_queue_owner_applies_retention_on_its_own(tmp_path: Path) -> None:
    async with EmbeddedAdapterFactory(
        tmp_path, queues=2, retention=RetentionPolicy(max_age=0, interval=3600)
    ) as factory:
        adapter = await factory.create_adapter()
        await fill(adapter, stream_on(factory, Q0), 5)
        await read_and_ack(adapter, acked=4)  # the first poll ran retention before the acks
        assert (await adapter.positions(Q0)).first_retained == 0
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        assert [m.sequence_number for m in await receiver.get_queue_messages(10)] == [4]
        assert (await adapter.positions(Q0)).first_retained == 4


# -- pub-sub and dead letters ------------------------------------------------------------------


async def test_pubsub_subscriptions_round_trip_and_survive_reopening(tmp_path: Path) -> None:
    ns_with_slash = StreamId("plant/line-1", "sensor/7")
    other = StreamId("sensors", "s-2")
    async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
        pubsub = factory.create_pubsub_store()
        await pubsub.add_subscription(SubscriptionRecord("a", ns_with_slash, "Averager"))
        await pubsub.add_subscription(SubscriptionRecord("b", other, "Alarm", SequenceToken(42, 3)))
        await pubsub.add_subscription(SubscriptionRecord("c", ns_with_slash, "Archiver"))
        await pubsub.add_subscription(SubscriptionRecord("a", ns_with_slash, "Averager2"))  # replaces
        await pubsub.fault_subscription("c")
        await pubsub.remove_subscription("missing")
    async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
        pubsub = factory.create_pubsub_store()
        assert await pubsub.subscriptions(ns_with_slash) == [
            SubscriptionRecord("a", ns_with_slash, "Averager2"),
            SubscriptionRecord("c", ns_with_slash, "Archiver", state=SubscriptionState.FAULTED),
        ]
        assert await pubsub.subscriptions(other) == [SubscriptionRecord("b", other, "Alarm", SequenceToken(42, 3))]
        await pubsub.remove_subscription("a")
        assert [r.subscription_id for r in await pubsub.subscriptions()] == ["b", "c"]


async def test_an_undecodable_record_becomes_a_dead_letter_with_its_raw_bytes(
    tmp_path: Path,
) -> None:
    raw = b"\x93\xa3bad\x01\x02"  # msgpack, but not a batch container
    async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
        adapter = await factory.create_adapter()
        await adapter.queue_message_batch(Q0, StreamId("foreign", "w"), raw)
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        [message] = await receiver.get_queue_messages(10)
        with pytest.raises(DecodeError) as raised:
            BatchContainer.decode(message.payload)
        letters = factory.create_dead_letter_store()
        await letters.add(
            [
                DeadLetter(
                    "undecodable",
                    queue=message.queue.number,
                    sequence_number=message.sequence_number,
                    payload=message.payload,
                    detail=str(raised.value),
                ),
                DeadLetter(
                    "late_arrival",
                    stream="sensors/s-1",
                    value={"t": 1.5, "v": [1, 2]},
                    event_time=1.5,
                ),
                DeadLetter("window_closed", stream="sensors/s-1", value=object()),
            ]
        )
        await receiver.shutdown()
    async with EmbeddedAdapterFactory(tmp_path, queues=2) as factory:
        letters = factory.create_dead_letter_store()
        assert (await letters.count(), await letters.count("undecodable")) == (3, 1)
        [undecodable] = await letters.entries("undecodable")
        assert (
            undecodable.letter.payload,
            undecodable.letter.queue,
            undecodable.letter.sequence_number,
        ) == (raw, 0, 0)
        assert "bad header" in undecodable.letter.detail
        late = (await letters.list("late_arrival"))[0]
        assert (late.value, late.event_time, late.stream) == (
            {"t": 1.5, "v": [1, 2]},
            1.5,
            "sensors/s-1",
        )
        closed = (await letters.list("window_closed"))[0]
        assert closed.value.startswith("<object object") and "repr" in closed.detail

        assert await letters.mark_replayed([undecodable.letter_id, 999], at=123.0) == 1
        replayed = await letters.get(undecodable.letter_id)
        assert replayed is not None and replayed.replayed_at == 123.0
        assert await letters.get(999) is None
        pending = await letters.entries(replayed=False)
        assert [s.letter.reason for s in pending] == ["late_arrival", "window_closed"]
        assert [s.letter.reason for s in await letters.entries(after_id=pending[0].letter_id)] == ["window_closed"]
