"""A worker for the saved-state tests: tumbling one-hour counts per meter, handed off to the
embedded store's handoff log ``counts``. Prints ``ready``, then ``read N`` (the records its
agent has read) each time a window closes."""

from __future__ import annotations

import sys

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.helpers import SHORT_LEASES, serve


def main(path: str) -> None:
    provider = StreamProvider.embedded(path, queues=1, balancer_options=SHORT_LEASES)

    @provider.implicit("meters")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(3600), Count())
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, window: object) -> None:
            print(f"read {sum(agent.read_messages for agent in provider.agents)}", flush=True)

    serve(provider)


if __name__ == "__main__":
    main(sys.argv[1])
