"""One-event records of headrace's own format, gathered by stream and read into one batch
(streams.core.record_batch.gathered): each event keeps its own record's token, so tokens,
commits, rewinds and saved positions read the same as record by record."""

from __future__ import annotations

import math

import anyio

from streams import SequenceToken, StreamId, StreamProvider
from streams.core.batch import BatchKind, QueueMessage
from streams.core.codec import encode_batch
from streams.core.errors import DecodeError
from streams.core.ids import QueueId
from streams.core.record_batch import ContainerGroup, gathered
from tests.agents.delivery.conftest import Recorder, drained
from tests.kafka_fixtures import SHORT_SESSION

A, B = StreamId("ns", "a"), StreamId("ns", "b")
Q = QueueId(0)


def one(sid: StreamId, value: object, arrival: float, event_time: float | None = None) -> bytes:
    return encode_batch(sid, BatchKind.DATA, arrival, [value], None if event_time is None else [event_time])


def test_one_event_records_are_gathered_by_stream_and_every_other_record_keeps_its_place():
    payloads = [
        one(A, "a0", 10.0),
        one(B, "b1", 11.0, event_time=5.0),
        b"\xc1 not headrace",
        one(A, "a3", 13.0),
        encode_batch(A, BatchKind.DATA, 14.0, ["a4", "a4'"]),  # several events: its own, ends A's group
        one(A, "a5", 15.0),
        one(B, "b6", 12.0),
    ]
    out = gathered([QueueMessage(Q, n, p) for n, p in enumerate(payloads)], 9.0)
    assert [m.sequence_number for m in out] == [0, 1, 2, 4, 5]
    a, b, bad, several, last = out
    with_tokens = [[(e.value, str(e.token)) for e in m.container().events(m.sequence_number)] for m in (a, b, last)]
    assert with_tokens == [[("a0", "0:0"), ("a3", "3:0")], [("b1", "1:0"), ("b6", "6:0")], [("a5", "5:0")]]
    group = b.container()
    assert isinstance(group, ContainerGroup)
    assert [(e.event_time, e.arrival_time) for e in group.events(1)] == [(5.0, 11.0), (12.0, 12.0)]
    assert group.clocks == [10.0, 15.0] and group.clock_before == 10.0  # the queue's clock before each
    assert a.container().clock_before == 9.0
    assert isinstance(bad.decoded, type(None)) and bad.payload == payloads[2]
    try:
        bad.container()
    except DecodeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a record that is no container stays one to dead-letter")
    assert several.container().values == ["a4", "a4'"] and several.container().clock_before == 13.0
    # A replay from record 3 (read record by record) skips what a position saved at 3 holds.
    batch = a.container().events(0)
    assert batch.after(batch.last_position()).values == [] and str(batch.last_position()) == "3:0"
    assert batch.after(SequenceToken(0)).values == ["a3"]
    assert gathered([], -math.inf) == []


async def test_a_worker_takes_one_event_records_in_batches_with_their_own_tokens_and_rewinds_to_any(
    kafka_broker, kafka_topic
):
    sids = [StreamId("k", str(i)) for i in range(3)]
    first = {sid: Recorder() for sid in sids}

    def provider() -> StreamProvider:
        return StreamProvider.kafka(
            kafka_broker, kafka_topic, queues=1, kafka={"idempotent": False}, balancer_options=SHORT_SESSION
        )

    async with provider().client() as client:  # written before the worker reads: one read gathers them
        for n in range(30):
            for sid in sids:
                await client.get_stream(sid).on_next(n)
    worker = provider()
    for sid in sids:
        await worker.get_stream(sid).subscribe(first[sid])
    inside = Recorder()
    async with worker:
        with anyio.fail_after(30):
            while any(len(r.events) < 30 for r in first.values()):
                await anyio.sleep(0.05)
        await drained(worker, 30)
        # From a token inside what the cache holds as one batch: from that record on.
        middle = first[sids[1]].events[10].token
        await worker.get_stream(sids[1]).subscribe(inside, token=middle)
        await drained(worker, 30)
    for i, sid in enumerate(sids):
        recorder = first[sid]
        assert recorder.values == list(range(30))
        assert [str(e.token) for e in recorder.events] == [f"{3 * n + i}:0" for n in range(30)]  # each its record's
        assert recorder.batches < 30  # gathered
    assert inside.values == list(range(10, 30)) and inside.events[0].token == middle
    # After a restart the cache is empty: the same token rewinds the topic, record by record.
    again = Recorder()
    worker = provider()
    async with worker:
        await worker.get_stream(sids[1]).subscribe(again, token=middle)
        await worker.get_stream(sids[1]).on_next(30)
        with anyio.fail_after(30):
            while len(again.events) < 21:
                await anyio.sleep(0.05)
        await drained(worker, 30)
    assert again.values == list(range(10, 31))
    assert [str(e.token) for e in again.events][:2] == [str(middle), f"{3 * 11 + 1}:0"]
