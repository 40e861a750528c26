"""Topics other programs write, one event per record, on the test broker:
formats, keys, timestamps, headers, dead letters, co-partitioned topics, and where a
headrace producer puts a key next to where Kafka's own producer does."""

from __future__ import annotations

import json
from collections import Counter

import anyio
import msgpack
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from streams import ConfigurationError, StreamId, StreamProvider
from streams.adapters.mapper import KafkaPartitionMapper, kafka_partition, murmur2
from streams.adapters.protocols import RewindableReceiver
from streams.backends.kafka.clients import ensure_topic
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import Recorder, drained
from tests.sensor_workload import closed_window_counts, readings, write_json

QUEUES = 4


def json_provider(bootstrap: str, topic: str, **options) -> StreamProvider:
    options.setdefault("records", "json")
    options.setdefault("namespace", "sensors")
    return StreamProvider.kafka(
        bootstrap, topic, queues=QUEUES, kafka={"idempotent": False, "group_membership": False}, **options
    )


async def make_topic(bootstrap: str, topic: str, partitions: int = QUEUES) -> None:
    assert await ensure_topic(bootstrap, topic, partitions) == partitions


async def produce(bootstrap: str, topic: str, *records: tuple) -> None:
    """``(key, value, partition, timestamp_ms, headers)`` records, written as any program would."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value, partition, timestamp, headers in records:
            await producer.send_and_wait(
                topic, value, key=key, partition=partition, timestamp_ms=timestamp, headers=headers
            )
    finally:
        await producer.stop()


# -- Kafka's partitioner ---------------------------------------------------------------


def test_murmur2_gives_kafkas_own_values_and_aiokafkas_partitions():
    # Kafka's Java test values (UtilsTest.testMurmur2), which Java prints as signed ints.
    known = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: murmur2(k) - (1 << 32) * (murmur2(k) >= 1 << 31) for k in known} == known
    partitions = list(range(8))
    keys = [f"sensor-{n}".encode() for n in range(500)] + [bytes(range(n)) for n in range(12)]
    assert [kafka_partition(k, 8) for k in keys] == [DefaultPartitioner()(k, partitions, partitions) for k in keys]
    mapper = KafkaPartitionMapper(8)
    assert [mapper.get_queue_for_stream(StreamId("any", k.decode())).number for k in keys[:500]] == [
        DefaultPartitioner()(k, partitions, partitions) for k in keys[:500]
    ]


async def test_a_headrace_producer_and_a_plain_one_agree_on_every_keys_partition(kafka_broker, kafka_topic):
    keys = [f"device-{n}" for n in range(60)]
    await make_topic(kafka_broker, kafka_topic)
    provider = json_provider(kafka_broker, kafka_topic)
    async with provider.client():
        for n, key in enumerate(keys):
            await provider.get_stream(StreamId("sensors", key)).on_next({"n": n})
    # the same keys, by Kafka's default partitioner, into a twin topic
    await make_topic(kafka_broker, kafka_topic + "-plain")
    await produce(kafka_broker, kafka_topic + "-plain", *[(k.encode(), b"{}", None, None, None) for k in keys])

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def where(topic: str) -> dict[str, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(QUEUES)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            found: dict[str, int] = {}
            with anyio.fail_after(20):
                while len(found) < len(keys):
                    for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                        found.update((r.key.decode(), tp.partition) for r in records)
            return found
        finally:
            await consumer.stop()

    headrace, plain = await where(kafka_topic), await where(kafka_topic + "-plain")
    assert headrace == plain
    assert len(set(plain.values())) == QUEUES  # the keys do spread: the check means something


# -- reading a topic of JSON events -----------------------------------------------------


async def test_a_json_topic_written_by_plain_aiokafka_gives_the_windowed_counts_computed_here(
    kafka_broker, kafka_topic
):
    items = list(readings(12_000, sensors=20, spacing=0.02))  # 240 s of data
    await make_topic(kafka_broker, kafka_topic)
    await write_json(kafka_broker, kafka_topic, items)
    provider = json_provider(kafka_broker, kafka_topic)
    counts: Counter[tuple[str, float]] = Counter()

    @provider.implicit("sensors")
    class PerSensor:
        event_time = EventTime(
            OrderingPolicy(timestamp_by=lambda e: e.value["ts"] / 1000, out_of_order=5),
            Tumbling(60),
            Count(),
        )

        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_window(self, result):
            counts[(self.key, result.start)] += result.value

    async with provider:
        await drained(provider, 60)
        letters = await provider.dead_letters.count()
    expected = closed_window_counts([v for _, v in items], 60, 5)
    assert len(expected) >= 20 * 3  # three closed windows per sensor at least
    assert counts == expected
    assert letters == 0


async def test_keys_timestamps_headers_and_the_records_that_do_not_decode(kafka_broker, kafka_topic, tmp_path):
    await make_topic(kafka_broker, kafka_topic)
    t = 1_700_000_000_000
    await produce(
        kafka_broker,
        kafka_topic,
        (b"a", b'{"n": 1}', 0, t, [("trace", b"x1")]),
        (b"b", b'{"n": 2}', 0, t + 1, None),
        (b"a", b"{not json", 0, t + 2, None),  # undecodable: dead-lettered, reading goes on
        (None, b'{"n": 4, "device": "d-7"}', 0, t + 3, [("trace", b"x4")]),  # keyless: key_field
        (None, b'{"n": 5}', 0, t + 4, None),  # keyless, no such field: dead-lettered
        (b"a", b'{"n": 6}', 0, t + 5, None),
        (b"a", None, 0, t + 6, None),  # a tombstone: dead-lettered
        (b"\xff\xfe", b'{"n": 8}', 0, t + 7, None),  # a key that is not UTF-8
        (b"b", b'{"n": 9}', 0, t + 8, [("h", b"1"), ("h", b"2")]),
    )
    provider = json_provider(kafka_broker, kafka_topic, key_field="device", store=tmp_path / "local")
    seen: list = []

    @provider.implicit("sensors")
    class Everything:
        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_next(self, batch):
            seen.extend(
                (self.key, e.value["n"], e.event_time, e.arrival_time, e.headers, e.offset, e.token) for e in batch
            )

    async with provider:
        await drained(provider, 30)
        letters = await provider.dead_letters.list(reason="undecodable")
        agent = provider.agents[0]
        assert not isinstance(agent.receiver, RewindableReceiver)
    by_n = {n: (key, et, at, tuple(headers), offset) for key, n, et, at, headers, offset, _ in seen}
    s = t / 1000
    assert by_n == {
        1: ("a", s, s, (("trace", b"x1"),), 0),
        2: ("b", s + 0.001, s + 0.001, (), 1),
        # re-keyed through the hop, seen as the record in the user's topic: its offset there
        # (not the repartition topic's), its producer's headers (not the hop's)
        4: ("d-7", s + 0.003, s + 0.003, (("trace", b"x4"),), 3),
        6: ("a", s + 0.005, s + 0.005, (), 5),
        9: ("b", s + 0.008, s + 0.008, (("h", b"1"), ("h", b"2")), 8),
    }
    assert len(seen) == 5 and len({token for *_, token in seen}) == 5  # told apart by token
    assert [n for key, n, *_ in seen if key == "a"] == [1, 6]  # a stream's order is kept
    assert sorted((d.queue, d.sequence_number, d.payload) for d in letters) == [
        (0, 2, b"{not json"),
        (0, 4, b'{"n": 5}'),
        (0, 6, b""),
        (0, 7, b'{"n": 8}'),
    ]
    assert all(f"{kafka_topic} partition 0 offset {d.sequence_number} " in d.detail for d in letters)


async def test_acknowledged_offsets_are_committed_and_a_restart_reads_only_what_came_after(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic)
    first = [(f"k{n % 3}".encode(), json.dumps({"n": n}).encode(), None, None, None) for n in range(30)]
    await produce(kafka_broker, kafka_topic, *first)
    got: list[int] = []

    def start() -> StreamProvider:
        provider = json_provider(kafka_broker, kafka_topic)

        @provider.implicit("sensors")
        class Collect:
            def __init__(self, stream_id):
                pass

            def on_next(self, batch):
                got.extend(v["n"] for v in batch.values)

        return provider

    async with start() as provider:
        await drained(provider, 30)
    assert sorted(got) == list(range(30))
    got.clear()
    second = [(f"k{n % 3}".encode(), json.dumps({"n": n}).encode(), None, None, None) for n in range(30, 40)]
    await produce(kafka_broker, kafka_topic, *second)
    async with start() as provider:
        await drained(provider, 30)
    assert sorted(got) == list(range(30, 40))


async def test_msgpack_text_and_a_format_of_ones_own(kafka_broker, kafka_topic):
    class Reversed:
        name = "reversed text"

        def decode(self, data: bytes) -> str:
            return data.decode()[::-1]

        def encode(self, value: str) -> bytes:
            return value[::-1].encode()

    cases = [
        ("msgpack", msgpack.packb({"n": 1}), {"n": 1}),
        ("text", "héllo".encode(), "héllo"),
        ("bytes", b"\x00\x01", b"\x00\x01"),
        (Reversed(), b"olleh", "hello"),
    ]
    for number, (records, raw, expected) in enumerate(cases):
        topic = f"{kafka_topic}-{number}"
        await make_topic(kafka_broker, topic)
        await produce(kafka_broker, topic, (b"k", raw, None, None, None))
        provider = json_provider(kafka_broker, topic, records=records)
        rec = Recorder()
        await provider.get_stream(StreamId("sensors", "k")).subscribe(rec)
        async with provider:
            await drained(provider, 30)
            await provider.get_stream(StreamId("sensors", "k")).on_next(expected)  # and back
            with anyio.fail_after(20):
                while len(rec.events) < 2:
                    await anyio.sleep(0.02)
        assert rec.values == [expected, expected], records


# -- several topics ------------------------------------------------------------------------


async def test_two_co_partitioned_topics_are_read_together_and_positions_commit_per_topic(kafka_broker, kafka_topic):
    tolls, prices = f"{kafka_topic}-tolls", f"{kafka_topic}-prices"
    await make_topic(kafka_broker, tolls)
    await make_topic(kafka_broker, prices)
    # One record per produce request, as a slow producer writes (each its own record batch).
    await produce(
        kafka_broker,
        tolls,
        *[(f"plaza-{n % 5}".encode(), json.dumps({"toll": n}).encode(), None, None, None) for n in range(40)],
    )
    await produce(
        kafka_broker,
        prices,
        *[(f"plaza-{n % 5}".encode(), json.dumps({"price": n}).encode(), None, None, None) for n in range(15)],
    )
    got: dict[StreamId, list] = {}

    def start() -> StreamProvider:
        provider = StreamProvider.kafka(
            kafka_broker,
            topics={"tolls": tolls, "prices": prices},
            queues=QUEUES,
            records="json",
            kafka={"idempotent": False, "group_membership": False},
        )

        @provider.implicit("tolls")
        @provider.implicit("prices")
        class Collect:
            def __init__(self, stream_id):
                self.sid = stream_id

            def on_next(self, batch):
                got.setdefault(self.sid, []).extend(batch.values)

        return provider

    async with start() as provider:
        await drained(provider, 30)
        for agent in provider.agents:  # queue i reads partition i of each topic
            assert {tp.topic for tp in agent.receiver.reads._partitions} == {tolls, prices}
    assert {sid: values for sid, values in got.items() if sid.namespace == "tolls"} == {
        StreamId("tolls", f"plaza-{p}"): [{"toll": n} for n in range(p, 40, 5)] for p in range(5)
    }
    assert {sid: values for sid, values in got.items() if sid.namespace == "prices"} == {
        StreamId("prices", f"plaza-{p}"): [{"price": n} for n in range(p, 15, 5)] for p in range(5)
    }
    got.clear()
    await produce(kafka_broker, prices, (b"plaza-1", b'{"price": 99}', None, None, None))
    async with start() as provider:  # both topics' offsets were committed: only the new one
        await drained(provider, 30)
    assert got == {StreamId("prices", "plaza-1"): [{"price": 99}]}


async def test_topics_with_different_partition_counts_are_refused_clearly(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic + "-a", 4)
    await make_topic(kafka_broker, kafka_topic + "-b", 2)
    provider = StreamProvider.kafka(
        kafka_broker,
        topics={"a": kafka_topic + "-a", "b": kafka_topic + "-b"},
        queues=4,
        records="json",
        kafka={"idempotent": False},
    )
    with pytest.raises(ConfigurationError) as refused:
        async with provider.client():
            pass
    assert f"'{kafka_topic}-a' has 4, '{kafka_topic}-b' has 2" in str(refused.value)


def test_settings_that_need_a_record_format_are_refused_without_one():
    with pytest.raises(ConfigurationError, match="records="):
        StreamProvider.kafka("127.0.0.1:1", "t", key_field="id")
    with pytest.raises(ConfigurationError, match="records="):
        StreamProvider.kafka("127.0.0.1:1", topics={"a": "t"})
    with pytest.raises(ConfigurationError, match="records is one of"):
        StreamProvider.kafka("127.0.0.1:1", "t", records="yaml")
    with pytest.raises(ConfigurationError, match="needs a topic"):
        StreamProvider.kafka("127.0.0.1:1")


async def test_event_times_in_epoch_milliseconds_and_iso_text_make_the_same_windows(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic)
    t0 = 1_700_000_000  # 2023-11-14T22:13:20Z, a multiple of 10 s
    offsets = [1, 2, 12, 13, 14, 25, 31]
    from datetime import UTC, datetime

    records = [
        (
            b"d",
            json.dumps(
                {"ts": (t0 + o) * 1000, "at": datetime.fromtimestamp(t0 + o, UTC).isoformat().replace("+00:00", "Z")}
            ).encode(),
            None,
            None,
            None,
        )
        for o in offsets
    ]
    await produce(kafka_broker, kafka_topic, *records)
    provider = json_provider(kafka_broker, kafka_topic)
    windows: dict[str, list] = {"ms": [], "iso": []}

    def windowed(name: str, policy: OrderingPolicy) -> type:
        class Windows:
            event_time = EventTime(policy, Tumbling(10), Count())

            def __init__(self, stream_id):
                pass

            def on_window(self, result):
                windows[name].append((result.start - t0, result.value))

        Windows.__qualname__ = f"Windows_{name}"
        return Windows

    provider.implicit("sensors")(windowed("ms", OrderingPolicy(timestamp_by="ts", unit="ms")))
    provider.implicit("sensors")(windowed("iso", OrderingPolicy(timestamp_by="at")))
    async with provider:
        await drained(provider, 30)
    # the watermark reaches t0 + 31: windows [0, 10), [10, 20), [20, 30) have closed
    assert windows["ms"] == windows["iso"] == [(0, 2), (10, 3), (20, 1)]


def test_a_config_file_names_the_format_of_a_topic_others_write(tmp_path):
    from streams.runtime.config import load_config

    (tmp_path / "headrace.toml").write_text(
        '[provider]\nadapter = "kafka"\nqueues = 4\n'
        '[provider.kafka]\nbootstrap_servers = "127.0.0.1:1"\ntopic = "readings"\n'
        'records = "json"\nnamespace = "sensors"\nkey_field = "device"\n'
    )
    provider = load_config(tmp_path / "headrace.toml", environ={}).provider()
    settings = provider.factory.settings
    assert (settings.record_format.name, settings.namespaces, settings.key_field) == (
        "json",
        {"readings": "sensors", "headrace.repartition.readings": "sensors"},  # and the re-keying hop's
        "device",
    )
    assert isinstance(provider.mapper, KafkaPartitionMapper)
