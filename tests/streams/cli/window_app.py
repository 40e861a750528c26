"""The application of the window-replay test: ten-second counts of the ``rooms`` streams,
each window appended as ``start value`` (start from the epoch ``T0``) to ``$WINDOWS_OUT``;
``on_window`` raises for the window starting at 10 while the file ``$WINDOWS_BROKEN`` exists."""

from __future__ import annotations

import os

from streams import StreamId
from streams.eventtime import Count, EventTime, Tumbling
from streams.runtime.config import load_config

T0 = 1_700_000_000.0
config = load_config()
provider = config.provider()


@provider.implicit("rooms")
class Counts:
    event_time = EventTime(window=Tumbling(10, origin=T0), aggregate=Count())

    def __init__(self, stream_id: StreamId) -> None:
        self.key = stream_id.key

    def on_window(self, result) -> None:  # type: ignore[no-untyped-def]
        if result.start == T0 + 10 and os.path.exists(os.environ["WINDOWS_BROKEN"]):
            raise ConnectionError("the report database is down")
        with open(os.environ["WINDOWS_OUT"], "a") as out:
            out.write(f"{result.start - T0:g} {result.value}\n")
