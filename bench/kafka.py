"""headrace over Kafka next to raw aiokafka, on the test broker (Tansu), in one run.

One run starts a Tansu broker on a loopback port, then measures:

- runtime: the whole path a worker runs (pulling agents, queue caches, cursors, a counting
  consumer per stream) reading a pre-filled topic, against a raw ``AIOKafkaConsumer`` reading
  the same topic; and the same runtime over the embedded store filled with the same records;

- produce: the adapter's ``queue_message_batches`` (stream keys, explicit partitions,
  acks=all) into one topic, against raw ``AIOKafkaProducer.send`` of the same records into a
  twin topic;
- consume: raw ``AIOKafkaConsumer`` reading every partition, once with one consumer for all
  partitions and once with one consumer per partition, against one ``KafkaQueueReceiver``
  per partition (what the pulling agents use), also with decoding to events.

Rates are records/s and events/s (each record is a batch container of ``--events`` events);
read ratios are against raw aiokafka with one consumer for all partitions. The reads run
``--rounds`` times, alternating, and each row shows its best round (the machine is shared).

    python bench/kafka.py [--records 30000] [--events 100] [--queues 4] [--rounds 3]
    python bench/kafka.py sensors [--records 200000] [--queues 8] [--rounds 3]

``sensors`` runs issue 12's workload instead: a topic of JSON events written by plain
aiokafka, read by a windowed worker, against the raw fetch + json loop (bench/kafka_sensors.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import shutil
import tempfile

import anyio

from streams import StreamProvider
from streams.core.batch import BatchContainer, BatchKind
from streams.core.ids import QueueId, StreamId
from streams.embedded.adapter import EmbeddedAdapterFactory
from streams.kafka.adapter import KafkaAdapterFactory, KafkaQueueReceiver
from tests.kafka_broker import TansuBroker

READ_BATCH = 1000
RAW = "consume  raw aiokafka, 1 consumer / all partitions"


def containers(
    records: int, events: int, mapper_queue: Callable[[StreamId], QueueId]
) -> list[tuple[QueueId, StreamId, bytes]]:
    """``records`` encoded batch containers of ``events`` small dict events, on 200 streams."""
    streams = [StreamId("bench", str(n)) for n in range(200)]
    out = []
    for n in range(records):
        sid = streams[n % len(streams)]
        values = [{"n": n * events + i, "v": 1.5} for i in range(events)]
        out.append(
            (
                mapper_queue(sid),
                sid,
                BatchContainer(sid, BatchKind.DATA, time.time(), values).encode(),
            )
        )
    return out


class Table:
    """Measured rates, best of the rounds for each row, printed side by side."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[int, float]] = {}

    async def measure(self, name: str, work: Awaitable[int]) -> None:
        began = time.perf_counter()
        count = await work
        self.record(name, count, time.perf_counter() - began)

    def record(self, name: str, count: int, seconds: float) -> None:
        if name not in self.best or seconds < self.best[name][1]:
            self.best[name] = (count, seconds)

    def print(self, events: int, baseline: str) -> None:
        count, seconds = self.best[baseline]
        base = count / seconds
        print(f"{'':52} {'records/s':>11} {'events/s':>11} {'vs raw':>7}")
        for name, (count, seconds) in self.best.items():
            rate = count / seconds
            ratio = f"{rate / base:6.2f}x" if name.startswith("consume") else ""
            print(f"{name:52} {rate:11,.0f} {rate * events:11,.0f} {ratio:>7}")


async def raw_produce(bootstrap: str, topic: str, items: list[tuple[QueueId, StreamId, bytes]]) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, payload, key=str(sid).encode(), partition=queue.number)
            for queue, sid, payload in items
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(items)


async def raw_consumer(bootstrap: str, topic: str, partitions: list[int]) -> AIOKafkaConsumer:
    """A started raw consumer of ``partitions``, at their beginning."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return consumer


async def raw_read(consumer: AIOKafkaConsumer, expected: int) -> int:
    read = 0
    while read < expected:
        for records in (await consumer.getmany(timeout_ms=500, max_records=READ_BATCH)).values():
            read += len(records)
    await consumer.stop()
    return read


async def gather_sum(counts: Iterable[Awaitable[int]]) -> int:
    return sum(await asyncio.gather(*counts))


async def read_all(receiver: KafkaQueueReceiver, expected: int, decode: bool) -> int:
    """Read ``expected`` records through the adapter's receiver (decoding them to events,
    as the pulling agent does, when ``decode``)."""
    read = 0
    while read < expected:
        messages = await receiver.get_queue_messages(READ_BATCH)
        if decode:
            for m in messages:
                BatchContainer.decode(m.payload).events(m.sequence_number)
        read += len(messages)
    await receiver.shutdown()
    return read


async def runtime_read(provider: StreamProvider, records: int, events: int) -> tuple[int, float]:
    """Start a worker on pre-filled queues and count the events its consumers receive.

    Returns the records read and the seconds from the moment the worker is up (its
    receivers connected and positioned, as the raw consumers are before their clock starts)."""
    expected_events = records * events
    delivered = 0

    @provider.implicit("bench")
    class Count:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            nonlocal delivered
            delivered += len(batch)

    async with provider:
        began = time.perf_counter()
        while delivered < expected_events:
            await anyio.sleep(0.005)
        seconds = time.perf_counter() - began
    return delivered // events, seconds


async def run(records: int, events: int, queues: int, rounds: int) -> None:
    with TansuBroker() as broker:
        bootstrap, topic = broker.bootstrap, "bench"
        factory = KafkaAdapterFactory(bootstrap, topic, queues=queues, idempotent=False)
        twin = KafkaAdapterFactory(bootstrap, "bench-raw", queues=queues, idempotent=False)
        mapper = factory.get_queue_mapper()
        adapter = await factory.create_adapter()
        await twin.create_adapter()
        items = containers(records, events, mapper.get_queue_for_stream)
        per_queue = {q: sum(1 for item in items if item[0] == q) for q in mapper.get_all_queues()}
        size = sum(len(item[2]) for item in items) / len(items)
        print(
            f"Tansu broker {bootstrap}; {records} records x {events} events ({size:.0f} B a "
            f"record) on {queues} partitions; best of {rounds} rounds\n"
        )
        table = Table()

        async def adapter_produce() -> int:
            for start in range(0, len(items), 1000):
                await adapter.queue_message_batches(items[start : start + 1000])
            return len(items)

        # Writes, once: headrace into the topic the reads use, raw aiokafka into a twin.
        await table.measure("produce  headrace queue_message_batches", adapter_produce())
        await table.measure("produce  raw aiokafka send", raw_produce(bootstrap, "bench-raw", items))

        # The embedded store, filled with the same records, for the runtime over it.
        pristine = Path(tempfile.mkdtemp(prefix="headrace-bench-")) / "store"
        async with EmbeddedAdapterFactory(pristine, queues=queues) as embedded:
            filler = await embedded.create_adapter()
            for start in range(0, len(items), 1000):
                await filler.queue_message_batches(items[start : start + 1000])

        # Reads: clients are connected and positioned before the clock starts.
        partitions = list(range(queues))
        for round_no in range(rounds):
            table.record(
                "consume  headrace runtime on Kafka (agents, caches, consumers)",
                *await runtime_read(
                    StreamProvider.kafka(
                        bootstrap, topic, queues, group_id=f"bench-{round_no}", kafka={"idempotent": False}
                    ),
                    records,
                    events,
                ),
            )
            store = pristine.with_name(f"round-{round_no}")  # unread: no checkpoint yet
            shutil.copytree(pristine, store)
            table.record(
                "consume  headrace runtime on the embedded store",
                *await runtime_read(StreamProvider.embedded(store, queues), records, events),
            )
            one = await raw_consumer(bootstrap, topic, partitions)
            await table.measure(RAW, raw_read(one, records))
            several = {p: await raw_consumer(bootstrap, topic, [p]) for p in partitions}
            await table.measure(
                "consume  raw aiokafka, 1 consumer / partition",
                gather_sum(raw_read(c, per_queue[QueueId(p)]) for p, c in several.items()),
            )
            for decode in (False, True):
                receivers = [adapter.create_receiver(q) for q in mapper.get_all_queues()]
                for receiver in receivers:
                    await receiver.initialize()  # nothing acknowledged: each pass reads from 0
                await table.measure(
                    "consume  headrace receivers, 1 / partition" + (" + decode" if decode else ""),
                    gather_sum(read_all(r, per_queue[r.queue], decode) for r in receivers),
                )
        await factory.close()
        await twin.close()
    table.print(events, baseline=RAW)


def main() -> None:
    if sys.argv[1:2] == ["sensors"]:  # issue 12's workload: a JSON topic others write
        from bench import kafka_sensors

        kafka_sensors.main(sys.argv[2:], prog="kafka.py sensors")
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--events", type=int, default=100, help="events in each batch container")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="read rounds; the best is shown")
    args = parser.parse_args()
    asyncio.run(run(args.records, args.events, args.queues, args.rounds))


if __name__ == "__main__":
    main()
