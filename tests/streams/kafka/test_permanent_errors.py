"""Permanent errors are not outages: a record batch no installed codec reads and
a deleted topic stop their queue with one line naming the queue, the offset and the fix;
the queue is shown failed in ``headrace status`` and the metrics, ``drain()`` raises the
reason, the other queues go on, and nothing is retried as "unreachable"."""

from __future__ import annotations

import json
import logging

import aiokafka.codec
import anyio
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CorruptRecordException,
    GroupAuthorizationFailedError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnsupportedCodecError,
)

from streams import QueueFailedError, StreamProvider
from streams.backends.kafka.clients import is_transient, permanent_fix
from streams.backends.kafka.settings import KafkaSettings
from streams.runtime.metrics import metric_families
from streams.runtime.snapshot import take_snapshot
from streams.runtime.status import StatusReporter
from tests.agents.delivery.conftest import drained
from tests.helpers import collected
from tests.kafka_fixtures import delete_topic, json_provider
from tests.streams.cli.helpers import headrace
from tests.streams.kafka.test_foreign_records import QUEUES, make_topic, produce


def failed_gauge(provider: StreamProvider) -> dict[str, float]:
    [family] = [f for f in metric_families(take_snapshot(provider), {}) if f.name == "headrace_queue_failed"]
    return {s.labels["queue"]: s.value for s in family.samples}


async def test_a_batch_no_installed_codec_reads_stops_its_queue_and_the_others_go_on(
    kafka_broker, kafka_topic, tmp_path, caplog, monkeypatch
):
    await make_topic(kafka_broker, kafka_topic)
    # Queue 2: two plain records, then a snappy batch; the other queues: plain records.
    await produce(
        kafka_broker, kafka_topic, *[(b"k", json.dumps({"n": n}).encode(), n % 4, None, None) for n in range(8)]
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker, compression_type="snappy")
    await producer.start()
    try:
        for n in range(100, 103):
            await producer.send(kafka_topic, json.dumps({"n": n}).encode(), key=b"k", partition=2)
        await producer.flush()
    finally:
        await producer.stop()
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # an install without the codecs
    provider = json_provider(kafka_broker, kafka_topic, queues=QUEUES, namespace="sensors", store=tmp_path / "store")
    got = collected(provider, "sensors")
    caplog.set_level(logging.INFO)
    async with provider:
        with anyio.fail_after(30), pytest.raises(QueueFailedError) as failed:
            await provider.drain()
        with anyio.fail_after(5), pytest.raises(QueueFailedError):
            await provider.drain()  # and again: the queue stays failed, not retried
        assert failed_gauge(provider) == {"0": 0, "1": 0, "2": 1, "3": 0}
        assert provider.store is not None
        await StatusReporter(provider, provider.backend.status_board(), interval=60.0).report()
        shown = await anyio.to_thread.run_sync(lambda: headrace("status", "--path", "store", cwd=tmp_path))
    reason = str(failed.value)
    assert reason == (
        f"queue-2: cannot read {kafka_topic} partition 2 at offset 2: UnsupportedCodecError: Libraries for snappy "
        "compression codec not found; install the codecs: pip install 'aiokafka[lz4,snappy,zstd]' "
        "(headrace's default install has them)"
    )
    assert sorted(v["n"] for v in got) == list(range(8))  # every record before the batch, on every queue
    assert shown.returncode == 0, shown.stderr
    assert " ".join(shown.stdout.split()).count("FAILED") == 1
    assert f"queue 2 FAILED on {provider.worker_name}: queue-2: cannot read {kafka_topic} partition 2 at offset 2" in (
        " ".join(shown.stdout.split())
    )
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"queue-2: stopped, shown failed: {reason}"]
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]


async def test_a_deleted_topic_stops_its_queues_instead_of_waiting_forever(kafka_broker, kafka_topic, caplog):
    await make_topic(kafka_broker, kafka_topic, 2)
    await produce(
        kafka_broker, kafka_topic, *[(b"k", json.dumps({"n": n}).encode(), n % 2, None, None) for n in range(4)]
    )
    provider = json_provider(kafka_broker, kafka_topic, queues=2, namespace="sensors", kafka={"outage_after": 0.5})
    got = collected(provider, "sensors")
    async with provider:
        await drained(provider, 30)
        await delete_topic(kafka_broker, kafka_topic)
        with anyio.fail_after(30):
            while not all(agent.failure for agent in provider.agents):  # idle queues look every outage_after
                await anyio.sleep(0.1)
        with anyio.fail_after(5), pytest.raises(QueueFailedError) as failed:
            await provider.drain()
        assert failed_gauge(provider) == {"0": 1, "1": 1}
    assert sorted(v["n"] for v in got) == [0, 1, 2, 3]
    for queue in (0, 1):
        assert (
            f"queue-{queue}: cannot read {kafka_topic} partition {queue} at offset 2: "
            f"[Error 3] UnknownTopicOrPartitionError: topic {kafka_topic!r} is not on the cluster; the topic no "
            "longer exists (deleted?): recreate it, or point the worker at another topic"
        ) in str(failed.value)
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (TopicAuthorizationFailedError(), "grant it Describe, Read and Write on topic(s) 'readings'"),
        (GroupAuthorizationFailedError(), "and Read on group 'app'"),
        (CorruptRecordException(), "reset group 'app''s offset past it"),
        (RecordTooLargeError(), "raise consumer_options max_partition_fetch_bytes"),
        (MessageSizeTooLargeError(), "raise the topic's max.message.bytes"),
        (UnsupportedCodecError(), "pip install 'aiokafka[lz4,snappy,zstd]'"),
    ],
)
def test_each_permanent_error_is_not_retried_and_names_its_fix(error, fix):
    settings = KafkaSettings("127.0.0.1:1", "readings", group_id="app")
    assert not is_transient(error)
    assert fix in permanent_fix(error, settings)
