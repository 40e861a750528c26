"""In the runtime, one event's bad time or value never fails its batch: it
alone is dead-lettered, and the rest of the batch reaches its windows; and with
substreams, every arrival moves every substream."""

from __future__ import annotations

import math
import time

import anyio

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained


async def run(values: list[dict], policy: OrderingPolicy) -> tuple[list, dict[str, list]]:
    provider = StreamProvider.memory(queues=1)
    results: list = []

    @provider.implicit("booths")
    class Counts:
        event_time = EventTime(policy, Tumbling(10), Count())

        def __init__(self, stream_id):
            pass

        async def on_window(self, result):
            results.append((result.start, result.end, result.value))

    async with provider:
        stream = provider.get_stream(StreamId("booths", "b0"))
        await stream.on_next_batch(values)
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list()
    by_reason: dict[str, list] = {}
    for letter in letters:
        by_reason.setdefault(letter.reason, []).append(letter)
    return results, by_reason


async def test_a_nan_time_dead_letters_that_event_only():
    results, letters = await run(
        [{"time": 1.0}, {"time": math.nan}, {"time": 2.0}], OrderingPolicy(timestamp_by="time")
    )
    assert results == [(0.0, 10.0, 2)]
    assert list(letters) == ["invalid_timestamp"]
    [letter] = letters["invalid_timestamp"]
    assert (letter.stream, letter.sequence_number) == ("booths/b0", 0)  # the queue: item 5
    assert "not a finite time" in letter.detail


async def test_iso_times_are_windowed_and_a_time_without_offset_is_refused():
    base = 1714564800.0  # 2024-05-01T12:00:00Z
    results, letters = await run(
        [{"time": "2024-05-01T12:00:01Z"}, {"time": "2024-05-01T14:00:05+02:00"}, {"time": "2024-05-01T12:00:06"}],
        OrderingPolicy(timestamp_by="time"),
    )
    assert results == [(base, base + 10, 2)]
    assert [letter.detail.split(";")[0] for letter in letters["invalid_timestamp"]] == [
        "'2024-05-01T12:00:06' has no UTC offset: add Z or +hh:mm (an ISO-8601 time names its zone)"
    ]


async def test_epoch_microseconds_sent_as_seconds_are_refused_at_ingestion():
    results, letters = await run([{"time": 5.0}, {"time": 1.7e15}], OrderingPolicy(timestamp_by="time"))
    assert results == [(0.0, 10.0, 1)]
    assert [letter.reason for letter in letters["invalid_timestamp"]] == ["invalid_timestamp"]
    assert list(letters) == ["invalid_timestamp"]


async def test_another_keys_arrivals_close_a_quiet_substreams_window():
    # No ticks (their period is an hour): only the arrivals of booth a can move booth b on.
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=3600)
    results: list = []

    @provider.implicit("booths")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t", over="booth", late_arrival=0.5), Tumbling(0.5), Count())

        def __init__(self, stream_id):
            pass

        async def on_window(self, result):
            results.append((result.key, result.value))

    async with provider:
        stream = provider.get_stream(StreamId("booths", "plaza"))
        now = time.time()
        await stream.on_next_batch([{"t": now, "booth": "a"}, {"t": now, "booth": "b"}])
        await drained(provider)
        await anyio.sleep(1.5)  # b's window ended at most 0.5 s after now
        await stream.on_next({"t": time.time(), "booth": "a"})  # every substream >= arrival - 0.5
        await drained(provider)
        closed = sorted(results)
    assert closed == [("a", 1), ("b", 1)]
