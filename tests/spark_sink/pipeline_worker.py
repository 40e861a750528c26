"""A worker for the end-to-end test: windowed toll totals per booth, handed off to Spark.

Run as ``pipeline_worker.py embedded STORE`` or ``pipeline_worker.py kafka BOOTSTRAP TOPIC``.
"""

from __future__ import annotations

import sys

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Combined, Count, EventTime, OrderingPolicy, Sum, Tumbling
from tests.helpers import SHORT_LEASES, serve

WINDOW = 60


def worker(backend: str, *where: str) -> StreamProvider:
    if backend == "kafka":
        bootstrap, topic = where
        # One worker at a time reads both partitions (no group to join: a quick restart). The
        # test broker has no producer ids: no idempotent producer. Handoff topics are named
        # after the queue topic, so that tests do not share them.
        settings = {"idempotent": False, "group_membership": False, "handoff_prefix": topic}
        return StreamProvider.kafka(bootstrap, topic, queues=2, kafka=settings)
    return StreamProvider.embedded(where[0], queues=2, balancer_options=SHORT_LEASES)


def main(backend: str, *where: str) -> None:
    provider = worker(backend, *where)

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

    serve(provider)


if __name__ == "__main__":
    main(*sys.argv[1:])
