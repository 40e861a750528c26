"""The Kafka changelog of event-time state against holding the offset at open
windows, side by side in one run on the test broker (Tansu).

A topic of ``--records`` records on ``--streams`` streams, every event in one one-hour
window per stream (open through the whole run: the case where holding pins the committed
offset). Shapes: headrace's records of one event (the per-call shape) and of ``--events``;
a topic of one JSON event per record written by plain aiokafka (``records="json"``, where a
state's position is its record's offset). Each shape's topic is filled once; each mode then
reads it under its own group id: a worker reads the topic (events/s while reading), then
leaves (timed by bench/timing.py's ``Clock``, which the consumer's timestamp function
stamps); the table shows how far behind the end its committed offset stayed, what the
changelog holds, and how many events a second worker read again at its start.

- ``changelog``: the default: states saved before each offset commit (streams/backends/kafka/changelog.py);
- ``holding``: the same worker with plain receivers: open windows hold the offset.

    python bench/kafka_state.py [--records 20000] [--events 50] [--streams 200] [--queues 2]

The topic is filled one record per send: after a send of several records, Tansu reports
the end offset of a partition as the last batch's first offset + 1, and a worker restarting
with its committed offset beyond that would take it for a recreated topic.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from bench import timing  # noqa: E402
from bench.timing import Clock, Report, cpu_figure, figure
from streams import StreamProvider
from streams.backends.kafka.adapter import KafkaAdapterFactory, KafkaQueueAdapter, KafkaQueueReceiver
from streams.backends.kafka.backend import KafkaBackend
from streams.backends.kafka.changelog import changelog_topic
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import BatchKind
from streams.core.codec import encode_batch
from streams.core.ids import QueueId, StreamId
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.kafka_broker import TansuBroker


class HoldingAdapter(KafkaQueueAdapter):
    """The adapter as it was before the changelog: receivers that save no state."""

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> KafkaQueueReceiver:
        return KafkaQueueReceiver(self.settings, queue, self.outage, max_record_size)


def factory(bootstrap: str, topic: str, queues: int, mode: str, json_records: bool = False) -> KafkaAdapterFactory:
    """The adapter of ``mode`` (``holding`` or ``changelog``), reading under a group of its own."""
    foreign: dict[str, Any] = {"records": "json", "namespace": "bench"} if json_records else {}
    made = KafkaAdapterFactory(
        KafkaSettings(
            bootstrap, topic, queues, group_id=f"bench-{mode}", idempotent=False, group_membership=False, **foreign
        )
    )
    if mode == "holding":
        made._adapter = HoldingAdapter(made.settings)
    return made


async def fill(
    bootstrap: str, topic: str, queues: int, records: int, events: int, streams: int, json_records: bool
) -> list[int]:
    """``records`` containers of ``events`` events each (or JSON records of one event each,
    written by plain aiokafka); event times 0, 1, 2, ... per stream (all in the window
    [0, 3600) while fewer than 3,600 events a stream). Returns the records of each queue."""
    made = factory(bootstrap, topic, queues, "changelog", json_records)
    adapter = await made.create_adapter()
    if json_records:
        await made.close()
        return await fill_json(bootstrap, topic, queues, records, streams)
    mapper = made.get_queue_mapper()
    sids = [StreamId("bench", str(n)) for n in range(streams)]
    sent = [0] * streams
    items = []
    for n in range(records):
        s = n % streams
        values = [{"t": float((sent[s] + i) % 3600)} for i in range(events)]
        sent[s] += events
        payload = encode_batch(sids[s], BatchKind.DATA, time.time(), values, None)
        items.append((mapper.get_queue_for_stream(sids[s]), sids[s], payload))
    for queue, sid, payload in items:  # one send each: Tansu's end offset is wrong after a batch
        await adapter.queue_message_batch(queue, sid, payload)
    await made.close()
    return [sum(1 for q, _, _ in items if q.number == n) for n in range(queues)]


async def fill_json(bootstrap: str, topic: str, queues: int, records: int, streams: int) -> list[int]:
    """One JSON event ``{"t": ...}`` a record, keyed by the stream, as any program writes it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    filled = [0] * queues
    try:
        for n in range(records):
            s = n % streams
            value = json.dumps({"t": float((n // streams) % 3600)}).encode()
            sent = await producer.send_and_wait(topic, value, key=str(s).encode())  # one a send: Tansu
            filled[sent.partition] += 1
    finally:
        await producer.stop()
    return filled


def worker(
    bootstrap: str, topic: str, queues: int, mode: str, json_records: bool, clock: Clock | None = None
) -> StreamProvider:
    """A worker counting each stream's events in one-hour windows; ``clock`` is stamped by the
    consumer's own timestamp function, once an event (its windows stay open: no results)."""
    provider = StreamProvider(KafkaBackend(factory(bootstrap, topic, queues, mode, json_records)))
    stamps = clock or Clock(0, freeze=False)

    def timestamp(event: Any) -> Any:
        stamps.taken(1)
        stamps.result()  # stamps only from the last expected event on
        return event.value["t"]

    @provider.implicit("bench")
    class Hourly:
        event_time = EventTime(OrderingPolicy(timestamp_by=timestamp if clock else "t"), Tumbling(3600), Count())

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, w: Any) -> None:
            pass

    return provider


async def read_through(provider: StreamProvider, clock: Clock) -> Report:
    """The worker's read as its consumer stamped it: from the first event's timestamp taken
    to the last one's."""
    async with provider:
        while not clock.complete:  # only when to stop
            await anyio.sleep(0.01)
        await provider.drain()
        report = clock.report()
        if clock.done != clock.expected:  # the timestamp function ran again for some events
            raise RuntimeError(f"{clock.done} timestamps taken for {clock.expected} events: the span is void")
        await anyio.sleep(1.2)  # a commit interval: what a running worker would have committed
    return report


async def offsets(bootstrap: str, topic: str, filled: list[int], mode: str) -> tuple[int, int]:
    """(records after the committed offsets, records in the changelog)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=f"bench-{mode}", enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        behind = 0
        for q, count in enumerate(filled):
            behind += count - ((await consumer.committed(TopicPartition(topic, q))) or 0)
        name = changelog_topic(factory(bootstrap, topic, len(filled), mode).settings)
        logs = [TopicPartition(name, q) for q in range(len(filled))]
        consumer.assign(logs)
        written = 0
        while batch := await consumer.getmany(*logs, timeout_ms=500):
            written += sum(len(records) for records in batch.values())
    finally:
        await consumer.stop()
    return behind, written


async def restart(bootstrap: str, topic: str, queues: int, mode: str, json_records: bool) -> tuple[int, float]:
    """Events a second worker reads until it is caught up, and how long that takes."""
    provider = worker(bootstrap, topic, queues, mode, json_records)
    async with provider:
        began = time.perf_counter()
        await provider.drain()
        seconds = time.perf_counter() - began
        read = sum(agent.read_events for agent in provider.agents)
    return read, seconds


async def run(bootstrap: str, records: int, events: int, streams: int, queues: int) -> None:
    print(
        f"headrace Kafka changelog benchmark: {streams} streams in one-hour windows (open throughout), "
        f"{queues} queues, Tansu on loopback"
    )
    print(
        f"{'':48} {'events/s':>10} {'per CPU s':>10} {'offset behind':>14} {'changelog':>10} {'restart events':>14} {'restart s':>10}"
        f" {'timed':>6}"
    )
    shapes = (("headrace", 1, records), ("headrace", events, records // 4), ("json", 1, records))
    for kind, per_record, count in shapes:
        json_records = kind == "json"
        topic = f"bench-state-{kind}-{per_record}-{time.time_ns()}"
        filled = await fill(bootstrap, topic, queues, count, per_record, streams, json_records)
        for mode in ("holding", "changelog"):
            clock = Clock(count * per_record)
            report = await read_through(worker(bootstrap, topic, queues, mode, json_records, clock), clock)
            behind, written = await offsets(bootstrap, topic, filled, mode)
            reread, restart_seconds = await restart(bootstrap, topic, queues, mode, json_records)
            name = f"{count:,} {kind} records x {per_record} event(s), {mode}"
            if report.rate is not None:
                timing.note(f"{name}, events/s", report.rate)
            timing.note(f"{name}, events read again after a restart", reread)
            timing.note(f"{name}, restart s", restart_seconds)
            print(
                f"{name:48} {figure(report):>10} {cpu_figure(report):>10} {behind:>14,} {written:>10,} {reread:>14,} {restart_seconds:10.2f} {report.coverage:6.0%}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--queues", type=int, default=2)
    args = parser.parse_args()
    with TansuBroker() as broker:
        anyio.run(run, broker.bootstrap, args.records, args.events, args.streams, args.queues)


if __name__ == "__main__":
    main()
