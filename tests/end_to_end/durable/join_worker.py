"""A worker for the join crash test: clicks joined to the orders of the same user within 60 s
after (a left join), each pair handed off as a row of ``conversions`` on the embedded store at
``PATH``. Prints ``ready`` once it runs; the test kills it (SIGKILL) and starts another."""

from __future__ import annotations

import sys

from spark_sink import EventHandoff
from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy
from streams.eventtime.joins import IntervalJoin
from tests.helpers import SHORT_LEASES, serve


def provider(path: str) -> StreamProvider:
    p = StreamProvider.embedded(path, queues=2, co_partitioned=[("clicks", "orders")], balancer_options=SHORT_LEASES)

    @p.implicit("clicks", "orders")
    class ClickToOrder:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t", out_of_order=5, action="drop"),
            inputs=("clicks", "orders"),
            join=IntervalJoin(lower=0, upper=60, how="left"),
        )
        handoff = EventHandoff("conversions", {"left_page": "string", "right_total": "double"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    return p


if __name__ == "__main__":
    serve(provider(sys.argv[1]), reading=True)
