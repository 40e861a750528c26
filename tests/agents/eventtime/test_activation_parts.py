"""Activation cost: what depends only on the consumer type is worked out once per
type (its hooks, the spec's check, the processor's parts), and each activation gets only its
own state."""

from __future__ import annotations

import gc
from collections import Counter

import anyio

import streams.core.observer as observer_module
import streams.eventtime.spec as spec_module
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.eventtime.watermark import FOREVER, NEVER
from tests.agents.delivery.conftest import drained


async def test_activations_of_a_type_share_its_inspection_and_parts_but_not_their_windows(monkeypatch):
    inspected: list[tuple[str, str]] = []
    parts_made = []
    real_inspect, real_parts = observer_module._inspect, spec_module.ProcessorParts

    def counting_inspect(cls, name):
        inspected.append((cls.__name__, name))
        return real_inspect(cls, name)

    class CountingParts(real_parts):
        __slots__ = ()

        def __init__(self, *args, **kwargs):
            parts_made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(observer_module, "_inspect", counting_inspect)
    monkeypatch.setattr(spec_module, "ProcessorParts", CountingParts)

    provider = StreamProvider.memory(queues=1)
    windows: dict[str, list[tuple[float, int]]] = {}
    completed: list[str] = []

    @provider.implicit("devices")
    class Counts:
        event_time = EventTime(OrderingPolicy(out_of_order=5), Tumbling(60), Count())

        def __init__(self, stream_id):
            self.name = stream_id.key
            windows[self.name] = []

        def on_window(self, result):
            windows[self.name].append((result.start, result.value))

        async def on_completed(self):
            completed.append(self.name)

    async with provider:
        a = provider.get_stream(StreamId("devices", "a"))
        b = provider.get_stream(StreamId("devices", "b"))
        await a.on_next_batch(list(range(7)), event_times=[1000.0 + i for i in range(7)])
        await b.on_next_batch(list(range(2)), event_times=[1000.0, 1001.0])
        await drained(provider)
        (agent,) = provider.agents
        activations = {str(act.stream_id): act for act in agent.event_time_activations()}
        assert set(activations) == {"devices/a", "devices/b"}
        act_a, act_b = activations["devices/a"], activations["devices/b"]
        # Open windows: each activation holds its own stream's events only.
        assert act_a.processor.open_windows() == [(None, 960.0, 1020.0)]
        assert act_a.processor.counters.events == 7
        assert act_b.processor.counters.events == 2
        assert act_a.processor._parts is act_b.processor._parts is Counts.event_time.parts()
        assert act_a.processor.counters is not act_b.processor.counters
        await a.on_completed()  # closes a's window only
        with anyio.fail_after(10):
            while "a" not in completed:
                await anyio.sleep(0.01)
        assert windows["a"] == [(960.0, 7)]
        assert windows["b"] == []
        assert act_b.processor.counters.events == 2
        assert act_b.processor.open_windows() == [(None, 960.0, 1020.0)]
        await b.on_completed()
        with anyio.fail_after(10):
            while "b" not in completed:
                await anyio.sleep(0.01)
    assert windows == {"a": [(960.0, 7)], "b": [(960.0, 2)]}
    # Two activations, one inspection: each hook name of the type looked up once.
    counted = [name for cls, name in inspected if cls == "Counts"]
    assert sorted(counted) == ["on_completed", "on_window"]
    assert len(parts_made) == 1


def windowed_count(windows: list[tuple[float, int]], completed: list[str]) -> type:
    """A consumer type of a tumbling 60 s count: its windows' (start, count) and its completed
    streams' keys go to ``windows`` and ``completed``."""

    class Counts:
        event_time = EventTime(OrderingPolicy(out_of_order=5), Tumbling(60), Count())

        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_window(self, result):
            windows.append((result.start, result.value))

        def on_completed(self):
            completed.append(self.key)

    return Counts


# What a quiet windowed activation keeps, in objects the collector tracks: the
# user's instance, its event-time wrapper and processor (flow, input, window store, counters,
# the inputs' tuple), its consumer, turns, the agent's stream state and log fields, the
# cache's cursor and stream entry, its stream id and the last position it took. Its
# declaration's parts (ingest, ordering step, refusals) are shared: one more object here is
# 50-250 bytes more for each of a worker's 100,000 streams. An Ingest,
# ordering step and refusals of each activation's own would be about five more.
OBJECTS_PER_QUIET_ACTIVATION = 16


async def test_a_quiet_windowed_activation_keeps_no_more_objects_than_pinned():
    provider = StreamProvider.memory(queues=2, tune_gc=False)
    windows: list[tuple[float, int]] = []
    completed_streams: list[str] = []
    provider.implicit("devices")(windowed_count(windows, completed_streams))

    async def publish(prefix: str, streams: int) -> None:
        for i in range(streams):
            stream = provider.get_stream(StreamId("devices", f"{prefix}-{i}"))
            await stream.on_next_batch(list(range(10)))
            await stream.on_completed()
        await drained(provider)

    def counted() -> Counter[str]:
        gc.collect()
        return Counter(type(o).__qualname__ for o in gc.get_objects())

    streams = 400
    async with provider:
        await publish("warm-up", 50)  # what the type's first activation makes once
        before = counted()
        await publish("d", streams)
        grown = counted() - before
    assert len(completed_streams) == 50 + streams
    # The cache's batches are the queue's history, kept until the cache needs the room,
    # not the activations' (two a stream here: a batch of events and the completion).
    assert grown.pop("SimpleCachedBatch", 0) <= 2 * streams
    per_activation = sum(grown.values()) / streams
    kept = ", ".join(f"{name} {count}" for name, count in grown.most_common())
    assert per_activation <= OBJECTS_PER_QUIET_ACTIVATION + 0.5, kept


async def test_a_windowed_activation_keeps_its_window_and_watermark_in_its_slots_and_shared_parts():
    # Where a live stream's bytes go (docs/workers.md): an open tumbling window is scheduled on
    # its store's heap alone (no dict of scheduled windows), nothing the activation sets falls
    # outside its slots, and a completed stream's watermark is the shared infinity.
    provider = StreamProvider.memory(queues=1, tune_gc=False)
    windows: list[tuple[float, int]] = []
    completed: list[str] = []
    provider.implicit("devices")(windowed_count(windows, completed))

    async with provider:
        stream = provider.get_stream(StreamId("devices", "a"))
        await stream.on_next_batch([1, 2, 3], event_times=[1000.0, 1001.0, 1019.0])
        await drained(provider)
        (agent,) = provider.agents
        (act,) = agent.event_time_activations()
        store = act.processor._flow.store
        assert act.processor.open_windows() == [(None, 960.0, 1020.0)]
        assert store._scheduled is None and len(store._due) == 1
        assert getattr(act, "__dict__", {}) == {}
        assert act.processor.watermark == 1014.0
        await stream.on_next_batch([4], event_times=[1030.0])  # the window [960, 1020) closes
        await drained(provider)
        assert windows == [(960.0, 3)]
        assert act.processor.open_windows() == [(None, 1020.0, 1080.0)]
        assert store._scheduled is None and len(store._due) == 1
        await stream.on_completed()
        with anyio.fail_after(10):
            while not completed:
                await anyio.sleep(0.01)
        assert windows == [(960.0, 3), (1020.0, 1)]
        assert store._due is None and store._scheduled is None
        # The shared infinities (watermark.FOREVER, NEVER), not floats of the activation's own.
        assert act.processor.watermark is FOREVER
        assert any(act._last_watermark is shared for shared in (NEVER, FOREVER))
        assert getattr(act, "__dict__", {}) == {}
