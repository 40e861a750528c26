"""A consumer whose constructor raises: its batch is retried with the delivery back-off, then
dead-lettered ``activation_failed`` with the constructor's traceback; the worker, the other
streams and the stream's next batch go on. A type that cannot take a stream id at all is
refused when it is registered."""

from __future__ import annotations

import logging

import pytest

from streams import StreamId, StreamProvider
from streams.core.errors import ConfigurationError
from streams.eventtime import Count, EventTime, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0
FAST = {"max_event_delivery_time": 0.2, "delivery_retry_backoff": 0.01}


@pytest.mark.parametrize("backend", ["memory", "embedded"])
async def test_a_constructor_that_raises_dead_letters_its_batch_and_the_next_batch_tries_again(
    backend, tmp_path, caplog
):
    provider = (
        StreamProvider.memory(queues=1, **FAST)
        if backend == "memory"
        else StreamProvider.embedded(tmp_path, queues=1, **FAST)
    )
    built: list[str] = []
    seen: dict[str, list[int]] = {}
    broken = {"bad"}

    @provider.implicit("ns")
    class Picky:
        def __init__(self, stream_id):
            if stream_id.key in broken:
                raise KeyError(f"no settings for {stream_id.key}")
            built.append(stream_id.key)
            self.key = stream_id.key

        def on_next(self, batch):
            seen.setdefault(self.key, []).extend(e.value for e in batch)

    caplog.set_level(logging.INFO, logger="headrace")
    async with provider:
        good, bad = provider.get_stream(StreamId("ns", "good")), provider.get_stream(StreamId("ns", "bad"))
        for n in range(3):
            await good.on_next(n)
            await bad.on_next(100 + n)
            await drained(provider)
        broken.clear()  # the settings arrive: the stream's next batch builds it
        await bad.on_next(103)
        await good.on_next(3)
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert seen == {"good": [0, 1, 2, 3], "bad": [103]}
    assert built == ["good", "bad"]
    assert [(x.reason, x.value, x.stream) for x in letters] == [
        ("activation_failed", 100 + n, "ns/bad") for n in range(3)
    ]
    # the detail is the constructor's traceback, its frame last
    detail = letters[0].detail
    assert detail.startswith("implicit:") and "Traceback (most recent call last)" in detail
    assert "in __init__" in detail and detail.endswith("KeyError: 'no settings for bad'")
    # each batch: one warning with the traceback when its retries begin, one line when dead-lettered
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "ns/bad" in r.getMessage()]
    assert len(warnings) == 6
    assert sum(r.exc_info is not None for r in warnings) == 3
    assert caplog.text.count("Traceback (most recent call last)") == 3


async def test_an_event_time_constructor_that_fails_once_loses_no_window():
    provider = StreamProvider.memory(queues=1, **FAST)
    windows: list[tuple[float, int]] = []
    attempts = []

    @provider.implicit("t")
    class Totals:
        event_time = EventTime(window=Tumbling(10, origin=T0), aggregate=Count())

        def __init__(self, stream_id):
            attempts.append(stream_id)
            if len(attempts) == 1:
                raise ConnectionError("the config service blinked")

        def on_window(self, result):
            windows.append((result.start - T0, result.value))

    async with provider:
        stream = provider.get_stream(StreamId("t", "k"))
        await stream.on_next_batch(["a", "b", "c"], event_times=[T0 + 1, T0 + 2, T0 + 11])
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.count()
    assert len(attempts) == 2  # the retry built it, within the batch's delivery time
    assert windows == [(0.0, 2), (10.0, 1)] and letters == 0


@pytest.mark.parametrize("register", ["implicit", "consumer"])
def test_a_consumer_whose_init_takes_no_stream_id_is_refused_when_registered(register):
    provider = StreamProvider.memory(queues=1)
    decorate = provider.implicit("ns") if register == "implicit" else provider.consumer()

    class Counter:
        def __init__(self):
            self.n = 0

        def on_next(self, batch):
            self.n += len(batch)

    with pytest.raises(ConfigurationError) as refused:
        decorate(Counter)
    assert str(refused.value) == (
        f"consumer type {Counter.__qualname__} cannot be built for a stream: its constructor must take the stream id, "
        "def __init__(self, stream_id)"
    )
    assert provider.registry.types() == []
