"""Event-time consumers in the runtime: declared policy and window, results with bounds and
key, dead letters in the store, ticks for silent streams, checkpoints held by open windows."""

from __future__ import annotations

import anyio
import pytest

from streams import ConfigurationError, StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Sum, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0  # event times in the tests: seconds after T0


async def test_windowed_consumer_gets_results_with_bounds_and_keys_and_dead_letters_are_stored():
    provider = StreamProvider.memory(queues=2)
    results: list = []

    @provider.implicit("tolls")
    class BoothTotals:
        event_time = EventTime(
            OrderingPolicy(out_of_order=5, timestamp_by="t", action="drop"),
            Tumbling(60, origin=T0),
            Sum(),
            group_by="booth",
            select="toll",
        )

        def __init__(self, stream_id):
            self.stream_id = stream_id

        async def on_window(self, result):
            results.append((self.stream_id.key, result.key, result.start - T0, result.end - T0, result.value))

    stream = provider.get_stream(StreamId("tolls", "plaza-1"))
    readings = [  # (event time offset, booth, toll)
        (1, "a", 2.0),
        (10, "b", 3.0),
        (30, "a", 4.0),
        (59, "b", 1.0),
        (61, "a", 5.0),  # watermark 56: nothing closes yet
        (50, "a", 100.0),  # 6 s below the watermark (56): out of order beyond 5 s -> dropped
        (70, "b", 6.0),  # watermark 65 >= 60: window [0, 60) closes for both booths
    ]
    async with provider:
        for offset, booth, toll in readings:
            await stream.on_next({"t": T0 + offset, "booth": booth, "toll": toll})
        await drained(provider)
        letters = await provider.dead_letters.list(reason="out_of_order")
        await stream.on_completed()  # a final +infinity watermark closes the rest
        await drained(provider)
    assert results == [
        ("plaza-1", "a", 0, 60, 6.0),
        ("plaza-1", "b", 0, 60, 4.0),
        ("plaza-1", "a", 60, 120, 5.0),
        ("plaza-1", "b", 60, 120, 6.0),
    ]
    assert [(d.reason, d.value["toll"]) for d in letters] == [("out_of_order", 100.0)]


async def test_silent_stream_advances_by_ticks_with_late_arrival():
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=0.02)
    results: list = []

    @provider.implicit("quiet")
    class Counts:
        # Event time is the arrival time; with late_arrival the watermark follows the
        # processing clock even when nothing arrives.
        event_time = EventTime(OrderingPolicy(late_arrival=0.05), Tumbling(0.1), Count())

        def __init__(self, stream_id):
            pass

        async def on_window(self, result):
            results.append(result.value)

    async with provider:
        await provider.get_stream(StreamId("quiet", "q")).on_next_batch(["x", "y", "z"])
        with anyio.fail_after(5):
            while not results:  # no more input: only ticks can close the window
                await anyio.sleep(0.02)
    assert results == [3]


async def test_open_window_holds_the_checkpoint_until_it_closes():
    provider = StreamProvider.memory(queues=1)
    closed: list = []

    @provider.implicit("held")
    class Counts:
        event_time = EventTime(OrderingPolicy(), Tumbling(10, origin=0), Count())

        def __init__(self, stream_id):
            pass

        async def on_window(self, result):
            closed.append((result.start, result.value))

    stream = provider.get_stream(StreamId("held", "h"))
    async with provider:
        agent = provider.agents[0]
        adapter = provider._adapter
        for t in (1.0, 2.0, 3.0):
            await stream.on_next("e", event_time=t)
        await drained(provider)
        assert closed == [] and adapter.delivered(agent.queue) == 0  # all three sit in [0, 10)
        await stream.on_next("e", event_time=12.0)  # closes [0, 10)
        await drained(provider)
        assert closed == [(0.0, 3)]
        assert adapter.delivered(agent.queue) == 3  # acked up to the event now holding [10, 20)


def test_consumer_type_without_on_window_is_refused_at_registration():
    provider = StreamProvider.memory(queues=1)
    with pytest.raises(ConfigurationError, match="with a window: it needs on_window"):

        @provider.implicit("bad")
        class NoHandler:
            event_time = EventTime(OrderingPolicy(), Tumbling(10), Count())

            def __init__(self, stream_id):
                pass

    with pytest.raises(ConfigurationError, match="without a window: it needs on_events"):

        @provider.consumer()
        class NoEvents:
            event_time = EventTime(OrderingPolicy())

            def __init__(self, stream_id):
                pass


async def test_consumer_without_window_gets_events_with_their_timestamps():
    provider = StreamProvider.memory(queues=1)
    seen: list = []

    @provider.implicit("ordered")
    class Ordered:
        event_time = EventTime(OrderingPolicy(out_of_order=0))  # adjust: late ones move up

        def __init__(self, stream_id):
            pass

        def on_events(self, outcomes):
            seen.extend((o.record.value, o.timestamp, o.status) for o in outcomes)

    stream = provider.get_stream(StreamId("ordered", "o"))
    async with provider:
        for value, t in (("a", 10.0), ("b", 12.0), ("c", 11.0)):
            await stream.on_next(value, event_time=t)
        await drained(provider)
    assert seen == [("a", 10.0, "kept"), ("b", 12.0, "kept"), ("c", 12.0, "adjusted")]


async def test_on_window_as_the_type_has_it_async_or_as_an_instance_sets_its_own():
    # The type's own method is kept once per type and bound when called; an instance's own
    # callable (set in its constructor) is what is called for that instance.
    provider = StreamProvider.memory(queues=1)
    got: list = []

    @provider.implicit("plain")
    class Plain:
        event_time = EventTime(OrderingPolicy(), Tumbling(10), Count())

        def __init__(self, stream_id):
            self.name = stream_id.key
            if stream_id.key == "own":
                self.on_window = lambda result: got.append(("own", result.value))

        def on_window(self, result):
            got.append((self.name, result.value))

        def on_completed(self):
            got.append((self.name, "completed"))

    @provider.implicit("asynchronous")
    class Asynchronous:
        event_time = EventTime(OrderingPolicy(), Tumbling(10), Count())

        def __init__(self, stream_id):
            self.name = f"async {stream_id.key}"

        async def on_window(self, result):
            await anyio.sleep(0)
            got.append((self.name, result.value))

    async with provider:
        for sid, n in ((StreamId("plain", "a"), 2), (StreamId("plain", "own"), 3), (StreamId("asynchronous", "b"), 4)):
            stream = provider.get_stream(sid)
            await stream.on_next_batch(list(range(n)))
            await stream.on_completed()
        await drained(provider)
    assert sorted(got, key=str) == sorted(
        [("a", 2), ("a", "completed"), ("own", 3), ("own", "completed"), ("async b", 4)], key=str
    )
