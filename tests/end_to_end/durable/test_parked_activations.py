"""A quiet stream's activation goes even with its windows open, where the store saves its state
with the checkpoint: it is parked, its state kept compactly, and restored
when the stream has data again, with nothing lost or counted twice."""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import anyio

from streams import StreamId, StreamProvider
from streams.core.codec import _STREAM_IDS
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_saved_state import saved_states
from tests.helpers import wait_until_async


def quiet_after(path: Path, period: float = 0.1, **options: object) -> StreamProvider:
    return StreamProvider.embedded(
        path, queues=1, stream_inactivity_period=period, get_queue_msgs_timer_period=0.01, **options
    )


def windows_of(provider: StreamProvider, policy: OrderingPolicy | None = None) -> tuple[list, list]:
    """Tumbling 5 s counts of ``devices`` streams (field ``t``): the list of closed windows,
    (key, start, count), and the list of deactivated keys."""
    closed: list[tuple[str, float, int]] = []
    deactivated: list[str] = []

    @provider.implicit("devices")
    class Counts:
        event_time = EventTime(policy or OrderingPolicy(timestamp_by="t"), Tumbling(5), Count())

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_window(self, w):
            closed.append((self.key, w.start, w.value))

        def on_deactivate(self):
            deactivated.append(self.key)

    return closed, deactivated


async def publish(provider: StreamProvider, key: str, *times: float) -> None:
    stream = provider.get_stream(StreamId("devices", key))
    for t in times:
        await stream.on_next({"t": t})


async def test_an_open_window_is_parked_when_its_stream_is_quiet_and_resumes_with_its_data(tmp_path):
    provider = quiet_after(tmp_path)
    closed, deactivated = windows_of(provider)
    async with provider:
        (agent,) = provider.agents
        await publish(provider, "quiet", 1.0, 2.0)  # window [0, 5) stays open
        await publish(provider, "busy", *[float(t) for t in range(12)])  # [10, 15) stays open
        await drained(provider)
        assert await wait_until_async(lambda: sorted(deactivated) == ["busy", "quiet"], 10), deactivated
        assert agent.stream_ids() == []
        assert closed == [("busy", 0.0, 5), ("busy", 5.0, 5)]
        # Their state is still the store's (a restart would restore it too).
        assert saved_states(tmp_path) == [("devices/busy", 13, 0), ("devices/quiet", 1, 0)]
        await publish(provider, "quiet", 3.0, 7.0)  # closes [0, 5): two before, one now
        await publish(provider, "busy", 14.0, 16.0)  # closes [10, 15): 10, 11, 14
        await drained(provider)
        assert await wait_until_async(lambda: len(closed) == 4, 10)
    assert sorted(closed[2:]) == [("busy", 10.0, 3), ("quiet", 0.0, 3)]


async def test_a_parked_state_survives_a_restart_of_the_worker(tmp_path):
    first = quiet_after(tmp_path)
    closed, deactivated = windows_of(first)
    async with first:
        await publish(first, "d", 1.0, 2.0, 3.0)
        await drained(first)
        assert await wait_until_async(lambda: deactivated == ["d"], 10)
    assert closed == [] and saved_states(tmp_path) == [("devices/d", 2, 0)]
    second = quiet_after(tmp_path)
    closed, _ = windows_of(second)
    async with second:
        await publish(second, "d", 4.0, 6.0)
        await drained(second)
        assert await wait_until_async(lambda: closed == [("d", 0.0, 4)], 10), closed


async def test_an_activation_a_tick_can_change_is_not_parked(tmp_path):
    # late_arrival: its watermark follows the clock, so a tick will close the window; it
    # stays active until then (and then goes with nothing left to keep).
    provider = quiet_after(tmp_path, period=0.05)
    closed, deactivated = windows_of(provider, OrderingPolicy(timestamp_by="t", late_arrival=1.0))
    async with provider:
        (agent,) = provider.agents
        now = time.time()
        start = now - now % 5
        await publish(provider, "d", now)  # closed by a tick once the clock passes start + 6
        await drained(provider)
        await anyio.sleep(0.3)  # past the inactivity period, at least 0.7 s before the close
        assert closed == [] and deactivated == [] and [s.key for s in agent.stream_ids()] == ["d"]
        assert await wait_until_async(lambda: closed == [("d", start, 1)], 10), closed
        assert await wait_until_async(lambda: deactivated == ["d"], 10)
    assert saved_states(tmp_path) == []  # closed and empty: its row went


async def test_parked_activations_cost_a_few_hundred_bytes_each(tmp_path):
    provider = quiet_after(tmp_path, period=0.05, cache_size=256)
    _, deactivated = windows_of(provider)
    n = 3000
    async with provider:
        await publish(provider, "warm-up", 1.0)
        await drained(provider)
        assert await wait_until_async(lambda: deactivated == ["warm-up"], 10)
        _STREAM_IDS.clear()
        gc.collect()
        before = sys.getallocatedblocks()
        for i in range(n):
            await publish(provider, f"d{i}", 1.0)
        await drained(provider, 60)
        assert await wait_until_async(lambda: len(deactivated) == n + 1, 30), len(deactivated)
        await anyio.sleep(0.05)  # the on_deactivate tasks end
        _STREAM_IDS.clear()  # the decoder's bounded intern table, not the activations'
        gc.collect()
        per_stream = (sys.getallocatedblocks() - before) / n
    # A parked one keeps its key, position and state bytes: a handful of blocks, not the
    # kilobytes of a live one (bench/streams.py: 6.6 KB windowed).
    assert per_stream < 12, per_stream
