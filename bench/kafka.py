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
read ratios are against raw aiokafka with one consumer for all partitions. Each run is timed
by bench/timing.py's ``Clock``, stamped where the records are taken (the runtime's
consumers' ``on_next``, each raw loop after its fetch): from the first to the last, wall
clock and CPU time, with the share of the events its span covers (no rate under 90 %). The
reads run ``--rounds`` times, alternating, and each row shows its best round (the machine is
shared).

    python bench/kafka.py [--records 30000] [--events 100] [--queues 4] [--rounds 3]
    python bench/kafka.py sensors [--records 200000] [--queues 8] [--rounds 3]

``sensors`` runs the sensor workload instead: a topic of JSON events written by plain
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

from bench import timing  # noqa: E402
from bench.timing import HEADER, Clock, Report, best, row
from streams import StreamProvider
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from streams.backends.kafka.adapter import KafkaAdapterFactory, KafkaQueueReceiver
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import BatchContainer, BatchKind
from streams.core.ids import QueueId, StreamId
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
    """Measured runs (bench/timing.py), best of the rounds for each row, printed side by side."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.runs: dict[str, list[Report]] = {}

    async def measure(self, name: str, expected: int, work: Callable[[Clock], Awaitable[None]]) -> None:
        """Run ``work``, which stamps a clock of ``expected`` records' events as it takes them."""
        clock = Clock(expected * self.events)
        await work(clock)
        self.runs.setdefault(name, []).append(clock.report())

    def print(self, baseline: str) -> None:
        table = {name: best(reports) for name, reports in self.runs.items()}
        print(f"{'':58} {'records/s':>10} " + HEADER[59:].replace("vs base", " vs raw"))
        for name, report in table.items():
            base = table[baseline] if name.startswith("consume") else None
            records = f"{report.rate / self.events:10,.0f}" if report.rate else f"{'':10}"
            print(f"{name:58} {records}{row('', report, base)[58:]}")


async def raw_produce(
    bootstrap: str, topic: str, items: list[tuple[QueueId, StreamId, bytes]], clock: Clock, events: int
) -> None:
    """From the first send to the last acknowledgement (a produce's results)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    try:
        clock.begin()
        futures = [
            await producer.send(topic, payload, key=str(sid).encode(), partition=queue.number)
            for queue, sid, payload in items
        ]
        await asyncio.gather(*futures)
        clock.result(len(items) * events)
    finally:
        await producer.stop()


async def raw_consumer(bootstrap: str, topic: str, partitions: list[int]) -> AIOKafkaConsumer:
    """A started raw consumer of ``partitions``, at their beginning."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return consumer


async def raw_read(consumer: AIOKafkaConsumer, expected: int, clock: Clock, events: int) -> None:
    read = 0
    while read < expected:
        for records in (await consumer.getmany(timeout_ms=500, max_records=READ_BATCH)).values():
            clock.taken(len(records) * events)
            read += len(records)
            clock.result()
    await consumer.stop()


async def gather(reads: Iterable[Awaitable[None]]) -> None:
    await asyncio.gather(*reads)


async def read_all(receiver: KafkaQueueReceiver, expected: int, decode: bool, clock: Clock, events: int) -> None:
    """Read ``expected`` records through the adapter's receiver (decoding them to events,
    as the pulling agent does, when ``decode``)."""
    read = 0
    while read < expected:
        messages = await receiver.get_queue_messages(READ_BATCH)
        clock.taken(len(messages) * events)
        if decode:
            for m in messages:
                BatchContainer.decode(m.payload).events(m.sequence_number)
        read += len(messages)
        clock.result()
    await receiver.shutdown()


async def runtime_read(provider: StreamProvider, clock: Clock) -> None:
    """Start a worker on pre-filled queues; its consumers stamp ``clock`` as they take the
    events (from the first to the last, whenever this task gets to look)."""

    @provider.implicit("bench")
    class Count:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            clock.taken(len(batch))
            clock.result()

    async with provider:
        while not clock.complete:  # only when to stop
            await anyio.sleep(0.005)


async def run(records: int, events: int, queues: int, rounds: int) -> None:
    with TansuBroker() as broker:
        bootstrap, topic = broker.bootstrap, "bench"
        factory = KafkaAdapterFactory(KafkaSettings(bootstrap, topic, queues=queues, idempotent=False))
        twin = KafkaAdapterFactory(KafkaSettings(bootstrap, "bench-raw", queues=queues, idempotent=False))
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
        table = Table(events)

        async def adapter_produce(clock: Clock) -> None:
            clock.begin()
            for start in range(0, len(items), 1000):
                await adapter.queue_message_batches(items[start : start + 1000])
            clock.result(len(items) * events)

        # Writes, once: headrace into the topic the reads use, raw aiokafka into a twin.
        await table.measure("produce  headrace queue_message_batches", records, adapter_produce)
        await table.measure(
            "produce  raw aiokafka send", records, lambda c: raw_produce(bootstrap, "bench-raw", items, c, events)
        )

        # The embedded store, filled with the same records, for the runtime over it.
        pristine = Path(tempfile.mkdtemp(prefix="headrace-bench-")) / "store"
        async with EmbeddedAdapterFactory(pristine, queues=queues) as embedded:
            filler = await embedded.create_adapter()
            for start in range(0, len(items), 1000):
                await filler.queue_message_batches(items[start : start + 1000])

        # Reads: clients are connected and positioned before the clock starts.
        partitions = list(range(queues))
        for round_no in range(rounds):
            kafka = StreamProvider.kafka(
                bootstrap, topic, queues=queues, group_id=f"bench-{round_no}", kafka={"idempotent": False}
            )
            await table.measure(
                "consume  headrace runtime on Kafka (agents, caches, consumers)",
                records,
                lambda c: runtime_read(kafka, c),
            )
            store = pristine.with_name(f"round-{round_no}")  # unread: no checkpoint yet
            shutil.copytree(pristine, store)
            embedded_worker = StreamProvider.embedded(store, queues)
            await table.measure(
                "consume  headrace runtime on the embedded store", records, lambda c: runtime_read(embedded_worker, c)
            )
            one = await raw_consumer(bootstrap, topic, partitions)
            await table.measure(RAW, records, lambda c: raw_read(one, records, c, events))
            several = {p: await raw_consumer(bootstrap, topic, [p]) for p in partitions}
            await table.measure(
                "consume  raw aiokafka, 1 consumer / partition",
                records,
                lambda c: gather(raw_read(s, per_queue[QueueId(p)], c, events) for p, s in several.items()),
            )
            for decode in (False, True):
                receivers = [adapter.create_receiver(q) for q in mapper.get_all_queues()]
                for receiver in receivers:
                    await receiver.initialize()  # nothing acknowledged: each pass reads from 0
                await table.measure(
                    "consume  headrace receivers, 1 / partition" + (" + decode" if decode else ""),
                    records,
                    lambda c: gather(read_all(r, per_queue[r.queue], decode, c, events) for r in receivers),
                )
        await factory.close()
        await twin.close()
    table.print(baseline=RAW)


def main() -> None:
    if sys.argv[1:2] == ["sensors"]:  # the sensor workload: a JSON topic others write
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
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
