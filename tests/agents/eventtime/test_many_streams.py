"""A stream per device: quiet activations cost no task and no tick, go away after
``stream_inactivity_period`` unless an open window holds the checkpoint, and 100,000 of them
coming and going leave no memory behind."""

from __future__ import annotations

import asyncio
import gc
import sys
import time

import anyio

from streams import StreamId, StreamProvider
from streams.core.codec import _STREAM_IDS
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained


async def _until(condition, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


async def test_quiet_activations_hold_no_task_and_are_not_ticked():
    provider = StreamProvider.memory(queues=2, get_queue_msgs_timer_period=0.01)
    ticks = []

    @provider.implicit("devices")
    class Counts:
        # late_arrival: a silent stream's watermark follows the clock, so an activation with
        # an open window must be ticked; one whose windows are closed has nothing to tick.
        event_time = EventTime(OrderingPolicy(late_arrival=60), Tumbling(60), Count())

        def __init__(self, stream_id):
            self.windows = 0

        def on_window(self, result):
            self.windows += 1

    async with provider:
        tasks_before = len(asyncio.all_tasks())
        for i in range(2000):
            stream = provider.get_stream(StreamId("devices", f"d-{i}"))
            await stream.on_next_batch([1, 2, 3])
            await stream.on_completed()  # closes its window
        await drained(provider)
        activations = [a for agent in provider.agents for a in agent.event_time_activations()]
        for activation in activations:  # count the ticks that still reach an activation
            original = activation.on_tick

            async def counted(now, _original=original):
                ticks.append(now)
                await _original(now)

            activation.on_tick = counted
        await anyio.sleep(0.2)  # twenty timer periods
        tasks_after = len(asyncio.all_tasks())
    assert len(activations) == 2000
    assert sum(a.target.windows for a in activations) == 2000
    assert ticks == []
    assert tasks_after - tasks_before < 10  # no task parked per activation


async def test_open_window_keeps_its_activation_until_a_tick_closes_it_then_it_is_deactivated():
    # The choice (docs/workers.md): an activation whose open windows hold the checkpoint
    # stays active past the inactivity period; once they close it goes like any other.
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=0.01, stream_inactivity_period=0.05)
    results, deactivated = [], []

    @provider.implicit("devices")
    class Counts:
        event_time = EventTime(OrderingPolicy(late_arrival=0.3), Tumbling(0.2), Count())

        def __init__(self, stream_id):
            self.stream_id = stream_id

        def on_window(self, result):
            results.append(result.value)

        def on_deactivate(self):
            deactivated.append(self.stream_id.key)

    async with provider:
        agent = provider.agents[0]
        await provider.get_stream(StreamId("devices", "open")).on_next_batch(["a", "b"])
        await drained(provider)
        await anyio.sleep(0.15)  # past the inactivity period, the window still open
        assert results == [] and deactivated == []
        assert [sid.key for sid in agent.stream_ids()] == ["open"]
        await _until(lambda: results == [2])  # only a tick can close it: no more data comes
        await _until(lambda: deactivated == ["open"])
        assert agent.stream_ids() == []
        # The stream comes back with a fresh activation.
        await provider.get_stream(StreamId("devices", "open")).on_next_batch(["c"])
        await _until(lambda: results == [2, 1])


async def test_a_stream_with_fresh_data_is_not_deactivated_while_quiet_ones_are():
    provider = StreamProvider.memory(queues=1, stream_inactivity_period=0.2)
    deactivated = []

    @provider.implicit("devices")
    class Plain:
        def __init__(self, stream_id):
            self.stream_id = stream_id

        def on_next(self, batch):
            pass

        def on_deactivate(self):
            deactivated.append(self.stream_id.key)

    async with provider:
        agent = provider.agents[0]
        for key in ("quiet-1", "busy", "quiet-2"):
            await provider.get_stream(StreamId("devices", key)).on_next("x")
        await drained(provider)
        with anyio.fail_after(10):
            while not deactivated:
                await provider.get_stream(StreamId("devices", "busy")).on_next("x")
                await anyio.sleep(0.02)
        await anyio.sleep(0)
        assert sorted(deactivated) == ["quiet-1", "quiet-2"]
        assert [sid.key for sid in agent.stream_ids()] == ["busy"]


async def _come_and_go(windowed: bool, rounds: int, per_round: int) -> tuple[list[int], list[int]]:
    """Rounds of streams that each publish one event and fall quiet; every activation is
    deactivated before the next round. Returns the allocated blocks and the objects the
    collector tracks after each round."""
    provider = StreamProvider.memory(
        queues=4,
        cache_size=256,
        cache_buckets=4,
        stream_inactivity_period=0.05,
        get_queue_msgs_timer_period=0.01,
    )
    seen, deactivated = [0], [0]

    class Base:
        def __init__(self, stream_id):
            pass

        def on_deactivate(self):
            deactivated[0] += 1

    if windowed:

        @provider.implicit("devices")
        class Windowed(Base):
            event_time = EventTime(OrderingPolicy(), Tumbling(60), Count())

            def on_window(self, result):
                seen[0] += result.value

    else:

        @provider.implicit("devices")
        class Plain(Base):
            def on_next(self, batch):
                seen[0] += len(batch)

    blocks, objects = [], []
    async with provider:
        for r in range(rounds):
            for i in range(per_round):
                stream = provider.get_stream(StreamId("devices", f"r{r}-{i}"))
                await stream.on_next(i)
                if windowed:
                    await stream.on_completed()  # its window closes: nothing holds it
            await drained(provider, 60)
            await _until(lambda: deactivated[0] == (r + 1) * per_round, timeout=60)
            assert all(agent.stream_ids() == [] for agent in provider.agents)
            await anyio.sleep(0.05)  # the on_deactivate tasks finish
            # The decoder's stream-id intern table is a bounded cache (swept at 100,000 ids, see
            # streams.core.codec), not the activations': emptied so the count shows what they leave.
            _STREAM_IDS.clear()
            gc.collect()
            blocks.append(sys.getallocatedblocks())
            # The worker's collector policy freezes survivors (agents.gc_policy): they count too.
            objects.append(len(gc.get_objects()) + gc.get_freeze_count())
    assert seen[0] == rounds * per_round
    return blocks, objects


async def test_100000_activations_come_and_go_without_memory_growing():
    rounds, per_round = 5, 20_000
    blocks, objects = await _come_and_go(False, rounds, per_round)
    later = (rounds - 2) * per_round  # activations that came and went after round two
    # Nothing kept per stream: anything left behind per activation is at least one block
    # (and, for an object, one tracked by the collector). Free lists and tables that have
    # grown to their working size move the block count by a few thousand either way.
    assert blocks[-1] - blocks[1] < later / 3, blocks
    assert objects[-1] - objects[1] < later / 10, objects


async def test_event_time_activations_come_and_go_without_memory_growing():
    rounds, per_round = 4, 5_000
    blocks, objects = await _come_and_go(True, rounds, per_round)
    later = (rounds - 2) * per_round
    assert blocks[-1] - blocks[1] < later / 3, blocks
    assert objects[-1] - objects[1] < later / 10, objects


async def test_a_quiet_accepting_activation_catches_up_with_the_clock_before_late_events():
    # Unticked while quiet, the activation still judges a late event against the watermark
    # the queue's clock gives (the arrival of the queue's previous record - late_arrival), as
    # the other streams' records moved it: under `accept` an event whose every window that
    # watermark has closed is dead-lettered. Without such a record between, the clock before
    # the late event is the activation's own last record's, and the event joins its window
    # (the batch's own arrival never counts: docs/event-time.md, backlogs).
    outcomes = []
    for other_between in (True, False):
        provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=0.01)
        results = []

        @provider.implicit("devices")
        class Counts:
            event_time = EventTime(OrderingPolicy(late_arrival=0.05, action="accept"), Tumbling(0.1, origin=0), Count())

            def __init__(self, stream_id):
                pass

            def on_window(self, result):
                results.append(result.value)

        stream = provider.get_stream(StreamId("devices", "d"))
        async with provider:
            await stream.on_next("first")
            await _until(lambda: results == [1])  # closed by a tick; then nothing is open
            await anyio.sleep(0.5)
            if other_between:  # a record of another stream of the queue (no consumer)
                await provider.get_stream(StreamId("elsewhere", "e")).on_next("tick")
                await drained(provider)
            await stream.on_next("late", event_time=time.time() - 0.3)  # its window ended >= 0.2 s ago
            await stream.on_completed()
            await drained(provider)
            letters = await provider.dead_letters.list()
        outcomes.append((results, [(d.reason, d.value) for d in letters]))
    assert outcomes == [([1], [("window_closed", "late")]), ([1, 1], [])]
