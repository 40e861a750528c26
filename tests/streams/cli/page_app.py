"""The application the status page's browser test runs with ``headrace worker``: its provider
and ordering policy come from the configuration (``HEADRACE_CONFIG``). ``readings`` streams
are taken in event time (the policy's refusals become dead letters); a ``stuck`` stream's
consumer never finishes its first batch (until the worker stops), so its queue falls behind."""

from __future__ import annotations

import anyio

from streams import StreamId
from streams.eventtime import EventTime
from streams.runtime.config import load_config

config = load_config()
provider = config.provider()


@provider.implicit("readings")
class InTimestampOrder:
    event_time = EventTime(config.time.policy)

    def __init__(self, stream_id: StreamId) -> None:
        self.released = 0

    def on_events(self, outcomes) -> None:  # type: ignore[no-untyped-def]
        self.released += len(outcomes)


@provider.implicit("stuck")
class Stuck:
    def __init__(self, stream_id: StreamId) -> None:
        pass

    async def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
        await anyio.sleep_forever()
