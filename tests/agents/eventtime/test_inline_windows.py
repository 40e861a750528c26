"""A plain ``on_window`` is called where the step ran (the agent's task, no task of its own
per window); one that raises or returns an awaitable leaves that window and those after it
to the consumer's task, which retries, gives up and dead-letters exactly as before."""

from __future__ import annotations

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0
SID = StreamId("sensors", "s-1")


def provider_with(on_window, on_error=None) -> StreamProvider:  # type: ignore[no-untyped-def]
    provider = StreamProvider.memory(queues=2, delivery_retry_backoff=0.01, max_event_delivery_time=2.0)

    @provider.implicit("sensors")
    class Windows:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10, origin=T0), Count())

        def __init__(self, stream_id):
            pass

        def on_window(self, result):  # type: ignore[no-untyped-def]
            return on_window(result)

        def on_error(self, error):  # type: ignore[no-untyped-def]
            if on_error is not None:
                on_error(error)

    return provider


async def publish(provider: StreamProvider) -> None:
    """Three windows, closed by the last batch in one step: [0, 10) 2, [10, 20) 1, [20, 30) 1."""
    stream = provider.get_stream(SID)
    await stream.on_next_batch([{"t": T0 + 1}, {"t": T0 + 2}, {"t": T0 + 12}, {"t": T0 + 25}])
    await drained(provider)
    await stream.on_next_batch([{"t": T0 + 100}])
    await drained(provider)


async def test_a_window_that_fails_twice_is_taken_on_a_retry_in_order():
    calls: list[float] = []
    taken: list[tuple[float, int]] = []

    def on_window(result):  # type: ignore[no-untyped-def]
        calls.append(result.start - T0)
        if result.start == T0 and calls.count(0.0) <= 2:
            raise RuntimeError("not yet")
        taken.append((result.start - T0, result.value))

    provider = provider_with(on_window)
    async with provider:
        await publish(provider)
        letters = await provider.dead_letters.list()
    assert calls == [0.0, 0.0, 0.0, 10.0, 20.0]  # the first attempt where the step ran, then two retries
    assert taken == [(0.0, 2), (10.0, 1), (20.0, 1)]
    assert letters == []


async def test_a_window_that_always_fails_is_one_letter_and_the_next_ones_go_on():
    taken: list[float] = []
    told: list[str] = []

    def on_window(result):  # type: ignore[no-untyped-def]
        if result.start == T0 + 10:
            raise RuntimeError("the middle one")
        taken.append(result.start - T0)

    provider = provider_with(on_window, told.append)
    async with provider:
        await publish(provider)
        letters = await provider.dead_letters.list()
    assert taken == [0.0, 20.0]
    [letter] = letters
    assert (letter.reason, letter.stream, letter.value["start"], letter.value["value"]) == (
        "window_failed",
        "sensors/s-1",
        T0 + 10,
        1,
    )
    assert [str(e) for e in told] == ["the middle one"]


async def test_a_plain_on_window_returning_an_awaitable_is_awaited_before_the_next():
    order: list[str] = []

    async def later(start: float) -> None:
        await anyio.sleep(0.01)
        order.append(f"awaited {start:g}")

    def on_window(result):  # type: ignore[no-untyped-def]
        start = result.start - T0
        order.append(f"called {start:g}")
        return later(start) if start == 10 else None

    provider = provider_with(on_window)
    async with provider:
        await publish(provider)
    assert order == ["called 0", "called 10", "awaited 10", "called 20"]


async def close_by(provider: StreamProvider, closer: str) -> None:
    """The same three windows, closed not by data but by the stream's completion or by a
    producer's watermark: the step that closes them runs in the consumer's task."""
    stream = provider.get_stream(SID)
    await stream.on_next_batch([{"t": T0 + 1}, {"t": T0 + 2}, {"t": T0 + 12}, {"t": T0 + 25}])
    await drained(provider)
    if closer == "completed":
        await stream.on_completed()
    else:
        await stream.advance_time(T0 + 100)
    await drained(provider)


@pytest.mark.parametrize("closer", ["completed", "watermark"])
async def test_a_plain_on_window_that_fails_where_completion_or_a_watermark_closes_is_one_letter(closer):
    calls: list[float] = []
    told: list[str] = []

    def on_window(result):  # type: ignore[no-untyped-def]
        calls.append(result.start - T0)
        if result.start == T0 + 10:
            raise RuntimeError("the middle one")

    provider = provider_with(on_window, told.append)
    async with provider:
        await close_by(provider, closer)
        letters = await provider.dead_letters.list()
    assert calls[0] == 0.0 and calls[-1] == 20.0  # the windows around it were emitted, in order
    assert calls.count(10.0) > 1 and set(calls) == {0.0, 10.0, 20.0}  # retried, then given up
    [letter] = letters
    assert (letter.reason, letter.value["start"], letter.value["value"]) == ("window_failed", T0 + 10, 1)
    assert [str(e) for e in told] == ["the middle one"]


@pytest.mark.parametrize("closer", ["completed", "watermark"])
async def test_a_plain_on_window_returning_an_awaitable_where_completion_closes_is_awaited_in_order(closer):
    order: list[str] = []

    async def later(start: float) -> None:
        await anyio.sleep(0.01)
        order.append(f"awaited {start:g}")

    def on_window(result):  # type: ignore[no-untyped-def]
        start = result.start - T0
        order.append(f"called {start:g}")
        return later(start) if start == 10 else None

    provider = provider_with(on_window)
    async with provider:
        await close_by(provider, closer)
        letters = await provider.dead_letters.list()
    assert order == ["called 0", "called 10", "awaited 10", "called 20"]
    assert letters == []
