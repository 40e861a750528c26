"""A worker for the enrichment crash test: tolls enriched with the price in force at their
event time (prices import the tolls' watermark), handed off as ``priced_tolls``.

Prints ``ready`` once it runs; the test kills it (SIGKILL) and starts another."""

from __future__ import annotations

import sys

from spark_sink import EventHandoff
from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy
from tests.helpers import SHORT_LEASES, serve

HANDOFF = "priced_tolls"


def provider(path: str, **options: object) -> StreamProvider:
    p = StreamProvider.embedded(path, queues=2, co_partitioned=[("tolls", "prices")], **options)  # type: ignore[arg-type]

    @p.implicit("tolls", "prices")
    class PricedTolls:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"), imports={"prices": "tolls"}
        )
        handoff = EventHandoff(HANDOFF, {"booth": "string", "n": "bigint", "price": "double"})

        def __init__(self, stream_id: StreamId) -> None:
            self.price = None

        def on_events(self, events):
            priced = []
            for e in events:
                if e.record.stream_id.namespace == "prices":
                    self.price = e.record.value["price"]
                else:
                    priced.append(e.with_value({**e.record.value, "price": self.price}))
            return priced

    return p


def main(path: str) -> None:
    serve(provider(path, balancer_options=SHORT_LEASES), reading=True)


if __name__ == "__main__":
    main(sys.argv[1])
