"""streams.testing: a worker on memory queues with a processing clock the test moves."""

from __future__ import annotations

import anyio
import pytest

from agents.event_time_observer import EventTimeObserver
from spark_sink import EventHandoff, Handoff
from streams import StreamId, StreamProvider
from streams.core.errors import ConfigurationError
from streams.eventtime import Count, EventTime, OrderingPolicy, Sum, Tumbling
from streams.testing import Harness

TOLLS = StreamId("tolls", "b-1")


class Totals:
    event_time = EventTime(
        OrderingPolicy(timestamp_by="time", out_of_order=5, late_arrival=60, action="adjust"),
        Tumbling(60),
        Sum(),
        select="toll",
    )

    def __init__(self, stream_id):
        self.stream_id = stream_id

    async def on_window(self, result):
        pass


async def _scenario() -> tuple[list[tuple[object, ...]], list[str], dict[StreamId, float]]:
    harness = Harness()
    harness.implicit("tolls")(Totals)
    async with harness:
        await harness.publish(TOLLS, {"time": 10, "toll": 1.0}, {"time": 55, "toll": 2.0}, at=56)
        await harness.publish(TOLLS, {"time": 20, "toll": 4.0}, at=57)  # below W=50: adjusted to 50
        await harness.publish("tolls/b-2", {"time": -100, "toll": 8.0}, at=58)  # 158 s late: adjusted
        await harness.publish(TOLLS, {"time": "soon", "toll": 1.0}, at=59)
        await harness.advance(100)
        windows = [(str(w.key), w.start, w.end, w.value, w.closed_at) for w in harness.windows(Totals)]
        return windows, [x.reason for x in harness.dead_letters()], harness.watermarks(Totals)


async def test_windows_letters_and_watermarks_follow_the_moved_clock():
    windows, reasons, watermarks = await _scenario()
    # b-1: [0, 60) holds 1 + 2 + 4 (the out-of-order toll adjusted into it); b-2's toll is
    # adjusted to 58 - 60 = -2: window [-60, 0). Both close when the tick at 159 moves the
    # watermark to 99.
    assert sorted(windows) == [("None", -60.0, 0.0, 8.0, 159.0), ("None", 0.0, 60.0, 7.0, 159.0)]
    assert reasons == ["invalid_timestamp"]
    assert watermarks == {TOLLS: 99.0, StreamId("tolls", "b-2"): 99.0}


async def test_the_same_test_gives_the_same_result_every_run():
    first = await _scenario()
    for _ in range(3):
        assert await _scenario() == first


def test_runs_under_plain_anyio_run():
    windows, reasons, _ = anyio.run(_scenario)
    assert len(windows) == 2 and reasons == ["invalid_timestamp"]


async def test_nothing_closes_before_the_clock_says_so():
    harness = Harness()
    harness.implicit("tolls")(Totals)
    async with harness:
        await harness.publish(TOLLS, {"time": 10, "toll": 1.0}, at=10)
        await harness.advance(109)  # clock 119: watermark 59, the window [0, 60) still open
        assert harness.windows(Totals) == []
        await harness.advance(1)  # clock 120: watermark 60
        assert [(w.value, w.closed_at) for w in harness.windows(Totals)] == [(1.0, 120.0)]


async def test_an_idle_timeout_fires_at_the_processing_time_it_falls_due():
    class Idle:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(60, idle_timeout=30), Count())

        def __init__(self, stream_id): ...

        def on_window(self, result): ...

    harness = Harness(start=1000)
    harness.implicit("sensors")(Idle)
    async with harness:
        await harness.publish("sensors/s", {"t": 1010}, at=1010)  # [960, 1020) closes at 1020 + 30
        await harness.advance_to(1049)
        assert harness.windows(Idle) == []
        # An event arriving at the very instant the timeout falls due is ingested first, and
        # the timeout counts from it: max(1020, 1050) + 30.
        await harness.publish("sensors/s", {"t": 1015}, at=1050)
        assert harness.windows(Idle) == []
        await harness.advance(29)
        assert harness.windows(Idle) == []
        await harness.advance(1)
        assert [(w.start, w.value, w.closed_at) for w in harness.windows(Idle)] == [(960.0, 2, 1080.0)]


async def test_arrival_times_are_the_clock_s():
    harness = Harness(start=500)
    seen = []
    async with harness:
        await harness.subscribe("x/1", seen.extend)
        await harness.publish("x/1", "a", "b", at=512.5)
        await harness.publish("x/1", "c")
    assert [(e.value, e.arrival_time) for e in seen] == [("a", 512.5), ("b", 512.5), ("c", 512.5)]


async def test_the_clock_never_goes_back():
    async with Harness(start=100) as harness:
        with pytest.raises(ValueError, match="never goes back: it is at 100.0, not 99"):
            await harness.publish("x/1", 1, at=99)
        with pytest.raises(ValueError, match="never goes back"):
            await harness.advance(-1)


async def test_handed_off_rows_are_what_spark_reads_and_refusals_are_dead_letters():
    class Handed:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count(), group_by="booth")
        handoff = Handoff("counts", {"n": "bigint"})

        def __init__(self, stream_id): ...

    class Passages:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"))
        handoff = EventHandoff("passages", {"booth": "string", "toll": "double"})

        def __init__(self, stream_id): ...

    harness = Harness(start=0)
    harness.implicit("tolls")(Handed)
    harness.implicit("tolls")(Passages)
    async with harness:
        await harness.publish(TOLLS, {"t": 1, "booth": "A", "toll": 1.5}, {"t": 2, "booth": "B", "toll": "x"}, at=2)
        await harness.complete(TOLLS)
        rows = harness.handed_off("counts")
        assert sorted((r["key"], r["n"], r["window_end"].timestamp()) for r in rows) == [("A", 1, 10.0), ("B", 1, 10.0)]
        assert [(r["booth"], r["toll"]) for r in harness.handed_off("passages")] == [("A", 1.5)]
        [refused] = harness.dead_letters("handoff_failed")
        assert refused.value["booth"] == "B" and "passages" in refused.detail
        with pytest.raises(
            ConfigurationError, match="hands off to 'nope'; handoff streams: \\['counts', 'passages'\\]"
        ):
            harness.handed_off("nope")


async def test_a_consumer_that_raises_is_dead_lettered_at_once_with_its_traceback():
    class Broken:
        def __init__(self, stream_id):
            self.seen = 0

        async def on_next(self, batch):
            self.seen += len(batch)
            if any(v < 0 for v in batch.values):
                raise ValueError("negative reading")

        async def on_error(self, exc): ...

    harness = Harness()
    harness.implicit("readings")(Broken)
    async with harness:
        await harness.publish("readings/r", 1, 2)
        await harness.publish("readings/r", -1)
        await harness.publish("readings/r", 3)
        [letter] = harness.dead_letters()
        assert letter.reason == "delivery_failed" and letter.stream == "readings/r"
        assert "ValueError: negative reading" in letter.detail
        [errors] = [e.value for e in harness.emitted(Broken, "on_error")]
        assert isinstance(errors, Exception)
        [instance] = harness.instances(Broken).values()
        assert instance.seen == 4  # 1, 2, then -1 once (no redelivery), then 3


async def test_hooks_of_its_own_are_recorded_by_name_with_their_stream():
    class Merged:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"), imports={"prices": "tolls"}
        )

        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_events(self, outcomes):
            for o in outcomes:
                self.on_pair(o.record.stream_id.namespace, o.timestamp)

        def on_pair(self, namespace, timestamp):  # a hook of the consumer's own
            pass

    harness = Harness(queues=4)  # the decorator co-partitions tolls and prices
    harness.implicit("tolls", "prices")(Merged)
    async with harness:
        await harness.publish("prices/k", {"t": 1}, at=5)
        await harness.publish("tolls/k", {"t": 2}, {"t": 3}, at=6)
        await harness.complete("tolls/k")
        await harness.complete("prices/k")
        pairs = harness.emitted(Merged, "on_pair", "tolls/k")
        assert [e.value for e in pairs] == [("prices", 1.0), ("tolls", 2.0), ("tolls", 3.0)]
        assert {e.stream_id for e in pairs} == {StreamId("tolls", "k")}


async def test_it_runs_the_worker_s_own_activations_and_the_app_s_registrations():
    app = StreamProvider.memory(queues=8)
    app.implicit("tolls")(Totals)
    async with Harness(app) as harness:
        await harness.publish(TOLLS, {"time": 1, "toll": 1.0}, at=1)
        [activation] = [a for agent in harness.provider.agents for a in agent.event_time_activations()]
        assert isinstance(activation, EventTimeObserver) and isinstance(activation.target, Totals)
        assert harness.instances(Totals) == {TOLLS: activation.target}
    with pytest.raises(ConfigurationError, match="not a consumer type this harness runs"):
        harness.windows(Count)


async def test_a_failed_assertion_in_the_block_is_raised_as_itself():
    with pytest.raises(AssertionError, match="the test's own"):
        async with Harness() as harness:
            await harness.publish("x/1", 1)
            raise AssertionError("the test's own")


async def test_slotted_types_and_durable_subscriptions_run_too():
    class Slotted:
        __slots__ = ("n",)
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())

        def __init__(self, stream_id):
            self.n = 0

        def on_window(self, result):
            self.n += 1

    class Durable:
        def __init__(self, stream_id):
            self.seen = []

        async def on_next(self, batch):
            self.seen.extend(batch.values)

        async def on_completed(self): ...

    harness = Harness()
    harness.implicit("tolls")(Slotted)
    harness.consumer()(Durable)
    async with harness:
        await harness.subscribe("other/x", Durable)
        await harness.publish("other/x", "a", "b")
        await harness.publish(TOLLS, {"t": 1}, {"t": 12})
        await harness.complete("other/x")
        assert [(w.start, w.value) for w in harness.windows(Slotted)] == [(0.0, 1)]
        [slotted] = harness.instances(Slotted).values()
        assert slotted.n == 1
        [durable] = harness.instances(Durable).values()
        assert durable.seen == ["a", "b"]
        assert [e.stream_id for e in harness.emitted(Durable, "on_completed")] == [StreamId("other", "x")]
