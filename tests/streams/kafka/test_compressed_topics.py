"""Topics as librdkafka producers write them: every codec Kafka has, read by a
worker with the default install, and headrace's own producers compressing."""

from __future__ import annotations

from collections import Counter

import aiokafka.codec
import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import UnsupportedCodecError

from streams import ConfigurationError, StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.runtime.config import load_config
from tests.agents.delivery.conftest import drained
from tests.sensor_workload import closed_window_counts, readings, write_with_librdkafka
from tests.streams.kafka.test_foreign_records import QUEUES, json_provider, make_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def per_sensor_windows(provider: StreamProvider, counts: Counter[tuple[str, float]]) -> None:
    @provider.implicit("sensors")
    class PerSensor:
        event_time = EventTime(OrderingPolicy(timestamp_by="ts", unit="ms", out_of_order=5), Tumbling(60), Count())

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_window(self, result) -> None:
            counts[(self.key, result.start)] += result.value


@pytest.mark.parametrize("codec", CODECS)
async def test_records_librdkafka_compressed_give_the_exact_windows(kafka_broker, kafka_topic, codec):
    items = list(readings(3_000, sensors=10, spacing=0.1))  # 300 s of data
    await make_topic(kafka_broker, kafka_topic)
    await anyio.to_thread.run_sync(write_with_librdkafka, kafka_broker, kafka_topic, items, codec)
    provider = json_provider(kafka_broker, kafka_topic)
    counts: Counter[tuple[str, float]] = Counter()
    per_sensor_windows(provider, counts)
    async with provider:
        await drained(provider, 60)
        letters = await provider.dead_letters.count()
    expected = closed_window_counts([v for _, v in items], 60, 5)
    assert len(expected) == 10 * 5  # five closed windows per sensor (T0 is not on a minute)
    assert counts == expected
    assert letters == 0


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
async def test_headraces_own_producer_compresses_and_reads_back(kafka_broker, kafka_topic, codec):
    await make_topic(kafka_broker, kafka_topic)
    provider = StreamProvider.kafka(
        kafka_broker,
        kafka_topic,
        queues=QUEUES,
        kafka={"idempotent": False, "group_membership": False, "compression": codec},
    )
    got: list[int] = []

    @provider.implicit("sensors")
    class Collect:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:
            got.extend(batch.values)

    async with provider:
        for n in range(200):
            await provider.get_stream(StreamId("sensors", f"s-{n % 7}")).on_next(n)
        await drained(provider, 30)
    assert sorted(got) == list(range(200))
    # The broker holds batches of that codec: a consumer without the codec cannot read them.
    assert await codec_missing_for(kafka_broker, kafka_topic) == f"Libraries for {codec} compression codec not found"


async def codec_missing_for(bootstrap: str, topic: str) -> str:
    """What a plain aiokafka consumer without cramjam (the codecs' library) says reading
    ``topic``: which codec its record batches need."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    saved, aiokafka.codec.cramjam = aiokafka.codec.cramjam, None
    try:
        tps = [TopicPartition(topic, p) for p in range(QUEUES)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        with anyio.fail_after(20), pytest.raises(UnsupportedCodecError) as refused:
            while True:
                await consumer.getmany(timeout_ms=200)
        return str(refused.value).removeprefix("UnsupportedCodecError: ")
    finally:
        aiokafka.codec.cramjam = saved
        await consumer.stop()


def test_the_config_file_sets_compression_and_refuses_an_unknown_codec(tmp_path):
    base = (
        '[provider]\nadapter = "kafka"\nqueues = 4\n[provider.kafka]\nbootstrap_servers = "127.0.0.1:1"\ntopic = "t"\n'
    )
    (tmp_path / "headrace.toml").write_text(base + 'compression = "zstd"\nidempotent = false\n')
    settings = load_config(tmp_path / "headrace.toml", environ={}).provider().factory.settings
    assert (settings.compression, settings.idempotent) == ("zstd", False)
    assert settings.producer_kwargs()["compression_type"] == "zstd"
    (tmp_path / "headrace.toml").write_text(base + 'compression = "brotli"\n')
    with pytest.raises(ConfigurationError, match="compression: must be one of none, gzip, snappy, lz4, zstd"):
        load_config(tmp_path / "headrace.toml", environ={})
    with pytest.raises(ConfigurationError, match="compression is one of"):
        StreamProvider.kafka("127.0.0.1:1", "t", kafka={"compression": "brotli"})
