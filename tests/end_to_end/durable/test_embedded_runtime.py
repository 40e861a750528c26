"""The runtime over the embedded store: checkpoints, rewinds from the durable queue, slow
consumers detached, crashes, foreign records."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import anyio
import pytest

from streams import QueueId, SequenceToken, StreamId, StreamProvider
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from tests.agents.delivery.conftest import GatedRecorder, Recorder, drained
from tests.helpers import start_worker, wait_until_async

WORKER = Path(__file__).with_name("worker_process.py")


async def test_restart_resumes_after_the_checkpoint(tmp_path):
    sid = StreamId("ns", "r")
    first, second = Recorder(), Recorder()
    provider = StreamProvider.embedded(tmp_path, queues=2)
    async with provider:
        await provider.get_stream(sid).subscribe(first)
        for n in range(10):
            await provider.get_stream(sid).on_next(n)
        await drained(provider)
    async with StreamProvider.embedded(tmp_path, queues=2).client() as client:
        for n in range(10, 15):
            await client.get_stream(sid).on_next(n)
    provider = StreamProvider.embedded(tmp_path, queues=2)
    await provider.get_stream(sid).subscribe(second)
    async with provider:
        await drained(provider)
    assert first.values == list(range(10))
    assert second.values == list(range(10, 15))  # nothing acknowledged is delivered again


async def test_rewind_older_than_the_cache_reads_the_durable_queue(tmp_path):
    sid, other = StreamId("ns", "w"), StreamId("ns", "other")
    provider = StreamProvider.embedded(tmp_path, queues=1, cache_size=8, cache_buckets=2)
    async with provider:
        for n in range(40):
            await provider.get_stream(sid).on_next(n)
            await provider.get_stream(other).on_next(-n)
            await drained(provider)
        rewound = Recorder()
        await provider.get_stream(sid).subscribe(rewound, token=SequenceToken(10))
        await drained(provider)
        await provider.get_stream(sid).on_next(40)
        await drained(provider)
    assert rewound.errors == []  # not a miss: the queue still has it
    assert rewound.values == list(range(5, 41))  # record 10 is event 5 (two streams interleave)


async def test_slow_consumer_is_detached_and_catches_up_from_the_queue(tmp_path):
    slow_sid, fast_sid = StreamId("ns", "slow"), StreamId("ns", "fast")
    provider = StreamProvider.embedded(tmp_path, queues=1, cache_size=20, cache_buckets=4, slow_consumer_timeout=0.2)
    fast = Recorder()
    slow = GatedRecorder()
    async with provider:
        await provider.get_stream(slow_sid).subscribe(slow)
        await provider.get_stream(fast_sid).subscribe(fast)
        await provider.get_stream(slow_sid).on_next("s0")
        for n in range(100):
            await provider.get_stream(fast_sid).on_next(n)
        await provider.get_stream(slow_sid).on_next("s1")
        with anyio.fail_after(10):
            while len(fast.events) < 100:  # more than the cache holds: only a detach allows it
                await anyio.sleep(0.02)
        slow.gate.set()
        await drained(provider)
        (consumer,) = provider.agents[0].consumers(slow_sid)
    assert fast.values == list(range(100))
    assert slow.values == ["s0", "s1"]
    assert consumer.detached == 1


async def test_foreign_record_is_dead_lettered_with_its_bytes_and_the_agent_goes_on(tmp_path):
    sid = StreamId("ns", "f")
    rec = Recorder()
    provider = StreamProvider.embedded(tmp_path, queues=1)
    async with provider:
        await provider.get_stream(sid).subscribe(rec)
        await provider.get_stream(sid).on_next("before")
        await drained(provider)
        # another writer puts bytes that are not a batch container on the queue
        async with EmbeddedAdapterFactory(tmp_path, queues=1) as foreign:
            adapter = await foreign.create_adapter()
            await adapter.queue_message_batch(QueueId(0), sid, b"\x00not a container")
        await provider.get_stream(sid).on_next("after")
        await drained(provider)
        letters = await provider.dead_letters.list(reason="undecodable")
    assert rec.values == ["before", "after"]
    assert [(d.queue, d.sequence_number, d.payload) for d in letters] == [(0, 1, b"\x00not a container")]


@pytest.mark.parametrize("adapter", ["embedded", "kafka"])
async def test_sigkill_at_random_moments_loses_nothing_acknowledged(adapter, tmp_path, request):
    output = tmp_path / "delivered.txt"
    output.touch()
    if adapter == "kafka":
        bootstrap, topic = request.getfixturevalue("kafka_broker"), request.getfixturevalue("kafka_topic")
        where = f"kafka:{bootstrap}/{topic}"
        client_provider = StreamProvider.kafka(bootstrap, topic, queues=2, kafka={"idempotent": False})
    else:
        where = f"embedded:{tmp_path / 'store'}"
        client_provider = StreamProvider.embedded(tmp_path / "store", queues=2)
    rng = random.Random(7)
    published: list[str] = []
    sids = [StreamId("crash", str(i)) for i in range(6)]
    async with client_provider.client() as client:
        for _round in range(4):
            proc = start_worker(WORKER, where, output, 2)
            for n in range(150):  # publish while the worker reads, then kill it mid-flight
                value = f"r{_round}-{n}"
                await client.get_stream(sids[n % len(sids)]).on_next_batch([value])
                published.append(value)
                if n % 50 == 0:
                    await anyio.sleep(rng.uniform(0, 0.02))
            await anyio.sleep(rng.uniform(0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    proc = start_worker(WORKER, where, output, 2)  # a last worker finishes the backlog
    try:
        await wait_until_async(
            lambda: {line.split()[0] for line in output.read_text().splitlines()} >= set(published), 30, 0.1
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    lines = [line.split() for line in output.read_text().splitlines()]
    delivered = {value for value, _ in lines}
    assert delivered == set(published)  # at least once, nothing lost
    tokens: dict[str, set[str]] = {}
    for value, token in lines:
        tokens.setdefault(value, set()).add(token)
    assert all(len(t) == 1 for t in tokens.values())  # a redelivery carries the same token
