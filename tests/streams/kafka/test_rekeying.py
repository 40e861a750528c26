"""One activation per key, whatever the producer did: records without a key,
spread over every partition, are re-keyed by ``key_field`` through the repartition topic,
so each key has one activation and one window series; exactly once across the hop, even
when the worker is SIGKILLed between reading the source and committing it."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams import StreamId, StreamProvider
from streams.adapters.mapper import kafka_partition
from streams.adapters.protocols import QueueAdapterReceiver
from streams.core.batch import QueueMessage
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.helpers import python_env, start_worker
from tests.sensor_workload import closed_window_counts, write_with_librdkafka
from tests.streams.kafka.test_foreign_records import make_topic
from tests.streams.kafka.test_kafka_adapter import Q0, kafka, publish, receiving, streams_on, values

QUEUES = 4
T0 = 1_700_000_000_000
WORKER = Path(__file__).with_name("rekey_worker.py")


def reading(n: int, devices: int = 6) -> dict[str, object]:
    return {"sensor": f"d-{n % devices}", "device": f"d-{n % devices}", "n": n, "ts": T0 + n * 100}


async def write_keyless(bootstrap: str, topic: str, values: list[dict[str, object]], seed: int = 7) -> None:
    """No key, each record on a random partition: a device's records are everywhere."""
    chance = random.Random(seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [await producer.send(topic, json.dumps(v).encode(), partition=chance.randrange(QUEUES)) for v in values]
        for future in sent:
            await future
    finally:
        await producer.stop()


async def topic_records(bootstrap: str, topic: str) -> list:
    """Every record of ``topic``, partition by partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(QUEUES)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out = []
        with anyio.fail_after(30):
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    out.extend(records)
        return out
    finally:
        await consumer.stop()


def rekeying(bootstrap: str, topic: str) -> StreamProvider:
    """A provider reading the JSON records of ``topic``, keyed by their ``device`` field."""
    return StreamProvider.kafka(
        bootstrap,
        topic,
        queues=QUEUES,
        records="json",
        namespace="sensors",
        key_field="device",
        kafka={"idempotent": False, "group_membership": False},
    )


def windowed(bootstrap: str, topic: str, activations: Counter, counts: Counter) -> StreamProvider:
    provider = rekeying(bootstrap, topic)

    @provider.implicit("sensors")
    class PerDevice:
        # A key's records come from every source partition, each read at its own pace: the
        # tolerance covers the whole 300 s (the producer gave them no order to keep).
        event_time = EventTime(OrderingPolicy(timestamp_by="ts", unit="ms", out_of_order=400), Tumbling(60), Count())

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key
            activations[self.key] += 1

        def on_window(self, result) -> None:
            counts[(self.key, result.start)] += result.value

    return provider


async def test_keyless_records_spread_over_partitions_give_one_activation_and_exact_windows_per_key(
    kafka_broker, kafka_topic
):
    values = [reading(n) for n in range(3_000)]  # 300 s of six devices
    await make_topic(kafka_broker, kafka_topic)
    await write_keyless(kafka_broker, kafka_topic, values)
    activations: Counter[str] = Counter()
    counts: Counter[tuple[str, float]] = Counter()
    provider = windowed(kafka_broker, kafka_topic, activations, counts)
    async with provider:
        await drained(provider, 60)
        # then one reading per device at 1000 s: every window of the 300 s closes
        finals = [{**reading(3_000 + d), "ts": T0 + 1_000_000} for d in range(6)]
        await write_keyless(kafka_broker, kafka_topic, finals)
        await drained(provider, 60)
        receivers: list[QueueAdapterReceiver] = [agent.receiver for agent in provider.agents]
        forwarded = sum(r.hop.rekeying.forwarded for r in receivers)  # type: ignore[attr-defined]
        letters = await provider.dead_letters.count()
    expected = closed_window_counts(values + finals, 60, 400)
    assert activations == Counter({f"d-{d}": 1 for d in range(6)})  # one each, on its key's queue
    assert counts == expected and len(expected) == 6 * 6 and sum(counts.values()) == 3_000
    assert letters == 0
    assert forwarded == 3_006
    hop = await topic_records(kafka_broker, f"headrace.repartition.{kafka_topic}")
    assert len(hop) == 3_006
    assert all(r.partition == kafka_partition(r.key, QUEUES) for r in hop)  # each key in its queue's partition
    # Sent a record batch per partition at a time (several per read: 3,006 records do not fit
    # one), each source partition's records reach each hop partition in source offset order.
    sources: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
    for r in hop:
        source_partition, source_offset = map(int, dict(r.headers)["headrace.source"].split(b":"))
        sources[(r.partition, source_partition)].append(source_offset)
    hop_partitions = {kafka_partition(f"d-{d}".encode(), QUEUES) for d in range(6)}
    assert set(sources) == {(p, source) for p in hop_partitions for source in range(QUEUES)}
    assert all(offsets == sorted(offsets) for offsets in sources.values())


async def test_keyless_lz4_records_librdkafka_wrote_are_re_keyed_once_each(kafka_broker, kafka_topic):
    """The same through the hop, for records headrace did not write: confluent-kafka
    (librdkafka) without keys, on random partitions, in lz4 record batches."""
    values = [reading(n) for n in range(1_200)]
    await make_topic(kafka_broker, kafka_topic)
    await anyio.to_thread.run_sync(
        lambda: write_with_librdkafka(kafka_broker, kafka_topic, [(None, v) for v in values], "lz4")
    )
    activations: Counter[str] = Counter()
    counts: Counter[tuple[str, float]] = Counter()
    async with windowed(kafka_broker, kafka_topic, activations, counts) as provider:
        await drained(provider, 60)
        finals = [{**reading(1_200 + d), "ts": T0 + 1_000_000} for d in range(6)]  # then every window closes
        await anyio.to_thread.run_sync(
            lambda: write_with_librdkafka(kafka_broker, kafka_topic, [(None, v) for v in finals])
        )
        await drained(provider, 60)
        forwarded = sum(agent.receiver.forwarded for agent in provider.agents)  # type: ignore[attr-defined]
        letters = await provider.dead_letters.count()
    assert activations == Counter({f"d-{d}": 1 for d in range(6)})
    assert counts == closed_window_counts(values + finals, 60, 400) and sum(counts.values()) == 1_200
    assert (forwarded, letters) == (1_206, 0)


async def test_a_key_already_the_stream_id_skips_the_hop_and_a_copy_in_the_hop_is_taken_once(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic)
    keyed = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await keyed.start()
    try:
        for n in range(10):  # keyed: read where they are
            await keyed.send_and_wait(kafka_topic, json.dumps(reading(n)).encode(), key=b"k-1")
    finally:
        await keyed.stop()
    await write_keyless(kafka_broker, kafka_topic, [reading(n) for n in range(10, 40)])
    got: dict[str, list[int]] = defaultdict(list)

    def collecting() -> StreamProvider:
        provider = rekeying(kafka_broker, kafka_topic)

        @provider.implicit("sensors")
        class Collect:
            def __init__(self, stream_id: StreamId) -> None:
                self.key = stream_id.key

            def on_next(self, batch) -> None:
                got[self.key].extend(e.value["n"] for e in batch)

        return provider

    async with collecting() as provider:
        await drained(provider, 30)
    assert got["k-1"] == list(range(10))
    assert sorted(n for key, ns in got.items() if key != "k-1" for n in ns) == list(range(10, 40))
    hop_topic = f"headrace.repartition.{kafka_topic}"
    hop = await topic_records(kafka_broker, hop_topic)
    assert len(hop) == 30  # the keyed records did not travel
    # A crash after sending on and before the commit sends a record again: a copy, with the
    # same source header, after the commit. The next reader (its memory restored from the
    # changelog) skips it; a new record is taken.
    copy = hop[0]
    again = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await again.start()
    try:
        await again.send_and_wait(
            hop_topic, copy.value, key=copy.key, partition=copy.partition, headers=list(copy.headers)
        )
    finally:
        await again.stop()
    await write_keyless(kafka_broker, kafka_topic, [reading(40)])
    got.clear()
    async with collecting() as provider:
        await drained(provider, 30)
        skipped = sum(agent.receiver.hop.rekeying.seen.duplicates for agent in provider.agents)
    assert dict(got) == {"d-4": [40]}  # neither the copy nor anything taken before again
    # At least the copy. (Tansu answers the end of a partition written in batches short, so
    # a restart reads the hop's partitions from their start: the memory skips those too.)
    assert skipped >= 1


async def test_drain_waits_for_what_a_queue_only_sent_on(kafka_broker, kafka_topic):
    """Every record in one partition and keyless, of keys other queues own: each read of
    queue 3 sends all it fetched on and returns nothing; the worker's drain returns once the
    other queues have delivered them all (the agent's side: test_forwarding_receiver.py)."""
    total = 2_000
    await make_topic(kafka_broker, kafka_topic)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker, linger_ms=5)
    await producer.start()
    try:
        for n in range(total):  # devices of queues 0 and 2: queue 3 keeps none
            device = f"d-{(0, 3, 5, 7, 8, 9)[n % 6]}"
            value = {**reading(n), "sensor": device, "device": device}
            await producer.send(kafka_topic, json.dumps(value).encode(), partition=3)
        await producer.flush()
    finally:
        await producer.stop()
    got: list[int] = []
    provider = rekeying(kafka_broker, kafka_topic)

    @provider.implicit("sensors")
    class Collect:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:
            got.extend(e.value["n"] for e in batch)

    async with provider:
        await drained(provider, 60)
        forwarded = [agent.receiver.forwarded for agent in provider.agents]  # type: ignore[attr-defined]
        assert sorted(got) == list(range(total))  # all delivered when drain returned
    assert sorted(forwarded) == [0, 0, 0, total]  # all of them by queue 3, through the hop


class HeldFetches:
    """Holds a consumer's next fetch answers once the broker has given them: the first until
    :attr:`release` is set (a fetch asked before a read began, taken in after it began: a
    broker's long poll, a loaded worker's event loop), the second ``slow`` seconds more."""

    def __init__(self, consumer: AIOKafkaConsumer, slow: float = 0.3) -> None:
        self._client = consumer._client
        self._send = self._client.send
        self.slow = slow
        self.held = anyio.Event()  # the broker has answered the first, and the answer waits
        self.release = anyio.Event()
        self._answers = 0
        self._client.send = self._sending  # the fetcher's requests go through the client's send

    async def _sending(self, node_id, request, **kwargs):
        answer = await self._send(node_id, request, **kwargs)
        if request.API_KEY == 1:  # a Fetch
            self._answers += 1
            if self._answers == 1:
                self.held.set()
                await self.release.wait()
            elif self._answers == 2:
                await anyio.sleep(self.slow)
        return answer

    def __enter__(self) -> HeldFetches:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self._client.send = self._send


async def test_a_read_is_caught_up_only_by_a_fetch_asked_after_it_began(kafka_broker, kafka_topic):
    """Records written and acknowledged before a read began (another queue's, sent on
    through the hop) are in that read, however late the answer to a fetch asked before it
    comes in: that answer's high-water mark is of before, and says nothing of them."""
    async with kafka(kafka_broker, kafka_topic) as factory:
        (sid,) = streams_on(factory, Q0, 1)
        async with receiving(factory, Q0) as receiver:
            with anyio.fail_after(10):
                assert await receiver.get_queue_messages(10) == [] and receiver.caught_up  # empty
            read: list[QueueMessage] = []

            async def read_once() -> None:
                read.extend(await receiver.get_queue_messages(10))

            with HeldFetches(receiver.reads.require_consumer()) as fetches, anyio.fail_after(10):
                await fetches.held.wait()  # answered empty: nothing written yet
                await publish(factory, sid, [1, 2])  # written, acknowledged
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_once)
                    while receiver.caught_up:  # until the read begins (it says "not yet")
                        await anyio.sleep(0.001)
                    await anyio.sleep(0.01)  # answers stamped from here on came after it began
                    fetches.release.set()  # the answer of before comes in; the next one slowly
            assert values(read) == [1, 2]


@pytest.mark.parametrize("commit_interval", [60.0, 0.2])
async def test_sigkill_across_the_hop_loses_and_doubles_nothing(kafka_broker, kafka_topic, tmp_path, commit_interval):
    total = 6_000
    await make_topic(kafka_broker, kafka_topic)
    await write_keyless(kafka_broker, kafka_topic, [reading(n, devices=12) for n in range(total)])
    out = tmp_path / "events.txt"
    hop_topic = f"headrace.repartition.{kafka_topic}"
    first = start_worker(WORKER, kafka_broker, kafka_topic, out, commit_interval, "run")
    try:
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker)
        await consumer.start()
        try:
            tps = [TopicPartition(hop_topic, p) for p in range(QUEUES)]
            with anyio.fail_after(60):  # killed mid-way: records sent on, the source not all read
                while sum((await consumer.end_offsets(tps)).values()) < total // 3:
                    await anyio.sleep(0.01)
        finally:
            await consumer.stop()
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
    second = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, str(WORKER), kafka_broker, kafka_topic, str(out), "1", "drain"],
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    )
    assert second.stdout.strip() == "drained", second.stderr[-3000:]
    lines = [line.split() for line in out.read_text().splitlines()]
    events = {(device, int(n), int(offset)) for device, n, offset in lines}
    by_n: dict[int, set[int]] = defaultdict(set)
    for _, n, offset in events:
        by_n[n].add(offset)
    assert sorted(by_n) == list(range(total))  # nothing lost
    assert all(len(offsets) == 1 for offsets in by_n.values())  # each from one repartition record
    hop = await topic_records(kafka_broker, hop_topic)
    sources = Counter(dict(r.headers)["headrace.source"] for r in hop)
    assert len(sources) == total  # every source record went through the hop
    if commit_interval == 60.0:  # nothing was committed before the kill: all of it was sent again
        assert len(hop) > total


async def test_a_key_function_re_keys_too_and_a_record_it_gives_no_key_is_lettered_at_its_offset(
    kafka_broker, kafka_topic
):
    await make_topic(kafka_broker, kafka_topic)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await producer.start()
    try:  # partition 1, offsets 0..8: the site is in a nested field; offset 4 has none
        for n in range(9):
            value = {"n": n, "meta": {"site": f"s-{n % 2}"}} if n != 4 else {"n": n}
            await producer.send_and_wait(kafka_topic, json.dumps(value).encode(), partition=1)
    finally:
        await producer.stop()
    provider = StreamProvider.kafka(
        kafka_broker,
        kafka_topic,
        queues=QUEUES,
        records="json",
        namespace="sites",
        key_field=lambda value: value["meta"]["site"],
        kafka={"idempotent": False, "group_membership": False},
    )
    got: dict[str, list[int]] = defaultdict(list)

    @provider.implicit("sites")
    class Collect:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch) -> None:
            got[self.key].extend(e.value["n"] for e in batch)

    async with provider:
        await drained(provider, 30)
        [letter] = await provider.dead_letters.list()
    assert dict(got) == {"s-0": [0, 2, 6, 8], "s-1": [1, 3, 5, 7]}
    assert (letter.reason, letter.queue, letter.sequence_number) == ("undecodable", 1, 4)
    assert "has no key and key function" in letter.detail
