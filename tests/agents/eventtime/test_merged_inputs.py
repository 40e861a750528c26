"""Several inputs, one clock: one activation per key over tolls and prices, the
merged watermark, hold-back by a silent input, imported watermarks, release in event-time
order, and the checkpoint held by what the merge holds back."""

from __future__ import annotations

import dataclasses
import time

import anyio
import pytest

from spark_sink import EventHandoff
from streams import ConfigurationError, StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy, Sum, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0


def _priced_tolls(provider: StreamProvider, spec: EventTime, log: list, tokens: dict | None = None):
    @provider.implicit("tolls", "prices")
    class PricedTolls:
        event_time = spec

        def __init__(self, stream_id):
            self.stream_id = stream_id
            self.price = None

        def on_events(self, events):
            for e in events:
                ns = e.record.stream_id.namespace
                if ns == "prices":
                    self.price = e.record.value["price"]
                    log.append(("price", e.timestamp - T0, self.price))
                else:
                    log.append(("toll", e.timestamp - T0, e.record.value["n"], self.price))
                if tokens is not None:
                    tokens[(ns, e.record.value.get("n", e.record.value.get("price")))] = e.record.token

    return PricedTolls


def _activation(provider: StreamProvider):
    [activation] = [a for agent in provider.agents for a in agent.event_time_activations()]
    return activation


async def _publish(provider, namespace, key, offset, **value):
    await provider.get_stream(StreamId(namespace, key)).on_next({"t": T0 + offset, **value})


async def _price_then_tolls(provider: StreamProvider) -> None:
    """A price of 10 at 0, then tolls n = 0..3 at 1, 2, 5 and 8 s, all of booth b1."""
    await _publish(provider, "prices", "b1", 0, price=10.0)
    for n, offset in enumerate([1, 2, 5, 8]):
        await _publish(provider, "tolls", "b1", offset, n=n)
    await drained(provider)


async def test_silent_prices_hold_tolls_back_until_they_pass_them():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("tolls", "prices")])
    log: list = []
    tokens: dict = {}
    spec = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"))
    _priced_tolls(provider, spec, log, tokens)
    async with provider:
        await _price_then_tolls(provider)
        await anyio.sleep(0.3)  # ticks: without late_arrival they move nothing
        activation = _activation(provider)
        # prices stand at 0: only the price is released; every toll is held
        assert log == [("price", 0, 10.0)]
        m = activation.processor.metrics()
        assert m.holder == "prices" and m.watermarks == {"tolls": T0 + 8, "prices": T0}
        holds = [activation.checkpoint_hold()]  # the held tolls hold the checkpoint

        await _publish(provider, "prices", "b1", 6, price=12.0)  # prices pass 1, 2, 5 (and 6)
        await drained(provider)
        assert log[1:] == [
            ("toll", 1, 0, 10.0),
            ("toll", 2, 1, 10.0),
            ("toll", 5, 2, 10.0),
            ("price", 6, 12.0),
        ]
        holds.append(activation.checkpoint_hold())
        await provider.get_stream(StreamId("prices", "b1")).on_completed()  # +inf: tolls hold now
        await drained(provider)
        holds.append(activation.checkpoint_hold())
    assert log[-1] == ("toll", 8, 3, 12.0) and len(log) == 6  # each event once
    # at the oldest held toll, then at the one still held, then nothing
    assert holds == [tokens[("tolls", 0)], tokens[("tolls", 3)], None]


async def test_late_arrival_moves_a_silent_input_and_releases_the_tolls():
    provider = StreamProvider.memory(queues=1, co_partitioned=[("tolls", "prices")], get_queue_msgs_timer_period=0.02)
    released: list = []

    @provider.implicit("tolls", "prices")
    class Tolls:
        # event time is the arrival time; prices never publish: L lets ticks move them
        event_time = EventTime(OrderingPolicy(late_arrival=0.2), inputs=("tolls", "prices"))

        def __init__(self, stream_id):
            pass

        def on_events(self, events):
            released.extend(e.record.value for e in events)

    async with provider:
        stream = provider.get_stream(StreamId("tolls", "b1"))
        for n in range(3):
            await stream.on_next(n)
        with anyio.fail_after(5):
            while len(released) < 3:
                await anyio.sleep(0.02)
        m = _activation(provider).processor.metrics()
    assert released == [0, 1, 2]
    assert m.watermarks["prices"] > time.time() - 5  # moved by the clock, not by events


async def test_imported_prices_follow_tolls_so_tolls_flow_with_no_new_price():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("tolls", "prices")])
    log: list = []
    tokens: dict = {}
    spec = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"), imports={"prices": "tolls"})
    _priced_tolls(provider, spec, log, tokens)
    async with provider:
        await _price_then_tolls(provider)
        activation = _activation(provider)
        m = activation.processor.metrics()
        # the price in force holds the checkpoint (a restart replays it before the tolls)
        hold = activation.checkpoint_hold()
    assert log == [
        ("price", 0, 10.0),
        ("toll", 1, 0, 10.0),
        ("toll", 2, 1, 10.0),
        ("toll", 5, 2, 10.0),
        ("toll", 8, 3, 10.0),
    ]
    assert m.watermarks == {"tolls": T0 + 8, "prices": T0 + 8}
    assert hold == tokens[("prices", 10.0)]


async def test_windows_over_merged_inputs_close_by_the_slower_input():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("tolls", "fees")])
    results: list = []

    @provider.implicit("tolls", "fees")
    class Revenue:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t"),
            Tumbling(10, origin=T0),
            Sum(),
            select="amount",
            inputs=("tolls", "fees"),
        )

        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_window(self, result):
            results.append((self.key, result.start - T0, result.value))

    async with provider:
        for offset, amount in [(1, 2.0), (4, 3.0), (12, 5.0), (25, 1.0)]:
            await _publish(provider, "tolls", "p", offset, amount=amount)
        await _publish(provider, "fees", "p", 3, amount=0.5)
        await drained(provider)
        assert results == []  # fees stand at 3: no window closes
        await _publish(provider, "fees", "p", 21, amount=0.25)  # both past 20
        await drained(provider)
    assert results == [("p", 0, 5.5), ("p", 10, 5.0)]


async def test_a_failed_window_of_a_merged_activation_costs_that_window_alone():
    # Its events are in the activation's windows already: delivering the batch again would
    # count them twice. The window that failed is the unit given up (window_failed), never
    # the batch that closed it, whichever input's view delivered that batch.
    provider = StreamProvider.memory(
        queues=2, co_partitioned=[("tolls", "fees")], delivery_retry_backoff=0.01, max_event_delivery_time=2.0
    )
    results: list = []
    errors: list = []

    @provider.implicit("tolls", "fees")
    class Revenue:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t"),
            Tumbling(10, origin=T0),
            Sum(),
            select="amount",
            inputs=("tolls", "fees"),
        )

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            if result.start == T0:  # the first window: a consumer's bug, every time
                raise RuntimeError("on_window failed")
            results.append((result.start - T0, result.value))

        def on_error(self, error):
            errors.append(str(error))

    async with provider:
        for offset, amount in [(1, 2.0), (12, 5.0), (15, 1.0)]:
            await _publish(provider, "tolls", "p", offset, amount=amount)
        await _publish(provider, "fees", "p", 3, amount=0.5)
        await drained(provider)
        await _publish(provider, "fees", "p", 21, amount=0.25)  # closes [0, 10) only: on_window raises
        await drained(provider)
        await _publish(provider, "tolls", "p", 40, amount=1.0)
        await _publish(provider, "fees", "p", 40, amount=1.0)  # closes [10, 20) and [20, 30)
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert results == [(10, 6.0), (20, 0.25)]  # the fee of 0.25 at 21 counted once
    assert errors == ["on_window failed"]  # told once, when the window was given up
    [letter] = letters
    assert (letter.reason, letter.stream, letter.value["start"], letter.value["value"]) == (
        "window_failed",
        "tolls/p",
        T0,
        2.5,
    )


def test_a_merged_type_must_read_exactly_its_inputs():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("tolls", "prices", "fees")])

    class Wrong:
        event_time = EventTime(OrderingPolicy(), inputs=("tolls", "fees"))

        def __init__(self, stream_id):
            pass

        def on_events(self, events):
            pass

    with pytest.raises(ConfigurationError, match=r"inputs=\('tolls', 'prices'\)"):
        provider.implicit("tolls", "prices")(Wrong)
    with pytest.raises(ConfigurationError, match=r"@provider.implicit\('tolls', 'fees'\)"):
        provider.implicit("tolls")(Wrong)
    with pytest.raises(ConfigurationError, match="not for subscriptions"):
        provider.consumer()(Wrong)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"inputs": ("tolls",)},
        {"inputs": ("tolls", "tolls")},
        {"imports": {"prices": "tolls"}},
        {"inputs": ("tolls", "prices"), "imports": {"prices": "fees"}},
        {"inputs": ("a", "b"), "imports": {"a": "b", "b": "a"}},
        {"inputs": "tolls"},
    ],
)
def test_event_time_refuses_bad_inputs(kwargs):
    with pytest.raises(ConfigurationError):
        EventTime(OrderingPolicy(), **kwargs)


def test_merged_inputs_take_no_substreams():
    with pytest.raises(ConfigurationError, match="substreams"):
        EventTime(OrderingPolicy(over="booth"), inputs=("tolls", "prices"))


async def test_a_punctuation_on_the_silent_input_releases_the_tolls_it_passes():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("tolls", "prices")])
    log: list = []
    _priced_tolls(provider, EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices")), log)
    async with provider:
        await _price_then_tolls(provider)
        assert log == [("price", 0, 10.0)]
        # a CTI on prices (no new price): prices have passed 5, so tolls up to 5 go
        await provider.get_stream(StreamId("prices", "b1")).advance_time(T0 + 5)
        await drained(provider)
        assert log[1:] == [("toll", 1, 0, 10.0), ("toll", 2, 1, 10.0), ("toll", 5, 2, 10.0)]
        m = _activation(provider).processor.metrics()
    assert m.watermarks == {"tolls": T0 + 8, "prices": T0 + 5} and m.watermark == T0 + 5


async def test_an_outcome_on_events_made_up_is_a_clear_error_of_the_consumer_not_a_handoff(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=1, co_partitioned=[("tolls", "prices")])
    errors: list = []

    @provider.implicit("tolls", "prices")
    class MadeUp:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"))
        handoff = EventHandoff("made_up", {"n": "bigint"})

        def __init__(self, stream_id):
            pass

        def on_events(self, events):  # a record of its own, not one of the events it was given
            return [dataclasses.replace(e, record={"n": 1}) for e in events]

        def on_error(self, error):
            errors.append(str(error))

    async with provider:
        await _publish(provider, "prices", "b1", 0, price=10.0)
        await _publish(provider, "tolls", "b1", 1, n=0)
        await provider.get_stream(StreamId("prices", "b1")).on_completed()
        await provider.get_stream(StreamId("tolls", "b1")).on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list(reason="delivery_failed")
    assert errors and all(
        e == "on_events returned an outcome of {'n': 1}, not of an event it was given" for e in errors
    )
    # The batch whose step released the events is dead-lettered (which one depends on how the
    # reads group the batches), with the error as its detail.
    assert letters and {d.stream for d in letters} <= {"prices/b1", "tolls/b1"}
    assert all("on_events returned an outcome of {'n': 1}" in d.detail for d in letters)
