"""A worker for the end-to-end test: windowed toll totals per booth, handed off to Spark."""

from __future__ import annotations

import sys

import anyio

from balancer import BalancerOptions
from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Combined, Count, EventTime, OrderingPolicy, Sum, Tumbling

WINDOW = 60


def main(path: str) -> None:
    # Short leases: a restarted worker takes over the killed one's queues within a second.
    leases = BalancerOptions(lease_length=1.0, renew_period=0.3, refresh_period=0.1)
    provider = StreamProvider.embedded(path, queues=2, balancer_options=leases)

    @provider.implicit("tolls")
    class BoothTotals:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t", out_of_order=5),
            Tumbling(WINDOW),
            Combined({"count": Count(), "total": Sum()}),
            group_by="booth",
            select="toll",
        )
        handoff = Handoff("tolls", {"count": "bigint", "total": "double"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    async def run() -> None:
        async with provider:
            print("ready", flush=True)
            await anyio.sleep_forever()

    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1])
