"""What a producer can make a worker hold, in bytes: events over ``max_event_size`` are refused
before anything is written, records over it are dead-lettered ``too_large`` with a prefix, and
the queue cache stops reading at ``cache_max_bytes`` as it does at ``cache_size`` batches."""

from __future__ import annotations

import random
import sqlite3
import zlib
from pathlib import Path

import anyio
import pytest

from cache.simple import SimpleQueueCache
from streams import StreamId, StreamProvider
from streams.core.batch import BatchContainer, QueueMessage
from streams.core.codec import encode_batch
from streams.core.deadletters import LETTER_PREFIX
from streams.core.errors import EventTooLargeError, PublishError
from streams.core.ids import QueueId
from streams.runtime.config import load_config
from tests.agents.delivery.conftest import drained
from tests.helpers import start_worker

SID = StreamId("blobs", "b-1")


def _message(sequence: int, size: int) -> tuple[QueueMessage, BatchContainer]:
    payload = encode_batch(SID, 0, float(sequence), [b"x" * size])
    return QueueMessage(QueueId(0), sequence, payload, float(sequence)), BatchContainer.decode(payload)


def test_a_cache_full_in_bytes_is_under_pressure_and_frees_what_its_cursor_passed():
    cache = SimpleQueueCache(max_size=1000, buckets=10, max_bytes=10_000)
    cursor = cache.create_cursor(SID, None)
    cache.add([_message(n, 3000) for n in range(4)])  # 4 batches: far below 1000, over 10,000 bytes
    assert cache.size == 4 and cache.bytes > 12_000
    assert cache.is_under_pressure() and cache.get_max_add_count() == 0
    assert cache.try_purge() == 0  # the cursor still needs the oldest batch: nothing dropped
    for _ in range(4):
        assert cursor.current() is not None
        cursor.advance()
    assert cache.try_purge() == 4 and cache.bytes == 0
    assert not cache.is_under_pressure() and cache.get_max_add_count() == 1000


def test_the_byte_bounds_are_settings_with_units():
    config = load_config(environ={"HEADRACE_AGENT__MAX_EVENT_SIZE": '"4 MiB"', "HEADRACE_CACHE__MAX_BYTES": "1000000"})
    assert (config.options.max_event_size, config.options.cache_max_bytes) == (4 << 20, 1_000_000)
    with pytest.raises(Exception, match=r"number of bytes >= 1.*'lots'"):
        load_config(environ={"HEADRACE_CACHE__MAX_BYTES": '"lots"'})


async def test_an_event_over_the_limit_is_refused_before_anything_is_written(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=1, max_event_size=10_000)
    seen: list[object] = []
    async with provider:
        stream = provider.get_stream(SID)
        await stream.subscribe(lambda batch: seen.extend(e.value for e in batch))
        with pytest.raises(EventTooLargeError, match=r"is 20,0\d\d bytes encoded, over max_event_size \(10,000"):
            await stream.on_next("y" * 20_000)
        # send buffers: the refusal is flush's, and the small events around it are written in order
        await stream.send("a")
        await stream.send("z" * 20_000)
        await stream.send("b")
        with pytest.raises(PublishError) as refused:
            await provider.flush()
        assert refused.value.failed == 1 and "over max_event_size" in str(refused.value)
        # a batch whose events fit one by one, but not together, is written as several records
        await stream.on_next_batch([f"{n:04d}" + "v" * 995 for n in range(40)])
        await drained(provider)
    assert seen[:2] == ["a", "b"] and [v[:4] for v in seen[2:]] == [f"{n:04d}" for n in range(40)]
    with sqlite3.connect(tmp_path / "store" / "headrace.db") as conn:
        sizes = [n for (n,) in conn.execute("SELECT length(payload) FROM queue_records ORDER BY seq")]
    assert len(sizes) > 4 and max(sizes) <= 10_000  # nothing over the limit was ever stored


async def test_a_record_over_the_readers_limit_is_dead_lettered_with_a_prefix(tmp_path):
    writer = StreamProvider.embedded(tmp_path / "store", queues=1)  # the default limit: 1 MiB
    async with writer.client():
        stream = writer.get_stream(SID)
        for value in ("small-1", "B" * 50_000, "small-2"):
            await stream.on_next(value)
    reader = StreamProvider.embedded(tmp_path / "store", queues=1, max_event_size=20_000)
    seen: list[object] = []

    @reader.implicit("blobs")
    class Keep:
        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch) -> None:
            seen.extend(e.value for e in batch)

    async with reader:
        await drained(reader)
        letters = await reader.dead_letters.list(reason="too_large")
    assert seen == ["small-1", "small-2"]
    [letter] = letters
    assert (letter.queue, letter.sequence_number) == (0, 1)
    assert len(letter.payload) == LETTER_PREFIX and "over max_event_size (20,000 bytes)" in letter.detail


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


async def read_by_blob_worker(count: int, *where: object) -> tuple[str, float]:
    """What ``blob_worker.py`` says once it has taken ``count`` events from ``where``, and how
    many MiB its peak RSS grew from when it was ready (read here, from outside the worker)."""
    worker = start_worker(Path(__file__).with_name("blob_worker.py"), count, *where)
    try:
        baseline = _kib(worker.pid, "VmRSS")
        assert worker.stdout is not None
        with anyio.fail_after(120):
            line = await anyio.to_thread.run_sync(worker.stdout.readline)
        return line, (_kib(worker.pid, "VmHWM") - baseline) / 1024
    finally:
        worker.kill()
        worker.wait()


async def test_events_of_4_mib_are_read_by_a_worker_within_its_cache_bound(tmp_path):
    count, rng, crc = 60, random.Random(7), 0  # 240 MiB in all: far more than the worker may hold
    writer = StreamProvider.embedded(tmp_path / "store", queues=2, max_event_size=8 << 20)
    async with writer.client():
        for n in range(count):
            value = rng.randbytes(4 << 20)
            crc ^= zlib.crc32(value)
            await writer.get_stream(StreamId("blobs", f"k{n % 8}")).on_next(value)
    line, grown = await read_by_blob_worker(count, tmp_path / "store")
    assert line.split() == ["done", str(count), str(crc)]  # every event, each once, intact
    # Two caches of 16 MiB, a read of up to 16 MiB in flight and the event a consumer holds:
    # far below the 240 MiB the store holds, which a cache bounded only in batches takes in.
    assert grown < 120, f"peak RSS grew {grown:.0f} MiB"
