"""The re-keying hops of one worker enqueue their batches on the shared producer one at a
time. Side by side, hops that waited for the same partition's turn on the producer together
ran out of aiokafka's wait and failed with ``KafkaTimeoutError`` (a worker's
agents start side by side). A queue's reads sent on wait for each other, and the source
offset waits for them. No broker: a producer that records whose batch it takes."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka.record.memory_records import MemoryRecords

from streams.backends.kafka.changelog import KafkaChangelog
from streams.backends.kafka.clients import kafka_outage_log
from streams.backends.kafka.record_receiver import KafkaRecordReceiver
from streams.backends.kafka.repartition import Rekeying, Sends, _filled
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import QueueId
from streams.core.records import record_format

SETTINGS = KafkaSettings("k:9092", "readings", queues=2, records="json", key_field="device")


class Batch:
    """Two records a batch, so that a hop sends several; filled as the hop fills aiokafka's
    (through its record batch builder, ``_builder``)."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self._builder = self
        self._relative_offset = 0

    def append(self, offset: int, timestamp: int, key: bytes, value: bytes, headers: Any) -> object | None:
        if len(self.keys) == 2:
            return None
        self.keys.append(key)
        return object()

    def close(self) -> None:
        pass


class Producer:
    def __init__(self) -> None:
        self.taken: list[str] = []  # which hop each batch came from, in the order enqueued
        self.records = 0

    def create_batch(self) -> Batch:
        return Batch()

    async def send_batch(self, batch: Batch, topic: str, partition: int) -> asyncio.Future[None]:
        self.taken.append(batch.keys[0].decode()[0])
        self.records += len(batch.keys)
        await anyio.sleep(0)  # a partition's turn: other tasks run meanwhile
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def forwards(hop: str) -> list[tuple[ConsumerRecord[bytes, bytes], bytes]]:
    records = []
    for n in range(6):
        r = ConsumerRecord("readings", 0, n, 0, 0, None, b"{}", None, 0, 2, ())
        records.append((r, f"{hop}-device-{n}".encode()))
    return records


def hop() -> Rekeying:
    fmt = record_format("json")
    assert fmt is not None
    return Rekeying(SETTINGS, TopicPartition("readings", 0), TopicPartition("readings-hop", 0), fmt, "device")


async def run(lock: anyio.Lock | None) -> Producer:
    producer = Producer()
    async with anyio.create_task_group() as tg:
        for name in "ab":
            tg.start_soon(hop().forward, producer, forwards(name), lock)  # type: ignore[arg-type]
    return producer


async def test_hops_sharing_a_producer_enqueue_one_at_a_time() -> None:
    locked = await run(anyio.Lock())
    assert locked.records == 12 and len(locked.taken) > 2  # every record sent, several batches a hop
    assert locked.taken == sorted(locked.taken)  # one hop's batches all enqueued before the other's
    side_by_side = await run(None)
    assert sorted(side_by_side.taken) == sorted(locked.taken)
    assert side_by_side.taken != sorted(side_by_side.taken)  # without the lock they interleave


class RefusingProducer(Producer):
    """Fails the first batch it takes for partition 0 for good, as Kafka does a record too
    large; records which batches reach each partition."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[int, list[list[bytes]]] = {0: [], 1: []}

    async def send_batch(self, batch: Batch, topic: str, partition: int) -> asyncio.Future[None]:
        self.sent[partition].append(batch.keys)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if partition == 0 and len(self.sent[0]) == 1:
            done.set_exception(MessageSizeTooLargeError())
        else:
            done.set_result(None)
        return done


async def test_a_partitions_later_batch_is_not_sent_after_its_earlier_one_failed() -> None:
    # Had the second batch landed, the first one's records, sent again on the next read,
    # would sit behind it in the repartition partition and be skipped as copies: lost.
    rekeying = hop()
    keys = [f"device-{n}".encode() for n in range(40)]
    to_0 = [k for k in keys if rekeying._placing.queue_of_key(k.decode()).number == 0][:5]
    to_1 = [k for k in keys if rekeying._placing.queue_of_key(k.decode()).number == 1][:3]
    records = [
        (ConsumerRecord("readings", 0, n, 0, 0, None, b"{}", None, 0, 2, ()), key) for n, key in enumerate(to_0 + to_1)
    ]
    producer = RefusingProducer()
    with pytest.raises(MessageSizeTooLargeError):
        await rekeying.forward(producer, records, anyio.Lock())  # type: ignore[arg-type]
    assert producer.sent[0] == [to_0[:2]]  # its first batch only: the two behind it wait for the read again
    assert producer.sent[1] == [to_1[:2], to_1[2:]]  # another partition's batches go on
    assert rekeying.forwarded == 0  # the caller reads them all again


async def test_the_hops_batches_hold_each_record_with_its_key_timestamp_and_source_header() -> None:
    # Filled through aiokafka's own record batch builder: what a reader decodes of them is
    # what the source records held, in order, each batch counting its records.
    producer = AIOKafkaProducer(bootstrap_servers="k:9092", max_batch_size=1000)  # builds batches only
    sources = []
    for n in range(40):
        headers = [("trace", b"t%d" % n)] if n % 3 == 0 else []
        value = b'{"device": "d-%d"}' % n
        sources.append(
            (
                ConsumerRecord("readings", 3, 500 + n, 1_700_000_000_000 + n, 0, None, value, None, 0, 0, headers),
                b"d-%d" % n,
            )
        )
    batches = _filled(producer, sources, 3)
    assert len(batches) > 2 and all(b.closed() for b in batches)
    decoded = []
    for batch in batches:
        records = MemoryRecords(bytes(batch._build()))
        in_batch = [r for b in iter(records.next_batch, None) for r in b]
        assert len(in_batch) == batch.record_count()
        decoded += [(r.key, r.value, r.timestamp, list(r.headers)) for r in in_batch]
    assert decoded == [
        (key, r.value, r.timestamp, [*r.headers, ("headrace.source", b"3:%d" % r.offset)]) for r, key in sources
    ]


async def test_a_read_sent_on_waits_for_the_one_before_and_a_failed_one_goes_again_first() -> None:
    # A later read's records never land before an earlier read's that failed: the earlier
    # ones are sent again, and only then the later ones, in read order.
    sent: list[int] = []
    failing = {1}  # the first try of read 1 fails

    async def send(records: list[Any]) -> None:
        read = records[0][0]
        await anyio.sleep(0)
        if read in failing:
            failing.discard(read)
            raise MessageSizeTooLargeError()
        sent.append(read)

    sends = Sends(send)  # type: ignore[arg-type]
    sends.add([(1, b"k")])
    sends.add([(2, b"k")])
    with pytest.raises(MessageSizeTooLargeError):
        await sends.settle(keep=0)
    assert sent == [] and len(sends) == 2  # read 2 waited for read 1: neither landed
    await sends.settle(keep=0)
    assert sent == [1, 2] and len(sends) == 0 and sends.handed_on == 2


async def test_the_source_offset_is_acknowledged_no_further_than_a_record_kafka_does_not_have() -> None:
    settings = KafkaSettings("k:9092", "readings", queues=2, records="json", key_field="device", idempotent=False)
    outage = kafka_outage_log(settings)
    receiver = KafkaRecordReceiver.of(settings, QueueId(0), outage, KafkaChangelog(settings, outage))
    hop = receiver.hop
    assert hop is not None  # records without a key are re-keyed
    source = TopicPartition("readings", 0)
    acked = anyio.Event()

    async def send(records: list[Any]) -> None:
        await acked.wait()

    hop._sends = Sends(send)  # type: ignore[arg-type]
    hop._sends.add([(ConsumerRecord("readings", 0, 40, 0, 0, None, b"{}", None, 0, 2, ()), b"d-1")])
    receiver.reads.acknowledge({source: 100})  # what the read's other records would allow
    assert receiver.reads.acknowledged_offset(source) == 40
    acked.set()
    assert await hop.settled(keep=0)  # Kafka has it: the rest of the read's offsets go
    receiver.reads.acknowledge({source: 100})
    assert receiver.reads.acknowledged_offset(source) == 100


class Seeking:
    """The receiver's consumer, as far as a read that is not taken needs it."""

    def __init__(self) -> None:
        self.sought: list[tuple[TopicPartition, int]] = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.sought.append((tp, offset))


async def test_after_a_failed_send_the_next_read_waits_until_the_failed_records_are_sent_again() -> None:
    settings = KafkaSettings("k:9092", "readings", queues=2, records="json", key_field="device", idempotent=False)
    outage = kafka_outage_log(settings)
    receiver = KafkaRecordReceiver.of(settings, QueueId(0), outage, KafkaChangelog(settings, outage))
    hop = receiver.hop
    assert hop is not None  # records without a key are re-keyed
    source, hop_partition = settings.partitions_of(QueueId(0))
    receiver.reads.reader.start({source: 0, hop_partition: 0})
    consumer = Seeking()
    receiver.reads._consumer = consumer  # type: ignore[assignment]
    sent: list[list[int]] = []
    failures = [KafkaTimeoutError()]  # the first send times out (a transient failure)

    async def send(records: list[Any]) -> None:
        await anyio.sleep(0)
        if failures:
            raise failures.pop()
        sent.append([r.offset for r, _ in records])

    hop._sends = Sends(send)  # type: ignore[arg-type]

    def read(first: int) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        value = b'{"device": "d-1"}'
        return {
            source: [
                ConsumerRecord("readings", 0, n, 0, 0, None, value, None, 0, 2, ()) for n in range(first, first + 3)
            ]
        }

    assert await hop.take(read(0)) == []  # all sent on
    assert await hop.take(read(3)) == []  # taken while the first send is under way
    # The first send failed: the third read is not taken (read again later), and nothing
    # of the source is acknowledged.
    assert await hop.take(read(6)) == []
    assert consumer.sought == [(source, 6)] and sent == []
    assert (receiver.reads.acknowledged_offset(source) or 0) == 0
    assert await hop.take(read(6)) == []  # the failed reads first, in order, then this one
    await hop.settled(keep=0)
    assert sent == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert receiver.reads.acknowledged_offset(source) == 9 and receiver.forwarded == 9
