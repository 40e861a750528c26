"""The fates of a consumer type's events stay counted when its activations end (their
stream went quiet), and an activation parked with open windows is counted once when it
comes back."""

from __future__ import annotations

import anyio

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

QUIET = 0.05  # stream_inactivity_period: a stream quiet this long is deactivated


class Passages:
    event_time = EventTime(OrderingPolicy(timestamp_by="t", action="drop"))

    def __init__(self, stream_id): ...

    def on_events(self, outcomes): ...


class Counts:
    event_time = EventTime(OrderingPolicy(timestamp_by="t", action="drop"), Tumbling(1000), Count())

    def __init__(self, stream_id): ...

    def on_window(self, result): ...


async def _publish(provider: StreamProvider, key: str, times: list[object]) -> None:
    await provider.get_stream(StreamId("tolls", key)).on_next_batch([{"t": t} for t in times])
    await provider.drain()


def _fates(provider: StreamProvider, name: str) -> dict[str, int]:
    [agent] = provider.agents
    counts = agent.fates_by_type()[name]
    return {k: counts[k] for k in ("events", "out_of_order_dropped", "invalid_timestamp")}


async def test_an_ended_activation_s_events_stay_counted():
    provider = StreamProvider.memory(queues=1, stream_inactivity_period=QUIET)
    provider.implicit("tolls")(Passages)
    name = f"{__name__}.Passages"
    async with provider:
        await _publish(provider, "a", [10, 20, 15, "x"])  # 15: out of order, dropped; "x": no time
        assert _fates(provider, name) == {"events": 4, "out_of_order_dropped": 1, "invalid_timestamp": 1}
        await anyio.sleep(QUIET * 2)
        await _publish(provider, "b", [1, 0])  # the read sweeps the quiet stream a away
        [agent] = provider.agents
        assert agent.stream_ids() == [StreamId("tolls", "b")]
        assert _fates(provider, name) == {"events": 6, "out_of_order_dropped": 2, "invalid_timestamp": 1}


async def test_a_parked_activation_is_counted_once_when_it_comes_back(tmp_path):
    provider = StreamProvider.embedded(tmp_path, queues=1, stream_inactivity_period=QUIET)
    provider.implicit("tolls")(Counts)
    name = f"{__name__}.Counts"
    async with provider:
        await _publish(provider, "a", [10, 5])  # its window [0, 1000) stays open
        await anyio.sleep(QUIET * 2)
        await _publish(provider, "b", [1])
        [agent] = provider.agents
        assert StreamId("tolls", "a") not in agent.stream_ids()  # parked, its window kept
        assert _fates(provider, name) == {"events": 3, "out_of_order_dropped": 1, "invalid_timestamp": 0}
        await _publish(provider, "a", [20, 7])  # back, with its state and its counters
        assert StreamId("tolls", "a") in agent.stream_ids()
        assert _fates(provider, name) == {"events": 5, "out_of_order_dropped": 2, "invalid_timestamp": 0}
