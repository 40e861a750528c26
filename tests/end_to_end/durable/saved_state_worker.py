"""A worker for the saved-state tests: tumbling one-hour counts per meter, handed off to the
embedded store's handoff log ``counts`` (with ``PATH run BOOTSTRAP TOPIC [RECORDS]``: on that
Kafka topic, handing off under the topic's name as prefix; ``RECORDS``: a topic of one event
per record in that format, namespace ``meters``; ``PATH early``: the windows also give an
update every 100 events). Prints ``ready``, then ``read N E`` (the records its agent has read,
and the events in them) each time a window closes."""

from __future__ import annotations

import sys

from balancer import BalancerOptions
from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, Every, OrderingPolicy, Tumbling
from streams.eventtime.results import WindowResult
from tests.helpers import SHORT_LEASES, serve

GROUP = BalancerOptions(lease_length=3.0, renew_period=1.0, refresh_period=0.5)  # Kafka: session timeout


def main(path: str, mode: str, *kafka: str) -> None:
    if kafka:  # BOOTSTRAP TOPIC: the topic's one partition, workers in its consumer group
        bootstrap, topic, *records = kafka
        settings = {"idempotent": False, "handoff_prefix": topic}
        foreign = {"records": records[0], "namespace": "meters"} if records else {}
        provider = StreamProvider.kafka(bootstrap, topic, queues=1, kafka=settings, balancer_options=GROUP, **foreign)
    else:
        provider = StreamProvider.embedded(path, queues=1, balancer_options=SHORT_LEASES)

    @provider.implicit("meters")
    class Counts:
        window = Tumbling(3600, emit=Every(events=100)) if mode == "early" else Tumbling(3600)
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), window, Count())
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, window: WindowResult) -> None:
            if not window.final:
                return  # an update: the window is still open
            agents = provider.agents
            print(f"read {sum(a.read_messages for a in agents)} {sum(a.read_events for a in agents)}", flush=True)

    serve(provider)


if __name__ == "__main__":
    main(*sys.argv[1:])
