"""The queue-adapter contract: the same tests on every adapter in ``conftest.HARNESSES``.

Tests work at the adapter and receiver level (no runtime). A test marked
``@pytest.mark.needs(...)`` runs on the adapters declaring those capabilities; that each
adapter declares them truthfully is itself tested first.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import anyio
import msgpack
import pytest

from streams.adapters.protocols import QueueAdapter, RewindableReceiver
from streams.core.batch import BatchContainer, BatchKind, QueueMessage
from streams.core.errors import DecodeError
from streams.core.ids import QueueId, SequenceToken, StreamId
from tests.streams.adapters.harness import AdapterHarness, drain, shutdown_all

REPO = Path(__file__).resolve().parents[3]
Q0 = QueueId(0)


def decoded(messages: list[QueueMessage]) -> list[BatchContainer]:
    return [BatchContainer.decode(m.payload) for m in messages]


def seqs(messages: list[QueueMessage]) -> list[int]:
    return [m.sequence_number for m in messages]


async def test_adapter_declares_its_capabilities_truthfully(harness: AdapterHarness) -> None:
    spec, adapter = harness.spec, harness.adapter
    assert isinstance(adapter, QueueAdapter)
    assert adapter.is_rewindable is spec.rewindable
    assert isinstance(await harness.receiver(Q0), RewindableReceiver) is spec.rewindable
    assert (harness.reopen is not None) is spec.durable
    assert (harness.retain is not None) is spec.retention
    assert (harness.producer is not None) is spec.multiprocess
    assert harness.mapper.get_all_queues() == [QueueId(i) for i in range(len(harness.mapper.get_all_queues()))]


async def test_queue_order_and_per_stream_order_across_interleaved_streams(
    harness: AdapterHarness,
) -> None:
    queues = harness.mapper.get_all_queues()
    shared = harness.streams_on(Q0, 3)  # three streams interleaved on one queue
    others = [harness.streams_on(q, 1)[0] for q in queues[1:]]
    streams = shared + others
    for n in range(12):
        for sid in streams:
            await harness.publish(sid, [n])

    seen: dict[StreamId, list[int]] = defaultdict(list)
    for queue in queues:
        messages = await drain(await harness.receiver(queue), batch=5)
        assert seqs(messages) == sorted(set(seqs(messages)))  # queue order, no repeats
        assert all(m.queue == queue for m in messages)
        for container in decoded(messages):
            assert harness.mapper.get_queue_for_stream(container.stream_id) == queue
            seen[container.stream_id].extend(container.values)
    assert {sid: seen[sid] for sid in streams} == {sid: list(range(12)) for sid in streams}
    assert len(seen) == len(streams)


async def test_batch_containers_with_several_events_round_trip(harness: AdapterHarness) -> None:
    sid = StreamId("contract", "batches")
    sent = [
        await harness.publish(sid, [{"a": 1, "b": [1, 2]}, "text", b"\x00raw", None, 2.5, -7]),
        await harness.publish(sid, [10, 11, 12], event_times=[100.0, None, 99.5]),
        await harness.publish(sid, [150.0], kind=BatchKind.WATERMARK),
        await harness.publish(sid, [], kind=BatchKind.COMPLETED),
    ]
    messages = await drain(await harness.receiver(harness.mapper.get_queue_for_stream(sid)))
    assert decoded(messages) == sent
    events = BatchContainer.decode(messages[1].payload).events(messages[1].sequence_number)
    assert [e.token for e in events] == [SequenceToken(messages[1].sequence_number, i) for i in range(3)]
    assert [e.event_time for e in events] == [100.0, sent[1].arrival_time, 99.5]


async def test_get_queue_messages_honours_max_count_then_returns_empty(
    harness: AdapterHarness,
) -> None:
    (sid,) = harness.streams_on(Q0, 1)
    for n in range(7):
        await harness.publish(sid, [n])
    receiver = await harness.receiver(Q0)
    sizes = [len(await receiver.get_queue_messages(3)) for _ in range(4)]
    assert sizes == [3, 3, 1, 0]
    assert await receiver.get_queue_messages(0) == []


async def test_acknowledged_records_are_not_delivered_again(harness: AdapterHarness) -> None:
    (sid,) = harness.streams_on(Q0, 1)
    for n in range(5):
        await harness.publish(sid, [n])
    receiver = await harness.receiver(Q0)
    first = await drain(receiver)
    await receiver.messages_delivered([m.token for m in first[:3]])
    await receiver.messages_delivered([m.token for m in first[3:]])
    for n in range(5, 7):
        await harness.publish(sid, [n])
    later = await drain(receiver)
    assert [c.values for c in decoded(first + later)] == [[n] for n in range(7)]
    assert seqs(later) == [seqs(first)[-1] + 1, seqs(first)[-1] + 2]


async def test_undecodable_records_come_back_raw_and_reading_goes_on(
    harness: AdapterHarness,
) -> None:
    (sid,) = harness.streams_on(Q0, 1)
    garbage = b"\xc1\x00not msgpack at all"
    foreign = msgpack.packb({"event": "from another producer"})
    await harness.publish(sid, ["before"])
    await harness.write_foreign(Q0, garbage)
    await harness.write_foreign(Q0, foreign)
    await harness.publish(sid, ["after"])

    messages = await drain(await harness.receiver(Q0))
    assert seqs(messages) == sorted(seqs(messages)) and len(messages) == 4
    assert [m.payload for m in messages[1:3]] == [garbage, foreign]
    for bad in messages[1:3]:
        assert bad.queue == Q0  # what a dead letter records: raw bytes, queue and offset
        with pytest.raises(DecodeError):
            BatchContainer.decode(bad.payload)
    assert [c.values for c in decoded([messages[0], messages[3]])] == [["before"], ["after"]]


@pytest.mark.needs("rewindable")
async def test_read_range_rewinds_without_moving_the_read_position(harness: AdapterHarness) -> None:
    (sid,) = harness.streams_on(Q0, 1)
    for n in range(10):
        await harness.publish(sid, [n])
    receiver = await harness.receiver(Q0)
    assert isinstance(receiver, RewindableReceiver)
    head = await receiver.get_queue_messages(4)
    base = head[0].sequence_number

    again = await receiver.read_range(base + 1, 3)
    assert seqs(again) == [base + 1, base + 2, base + 3]
    assert [m.payload for m in again] == [m.payload for m in head[1:4]]
    assert [c.values for c in decoded(await receiver.read_range(base + 8, 100))] == [[8], [9]]
    assert await receiver.read_range(base + 10, 5) == []

    rest = await drain(receiver)  # the read position did not move
    assert [c.values for c in decoded(rest)] == [[n] for n in range(4, 10)]


@pytest.mark.needs("durable")
async def test_restart_resumes_after_the_checkpoint_and_rereads_unacknowledged(
    harness: AdapterHarness,
) -> None:
    assert harness.reopen is not None
    (sid,) = harness.streams_on(Q0, 1)
    for n in range(10):
        await harness.publish(sid, [n])
    receiver = await harness.receiver(Q0)
    messages = await drain(receiver)
    await receiver.messages_delivered([m.token for m in messages[:3]])
    await receiver.messages_delivered([m.token for m in messages[3:6]])
    await shutdown_all(harness)

    await harness.reopen()
    resumed = await drain(await harness.receiver(Q0))
    assert seqs(resumed) == seqs(messages)[6:]
    assert [m.payload for m in resumed] == [m.payload for m in messages[6:]]
    await harness.publish(sid, [10])
    assert [c.values for c in decoded(await drain(harness.receivers[-1]))] == [[10]]


@pytest.mark.needs("durable")
async def test_restart_without_acknowledgements_rereads_everything(harness: AdapterHarness) -> None:
    assert harness.reopen is not None
    (sid,) = harness.streams_on(Q0, 1)
    for n in range(4):
        await harness.publish(sid, [n])
    first = await drain(await harness.receiver(Q0))
    await shutdown_all(harness)
    await harness.reopen()
    again = await drain(await harness.receiver(Q0))
    assert [m.payload for m in again] == [m.payload for m in first] and len(first) == 4


async def _written_read_and_acked(harness: AdapterHarness, records: int, acked: int) -> list[QueueMessage]:
    """Write ``records`` to queue 0, read them all, acknowledge the first ``acked``, stop."""
    (sid,) = harness.streams_on(Q0, 1)
    for n in range(records):
        await harness.publish(sid, [n])
    receiver = await harness.receiver(Q0)
    messages = await drain(receiver)
    await receiver.messages_delivered([m.token for m in messages[:acked]])
    await shutdown_all(harness)
    return messages


@pytest.mark.needs("retention", "rewindable")
async def test_retention_by_age_removes_only_acknowledged_records(harness: AdapterHarness) -> None:
    assert harness.retain is not None
    messages = await _written_read_and_acked(harness, records=10, acked=5)
    await harness.retain(max_age=0)
    receiver = await harness.receiver(Q0)
    assert isinstance(receiver, RewindableReceiver)
    retained = await receiver.read_range(0, 100)
    assert seqs(retained) == seqs(messages)[5:]
    assert seqs(await drain(receiver)) == seqs(messages)[5:]


@pytest.mark.needs("retention", "rewindable")
async def test_retention_by_size_keeps_the_newest_records(harness: AdapterHarness) -> None:
    assert harness.retain is not None
    messages = await _written_read_and_acked(harness, records=10, acked=3)
    await harness.retain(max_records_per_queue=4)  # forces out 3 unacknowledged records too
    receiver = await harness.receiver(Q0)
    assert isinstance(receiver, RewindableReceiver)
    assert seqs(await receiver.read_range(0, 100)) == seqs(messages)[6:]
    assert [c.values for c in decoded(await drain(receiver))] == [[6], [7], [8], [9]]


@pytest.mark.needs("multiprocess")
async def test_a_producer_in_another_process_writes_while_this_one_reads(
    harness: AdapterHarness,
) -> None:
    assert harness.producer is not None
    child_streams, child_records = 6, 40  # written by the subprocess
    local_streams, local_records = 4, 30  # written here, at the same time
    expected = {StreamId("child", str(i)): list(range(child_records)) for i in range(child_streams)}
    local = {StreamId("local", str(i)): list(range(local_records)) for i in range(local_streams)}
    expected.update(local)
    total = sum(map(len, expected.values()))
    spec = {
        "factory": harness.producer.factory,
        "kwargs": harness.producer.kwargs,
        "namespace": "child",
        "streams": child_streams,
        "records": child_records,
    }
    queues = harness.mapper.get_all_queues()
    receivers = {q: await harness.receiver(q) for q in queues}
    received: dict[QueueId, list[QueueMessage]] = {q: [] for q in queues}

    async def run_child() -> None:
        result = await anyio.run_process(
            [sys.executable, "-m", "tests.streams.adapters.producer_process", json.dumps(spec)],
            cwd=REPO,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()

    async def produce_here(sid: StreamId) -> None:
        for value in local[sid]:
            await harness.publish(sid, [value])

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_child)
        for sid in local:
            tg.start_soon(produce_here, sid)
        with anyio.fail_after(60):
            while sum(map(len, received.values())) < total:
                got = 0
                for queue, receiver in receivers.items():
                    batch = await receiver.get_queue_messages(50)
                    received[queue].extend(batch)
                    await receiver.messages_delivered([m.token for m in batch])
                    got += len(batch)
                if not got:
                    await anyio.sleep(0.01)

    per_stream: dict[StreamId, list[int]] = defaultdict(list)
    for queue in queues:
        assert seqs(received[queue]) == list(range(len(received[queue])))  # dense, no duplicates
        assert await receivers[queue].get_queue_messages(50) == []
        for container in decoded(received[queue]):
            per_stream[container.stream_id].extend(container.values)
    assert per_stream == expected
