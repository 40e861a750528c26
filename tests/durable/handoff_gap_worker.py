"""A worker for the handoff-gap crash test: tumbling 10 s counts per stream, handed off to
the embedded store's handoff log ``counts``.

With ``block`` as its third argument, the first handoff append prints ``in-gap`` and never
returns: the worker stands in the gap between a window closing and its handoff committing,
where the test kills it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import anyio

from balancer import BalancerOptions
from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

LEASES = BalancerOptions(lease_length=1.0, renew_period=0.3, refresh_period=0.1)


class BlockedSink:
    """Wraps a handoff sink; its window appends never return."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[Any]) -> int:
        print("in-gap", flush=True)
        await anyio.sleep_forever()
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


def main(path: str, mode: str) -> None:
    provider = StreamProvider.embedded(path, queues=1, balancer_options=LEASES)

    @provider.implicit("meters")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    async def run() -> None:
        async with provider:
            while not provider.agents:
                await anyio.sleep(0.02)
            if mode == "block":
                sinks = provider.agents[0].context.handoff_sinks
                sinks["counts"] = BlockedSink(sinks["counts"])  # type: ignore[index]
            print("ready", flush=True)
            await anyio.sleep_forever()

    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
