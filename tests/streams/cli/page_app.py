"""The application the status page's tests run with ``headrace worker``: its provider and
ordering policy come from the configuration (``HEADRACE_CONFIG``). ``readings`` streams are
taken in event time (the policy's refusals become dead letters, as in ``status_app``); a
``stuck`` stream's consumer never finishes its first batch (as in ``rates_app``), so its
queue falls behind; ``updates`` streams are counted in ten-second windows from ``T0`` that
emit an update every two events before their final result, each result appended as
``start final revision value`` (start from ``T0``) to ``$RESULTS_OUT`` when it is set;
``handed`` streams' events are handed off to Spark's stream ``page_handoff`` as the
watermark passes them."""

from __future__ import annotations

import os

from spark_sink import EventHandoff
from streams import StreamId
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.eventtime.windows import Every
from tests.streams.cli.rates_app import Stuck
from tests.streams.cli.status_app import InTimestampOrder, config

T0 = 1_700_000_000.0

provider = config.provider()
provider.implicit("readings")(InTimestampOrder)
provider.implicit("stuck")(Stuck)


@provider.implicit("updates")
class Updates:
    event_time = EventTime(window=Tumbling(10, origin=T0, emit=Every(events=2)), aggregate=Count())

    def __init__(self, stream_id: StreamId) -> None:
        self.out = os.environ.get("RESULTS_OUT")

    def on_window(self, result) -> None:  # type: ignore[no-untyped-def]
        if self.out:
            with open(self.out, "a") as out:
                out.write(f"{result.start - T0:g} {result.final} {result.revision} {result.value}\n")


@provider.implicit("handed")
class HandedOff:
    event_time = EventTime(OrderingPolicy())
    handoff = EventHandoff("page_handoff", {"n": "bigint"})

    def __init__(self, stream_id: StreamId) -> None:
        pass
