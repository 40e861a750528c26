"""The application ``headrace worker`` runs in the checkpoint-holder test: tolls priced with
the price in force, the prices importing the tolls' watermark. The price in force is kept for
a replay (its event holds the queue's checkpoint), so the status names this activation and
its ``prices`` input as what holds the checkpoint."""

from __future__ import annotations

from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy

provider = StreamProvider.embedded("store", queues=1, co_partitioned=[("tolls", "prices")])


@provider.implicit("tolls", "prices")
class PricedTolls:
    event_time = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"), imports={"prices": "tolls"})

    def __init__(self, stream_id: StreamId) -> None:
        self.price = None

    def on_events(self, events) -> None:  # type: ignore[no-untyped-def]
        for e in events:
            if e.record.stream_id.namespace == "prices":
                self.price = e.record.value["price"]
