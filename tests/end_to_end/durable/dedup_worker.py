"""A worker for the dedup test: one-hour counts per meter of events deduplicated by ``id``
within two hours, handed off to the embedded store's handoff log ``counts``. Prints
``ready``."""

from __future__ import annotations

import sys

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, Dedup, EventTime, OrderingPolicy, Tumbling
from tests.helpers import SHORT_LEASES, serve


def main(path: str) -> None:
    provider = StreamProvider.embedded(path, queues=1, balancer_options=SHORT_LEASES)

    @provider.implicit("meters")
    class Counts:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t"), Tumbling(3600), Count(), dedup=Dedup(key="id", within=7200)
        )
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    serve(provider)


if __name__ == "__main__":
    main(sys.argv[1])
