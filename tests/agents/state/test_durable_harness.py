"""Durable fields and timers through the harness: what a user's own test of a consumer sees
across ``await harness.restart()``."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from spark_sink import EventHandoff
from streams import Durable, StreamId, Timer, Timers
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.testing import Harness
from tests.end_to_end.durable.orders_app import AlertToSpark

ANN = StreamId("orders", "ann")


class ThirdOrderAlert:
    """The issue's consumer: alerts on a user's third order, with a running total."""

    orders = Durable(0)
    total = Durable(0.0)
    alerts: list[tuple[str, int, float]] = []  # what it "sent", across instances

    def __init__(self, stream_id: StreamId) -> None:
        self.user = stream_id.key

    def on_next(self, batch: Any) -> None:
        for event in batch:
            self.orders += 1
            self.total += event.value["amount"]
            if self.orders == 3:
                ThirdOrderAlert.alerts.append((self.user, self.orders, self.total))


@pytest.fixture(autouse=True)
def _clear() -> None:
    ThirdOrderAlert.alerts.clear()


async def test_fields_survive_a_restart_and_the_alert_fires_once() -> None:
    async with Harness() as harness:
        harness.implicit("orders")(ThirdOrderAlert)
        await harness.publish("orders/ann", {"amount": 10.0}, {"amount": 20.0})
        await harness.publish("orders/bob", {"amount": 1.0})
        before = harness.instances(ThirdOrderAlert)[ANN]
        await harness.restart()
        assert harness.instances(ThirdOrderAlert) == {}  # nothing active until their next events
        await harness.publish("orders/ann", {"amount": 5.0})
        after = harness.instances(ThirdOrderAlert)[ANN]
        assert after is not before
        assert (after.orders, after.total) == (3, 35.0)  # type: ignore[attr-defined]
        assert ThirdOrderAlert.alerts == [("ann", 3, 35.0)]
        await harness.restart()
        await harness.publish("orders/bob", {"amount": 2.0})
        bob = harness.instances(ThirdOrderAlert)[StreamId("orders", "bob")]
        assert (bob.orders, bob.total) == (2, 3.0)  # type: ignore[attr-defined]


async def test_a_callable_default_is_made_per_activation() -> None:
    class Seen:
        ids = Durable(dict)
        tags = Durable([])  # a value default is copied, never shared

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            for event in batch:
                self.ids[event.value["id"]] = event.value["t"]
                self.tags.append(event.value["id"])

    async with Harness() as harness:
        harness.implicit("orders")(Seen)
        await harness.publish("orders/ann", {"id": "o1", "t": 1}, {"id": "o2", "t": 2})
        await harness.publish("orders/bob", {"id": "o9", "t": 9})
        await harness.restart()
        await harness.publish("orders/ann", {"id": "o3", "t": 3})
        found = harness.instances(Seen)
        assert found[ANN].ids == {"o1": 1, "o2": 2, "o3": 3}  # type: ignore[attr-defined]
        assert found[ANN].tags == ["o1", "o2", "o3"]  # type: ignore[attr-defined]
        await harness.publish("orders/bob", {"id": "o8", "t": 8})
        assert harness.instances(Seen)[StreamId("orders", "bob")].tags == ["o9", "o8"]  # type: ignore[attr-defined]


async def test_a_value_msgpack_cannot_save_is_refused_clearly_and_nothing_is_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Sets:
        seen = Durable(dict)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            for event in batch:
                self.seen[event.value] = {event.value}  # a set: not encodable

    async with Harness() as harness:
        harness.implicit("orders")(Sets)
        with caplog.at_level(logging.WARNING):
            await harness.publish("orders/ann", "a", "b")
            await harness.publish("orders/ann", "c")
        refusals = [m for m in caplog.messages if "cannot save" in m]
        assert len(refusals) == 1, refusals  # once, not at every checkpoint
        assert "Sets.seen holds a set" in refusals[0] and "sorted list" in refusals[0]
        # Its state holds the checkpoint: the agent acknowledged none of its records.
        (agent,) = harness.provider.agents
        assert agent._holds.oldest() == 0


async def test_an_event_time_consumer_keeps_its_fields_beside_its_windows() -> None:
    class Totals:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
        closed = Durable(0)
        biggest = Durable(0)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_window(self, result: Any) -> None:
            self.closed += 1
            self.biggest = max(self.biggest, result.value)

    async with Harness() as harness:
        harness.implicit("sensors")(Totals)
        await harness.publish("sensors/a", {"t": 1}, {"t": 2}, {"t": 12}, at=20)  # [0, 10) closes
        await harness.restart()
        await harness.publish("sensors/a", {"t": 13}, {"t": 25}, at=30)  # [10, 20) closes with 2
        (instance,) = harness.instances(Totals).values()
        assert (instance.closed, instance.biggest) == (2, 2)  # type: ignore[attr-defined]
        assert [(w.start, w.value) for w in harness.windows(Totals)] == [(0.0, 2), (10.0, 2)]


class Reminder:
    """Timers of both kinds, named; on_timer counts into a durable field."""

    event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
    timers = Timers()
    fired = Durable(list)

    def __init__(self, stream_id: StreamId) -> None: ...

    def on_next_value(self, value: Any) -> None: ...

    def on_window(self, result: Any) -> None:
        self.fired.append(["window", result.end])
        if result.end == 10.0:
            self.timers.at_event_time(15.0, "mid")
            self.timers.at_event_time(20.0, "end")  # ties with the window [10, 20): after it
            self.timers.at_processing_time(100.0, "wake")

    def on_timer(self, timer: Timer) -> None:
        self.fired.append([timer.name, timer.time])


async def test_timers_fire_in_order_with_windows_and_survive_a_restart() -> None:
    async with Harness() as harness:
        harness.implicit("sensors")(Reminder)
        await harness.publish("sensors/a", {"t": 1}, {"t": 11}, at=20)  # [0, 10) closes, timers set
        (instance,) = harness.instances(Reminder).values()
        assert instance.fired == [["window", 10.0]]  # type: ignore[attr-defined]
        await harness.restart()
        await harness.publish("sensors/a", {"t": 30}, at=40)  # W = 30: mid (15), [10, 20), end (20)
        (instance,) = harness.instances(Reminder).values()
        assert instance.fired == [  # type: ignore[attr-defined]
            ["window", 10.0],
            ["mid", 15.0],
            ["window", 20.0],
            ["end", 20.0],
        ]
        await harness.restart()
        await harness.publish("sensors/a", {"t": 31}, at=50)
        await harness.advance_to(99)
        (instance,) = harness.instances(Reminder).values()
        assert instance.fired[-1] == ["end", 20.0]  # type: ignore[attr-defined]
        await harness.advance_to(100)
        assert instance.fired[-1] == ["wake", 100.0]  # type: ignore[attr-defined]
        await harness.advance_to(200)
        assert [f for f in instance.fired if f[0] == "wake"] == [["wake", 100.0]]  # type: ignore[attr-defined]


async def test_a_raising_on_timer_is_dead_lettered_and_the_stream_goes_on() -> None:
    class Flaky:
        timers = Timers()
        count = Durable(0)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)
            self.timers.at_processing_time(10.0, "boom")

        def on_timer(self, timer: Timer) -> None:
            raise RuntimeError("no")

    async with Harness() as harness:
        harness.implicit("orders")(Flaky)
        await harness.publish("orders/ann", 1, at=1)
        await harness.advance_to(10)
        (letter,) = harness.dead_letters("timer_failed")
        assert letter.value == {
            "consumer": letter.value["consumer"],
            "name": "boom",
            "time": 10.0,
            "kind": "processing",
        }
        assert "RuntimeError: no" in letter.detail
        await harness.publish("orders/ann", 2, 3, at=11)
        assert harness.instances(Flaky)[ANN].count == 3  # type: ignore[attr-defined]


async def test_a_processing_timer_of_an_inactive_activation_fires_after_a_restart() -> None:
    class Ping:
        timers = Timers()
        pings = Durable(list)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            self.timers.at_processing_time(100.0, "ping")

        def on_timer(self, timer: Timer) -> None:
            self.pings.append(timer.time)

    async with Harness() as harness:
        harness.implicit("orders")(Ping)
        await harness.publish("orders/ann", 1, at=1)
        await harness.restart()
        assert harness.instances(Ping) == {}  # nothing published since: not active
        await harness.advance_to(99)
        assert harness.instances(Ping) == {}
        await harness.advance_to(100)  # woken by its saved timer, with no data
        assert harness.instances(Ping)[ANN].pings == [100.0]  # type: ignore[attr-defined]
        await harness.restart()
        await harness.advance_to(500)
        assert harness.instances(Ping) == {}  # fired once: nothing left to wake it


async def test_on_events_filters_a_single_input_handoff_and_held_events_survive_a_restart() -> None:
    harness = Harness()
    harness.implicit("orders")(AlertToSpark)  # before it starts: its handoff opens then
    async with harness:
        # W = 20 - 5: t=10 is released (and counted), t=20 held for the watermark
        await harness.publish("orders/ann", {"t": 10, "amount": 1.0}, {"t": 20, "amount": 2.0}, at=20)
        assert harness.handed_off("alerts") == []
        await harness.restart()  # the held event (t=20) and the fields are in the saved unit
        await harness.publish("orders/ann", {"t": 30, "amount": 4.0}, {"t": 40, "amount": 8.0}, at=40)
        rows = harness.handed_off("alerts")
        assert [(r["stream_id"], r["user"], r["total"]) for r in rows] == [("orders/ann", "ann", 7.0)]
        (instance,) = harness.instances(AlertToSpark).values()
        assert (instance.orders, instance.total) == (3, 7.0)  # type: ignore[attr-defined]
        await harness.complete("orders/ann")  # t=40 released: no alert (its 4th order)
        assert len(harness.handed_off("alerts")) == 1


async def test_on_events_returning_what_it_was_not_given_is_refused_clearly() -> None:
    class Wrong:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"))
        handoff = EventHandoff("wrong", {"t": "double"})

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_events(self, events: list[Any]) -> list[Any]:
            return ["not an outcome"]

    harness = Harness()
    harness.implicit("orders")(Wrong)
    async with harness:
        await harness.publish("orders/ann", {"t": 1})
        assert harness.handed_off("wrong") == []
        (letter,) = harness.dead_letters("delivery_failed")
        assert "on_events returned 'not an outcome', not one of the events it was given" in letter.detail


async def test_a_durable_subscriptions_consumer_keeps_its_fields_across_a_restart() -> None:
    class Tally:
        seen = Durable(0)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            self.seen += len(batch)

    harness = Harness()
    harness.consumer("Tally")(Tally)
    async with harness:
        await harness.subscribe("orders/ann", Tally)  # an explicit, durable subscription
        await harness.publish("orders/ann", 1, 2)
        await harness.restart()
        await harness.publish("orders/ann", 3)
        assert harness.instances(Tally)[ANN].seen == 3  # type: ignore[attr-defined]


async def test_a_batch_given_up_does_not_hold_the_checkpoint_and_the_state_is_saved_past_it() -> None:
    class Picky:
        taken = Durable(list)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            if "bad" in batch.values:
                raise ValueError("bad value")
            self.taken.extend(batch.values)

    async with Harness() as harness:
        harness.implicit("orders")(Picky)
        await harness.publish("orders/ann", "a")
        await harness.publish("orders/ann", "bad")  # its last batch: nothing comes after it
        (letter,) = harness.dead_letters("delivery_failed")
        assert letter.value == "bad"
        (agent,) = harness.provider.agents
        assert agent._holds.oldest() is None  # white-box: given up, it holds nothing
        await harness.restart()
        await harness.publish("orders/ann", "c")
        assert harness.instances(Picky)[ANN].taken == ["a", "c"]  # type: ignore[attr-defined]
        assert len(harness.dead_letters("delivery_failed")) == 1  # not replayed after the restart


async def test_on_next_waits_for_a_firing_timer_and_no_save_is_taken_meanwhile() -> None:
    import anyio

    from agents.durable import DurableActivation
    from streams.backends.memory.stores import MemoryDeadLetterStore
    from streams.core.batch import BatchContainer, BatchKind
    from streams.core.observer import as_observer

    release = anyio.Event()
    order: list[str] = []

    class Slow:
        timers = Timers()
        log = Durable(list)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            order.append("on_next")
            self.log.append("event")

        async def on_timer(self, timer: Timer) -> None:
            order.append("on_timer begins")
            await release.wait()
            self.log.append("timer")
            order.append("on_timer ends")

    activation = DurableActivation(as_observer(Slow(ANN)), ANN, MemoryDeadLetterStore())
    activation.enable_snapshots()
    activation.target.timers.at_processing_time(5.0, "t")  # type: ignore[attr-defined]
    batch = BatchContainer(ANN, BatchKind.DATA, 0.0, [1]).events(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(activation.on_tick, 5.0)
        await anyio.sleep(0.01)
        pending = activation.take_now(batch)  # the timer's turn: it waits
        assert pending is not None and order == ["on_timer begins"]
        assert activation.stepping()  # no save of a half-fired timer
        tg.start_soon(lambda: pending)  # type: ignore[arg-type,return-value]
        release.set()
    assert order == ["on_timer begins", "on_timer ends", "on_next"]
    assert activation.target.log == ["timer", "event"]  # type: ignore[attr-defined]
    assert not activation.stepping()


async def test_a_windowless_merge_of_two_inputs_keeps_its_held_events_and_fields_across_a_restart() -> None:
    released: list[tuple[str, float]] = []

    class Merged:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("clicks", "views"))
        seen = Durable(0)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_events(self, events: list[Any]) -> None:
            for event in events:
                self.seen += 1
                released.append((event.record.stream_id.namespace, event.timestamp))

    async with Harness(co_partitioned=[("clicks", "views")]) as harness:
        harness.implicit("clicks", "views")(Merged)
        await harness.publish("clicks/u", {"t": 10}, {"t": 30})
        await harness.publish("views/u", {"t": 20})  # merged W = 20: clicks 10, views 20 go
        assert released == [("clicks", 10.0), ("views", 20.0)]
        await harness.restart()  # clicks 30 is held: saved with the merge's watermarks
        await harness.publish("views/u", {"t": 40})  # W = min(30, 40) = 30
        assert released == [("clicks", 10.0), ("views", 20.0), ("clicks", 30.0)]
        (instance,) = harness.instances(Merged).values()
        assert instance.seen == 3  # type: ignore[attr-defined]


async def test_a_plain_type_fed_by_several_namespaces_keeps_its_fields_per_key_across_a_restart() -> None:
    class Basket:
        items = Durable(list)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            for event in batch:
                self.items.append(f"{event.stream_id.namespace}:{event.value}")

    async with Harness(co_partitioned=[("adds", "removes")]) as harness:
        harness.implicit("adds", "removes")(Basket)
        await harness.publish("adds/u1", "apple", "pear")
        await harness.publish("removes/u1", "pear")
        await harness.publish("adds/u2", "fig")
        await harness.restart()
        await harness.publish("removes/u1", "apple")
        await harness.publish("adds/u2", "kiwi")
        found = {sid.key: instance.items for sid, instance in harness.instances(Basket).items()}  # type: ignore[attr-defined]
        assert found["u1"] == ["adds:apple", "adds:pear", "removes:pear", "removes:apple"]
        assert found["u2"] == ["adds:fig", "adds:kiwi"]
