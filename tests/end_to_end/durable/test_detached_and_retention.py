"""Cursors off the cache: a detached slow consumer counts until it has caught up (drain and
shutdown wait for it); detachment is on by default on durable queues; a rewind past what
retention kept is a visible miss naming the first position available."""

from __future__ import annotations

import logging

import anyio
import pytest

from streams import CacheMissError, SequenceToken, StreamId, StreamProvider
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from streams.core.options import StreamProviderOptions
from tests.agents.delivery.conftest import GatedRecorder, Recorder, drained


class _SlowAfterGate(GatedRecorder):
    """Stalled on its first batch until ``gate`` is set, then a little slow on every batch."""

    async def on_next(self, batch):
        await self.gate.wait()
        await anyio.sleep(0.003)
        self.batches += 1
        self.events.extend(batch)


async def _detach_a_slow_consumer(provider: StreamProvider, slow, n: int) -> StreamId:
    slow_sid, fast_sid = StreamId("ns", "slow"), StreamId("ns", "fast")
    fast = Recorder()
    await provider.get_stream(slow_sid).subscribe(slow)
    await provider.get_stream(fast_sid).subscribe(fast)
    for i in range(n):  # the two streams interleave in the one queue
        await provider.get_stream(slow_sid).on_next(i)
        await provider.get_stream(fast_sid).on_next(i)
    with anyio.fail_after(20):
        while len(fast.events) < n:  # more than the cache holds: only a detach allows it
            await anyio.sleep(0.02)
    (consumer,) = provider.agents[0].consumers(slow_sid)
    assert consumer.detached == 1
    return slow_sid


@pytest.mark.parametrize("ending", ["drain", "shutdown"])
async def test_drain_and_shutdown_wait_for_a_detached_consumer_to_catch_up(tmp_path, ending):
    provider = StreamProvider.embedded(tmp_path, queues=1, cache_size=20, cache_buckets=4, slow_consumer_timeout=0.1)
    slow = _SlowAfterGate()
    caught_up = None
    async with provider:
        await _detach_a_slow_consumer(provider, slow, 150)
        slow.gate.set()
        if ending == "drain":
            await drained(provider, 30)
            caught_up = list(slow.values)
    if ending == "shutdown":  # within shutdown_timeout (10 s)
        caught_up = list(slow.values)
    assert caught_up == list(range(150))


async def test_a_cursor_with_history_still_to_read_is_not_idle(tmp_path):
    """What drain and shutdown wait on: a cursor between two reads of the durable queue
    has nothing in hand, yet it has not caught up."""
    sid = StreamId("ns", "h")
    provider = StreamProvider.embedded(tmp_path, queues=1, cache_size=8, cache_buckets=2)
    async with provider:
        for i in range(30):
            await provider.get_stream(sid).on_next(i)
            await drained(provider)
        rewound = Recorder()
        await provider.get_stream(sid).subscribe(rewound, token=SequenceToken(0))
        (consumer,) = provider.agents[0].consumers(sid)
        assert consumer.cursor.needs_fill and consumer.cursor.current() is None  # nothing read yet
        assert not consumer.idle and not provider.agents[0].idle
        await drained(provider)
        assert consumer.idle
    assert rewound.values == list(range(30))


def test_detachment_is_on_by_default():
    assert StreamProviderOptions().slow_consumer_timeout == 30.0


async def test_memory_queues_say_once_that_a_stalled_consumer_holds_up_its_queue(caplog):
    caplog.set_level(logging.INFO, logger="headrace")
    async with StreamProvider.memory(queues=4):
        pass
    lines = [r.getMessage() for r in caplog.records if "slow_consumer_timeout" in r.getMessage()]
    assert len(lines) == 1 and "memory queues cannot be re-read" in lines[0]
    caplog.clear()
    async with StreamProvider.memory(queues=4, slow_consumer_timeout=None):
        pass
    assert not [r for r in caplog.records if "slow_consumer_timeout" in r.getMessage()]


async def _published_and_retained(path, n: int) -> None:
    """``n`` events on one stream, read and acknowledged, then retention removing all but
    the newest few records."""
    sid = StreamId("ns", "kept")
    provider = StreamProvider.embedded(path, queues=1, cache_size=8, cache_buckets=2)
    async with provider:
        await provider.get_stream(sid).subscribe(Recorder())
        for i in range(n):
            await provider.get_stream(sid).on_next(i)
            await drained(provider)
    async with EmbeddedAdapterFactory(path, queues=1) as factory:
        adapter = await factory.create_adapter()
        await adapter.apply_retention(RetentionPolicy(max_age=None, max_records_per_queue=5))


async def test_a_rewind_past_retention_is_a_miss_naming_the_first_position_available(tmp_path):
    sid = StreamId("ns", "kept")
    await _published_and_retained(tmp_path, 30)  # records 0..29; 25..29 retained
    provider = StreamProvider.embedded(tmp_path, queues=1, cache_size=8, cache_buckets=2)
    async with provider:
        for i in range(30, 40):  # the cache now holds the newest eight of 30..39
            await provider.get_stream(sid).on_next(i)
            await drained(provider)
        rewound = Recorder()
        await provider.get_stream(sid).subscribe(rewound, token=SequenceToken(5))
        await drained(provider)
    (error,) = rewound.errors
    assert isinstance(error, CacheMissError) and "first position available is 25" in str(error)
    assert rewound.values == list(range(25, 40))
    assert provider.failure_handler.failures == 1


async def test_a_rewind_right_after_a_restart_reads_the_queue_before_the_checkpoint(tmp_path):
    """The new worker's cache holds nothing yet: the rewind must not start where the agent
    starts reading (after the checkpoint)."""
    sid = StreamId("ns", "kept")
    await _published_and_retained(tmp_path, 30)  # records 0..29 acknowledged; 25..29 retained
    provider = StreamProvider.embedded(tmp_path, queues=1, cache_size=8, cache_buckets=2)
    from_retained, from_removed = Recorder(), Recorder()
    async with provider:
        await provider.get_stream(sid).subscribe(from_retained, token=SequenceToken(27))
        await provider.get_stream(sid).subscribe(from_removed, token=SequenceToken(5))
        await drained(provider)
        await provider.get_stream(sid).on_next(30)
        await drained(provider)
    assert from_retained.errors == [] and from_retained.values == [27, 28, 29, 30]
    (error,) = from_removed.errors
    assert isinstance(error, CacheMissError) and "first position available is 25" in str(error)
    assert from_removed.values == [25, 26, 27, 28, 29, 30]
