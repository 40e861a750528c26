"""A failing ``on_window``: the window is the unit dead-lettered (``window_failed``: key,
bounds, value, stream, the queue positions it covers, traceback), never the events counted
into it or into the windows around it; one letter per window however often it is written."""

from __future__ import annotations

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, Hopping, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0
FAST = {"max_event_delivery_time": 0.2, "delivery_retry_backoff": 0.01}


def _provider(backend: str, path) -> StreamProvider:
    if backend == "memory":
        return StreamProvider.memory(queues=1, **FAST)
    return StreamProvider.embedded(path, queues=1, **FAST)


@pytest.mark.parametrize("failure", ["raises", "hangs"])
@pytest.mark.parametrize("backend", ["memory", "embedded"])
async def test_a_failing_on_window_dead_letters_that_window_and_nothing_else(backend, failure, tmp_path):
    provider = _provider(backend, tmp_path)
    windows: list[tuple[float, int]] = []
    attempts = []
    errors: list[str] = []

    @provider.implicit("rooms")
    class Counts:
        event_time = EventTime(window=Tumbling(10, origin=T0), aggregate=Count())

        def __init__(self, stream_id):
            pass

        async def on_window(self, result):
            if result.start == T0 + 10:
                attempts.append(result)
                if failure == "raises":
                    raise ValueError("no room 10")
                await anyio.sleep_forever()
            windows.append((result.start - T0, result.value))

        def on_error(self, error):
            errors.append(type(error).__name__)

    async with provider:
        stream = provider.get_stream(StreamId("rooms", "r1"))
        times = [T0 + t for t in (*range(10), *range(10, 20), *range(20, 25))]
        await stream.on_next_batch(list(range(25)), event_times=times)  # one batch of 25
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert windows == [(0.0, 10), (20.0, 5)]  # the windows around it were emitted
    assert errors == ["ValueError" if failure == "raises" else "DeliveryTimeoutError"]  # told once, when given up
    # retried with back-off before giving up; one that hangs is cut short at the limit
    assert len(attempts) > 1 if failure == "raises" else len(attempts) == 1
    (letter,) = letters  # no event of the batch is a letter
    assert (letter.reason, letter.stream, letter.queue, letter.sequence_number) == (
        "window_failed",
        "rooms/r1",
        0,
        0,
    )
    value = letter.value
    assert (value["consumer"], value["key"], value["start"], value["end"], value["value"]) == (
        Counts.__headrace_consumer_name__,
        None,
        T0 + 10,
        T0 + 20,
        10,
    )
    assert value["from"] == [0, 0] and value["through"] == [0, 24] and (value["final"], value["revision"]) == (True, 0)
    if failure == "raises":
        assert "Traceback (most recent call last)" in letter.detail and letter.detail.endswith("ValueError: no room 10")
    else:
        assert "took longer than max_event_delivery_time (0.2s)" in letter.detail


async def test_hopping_windows_failing_on_one_event_are_a_letter_each():
    provider = StreamProvider.memory(queues=1, **FAST)

    @provider.implicit("rooms")
    class Counts:
        event_time = EventTime(window=Hopping(10, hop=5, origin=T0), aggregate=Count())

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            raise RuntimeError("down")

    async with provider:
        stream = provider.get_stream(StreamId("rooms", "r1"))
        await stream.on_next(1, event_time=T0 + 7)  # in [0, 10) and [5, 15)
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert sorted((x.value["start"] - T0, x.value["value"]) for x in letters) == [(0.0, 1), (5.0, 1)]
