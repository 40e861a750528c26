"""The application ``headrace worker`` runs in the CLI tests: its provider and its ordering
policy come from the configuration the worker was given (``HEADRACE_CONFIG``), as
docs/configuration.md shows."""

from __future__ import annotations

from streams import StreamId
from streams.eventtime import EventTime
from streams.runtime.config import load_config

config = load_config()
provider = config.provider()


@provider.implicit("readings")
class InTimestampOrder:
    """Takes events in event time; the policy's refusals become dead letters."""

    event_time = EventTime(config.time.policy)

    def __init__(self, stream_id: StreamId) -> None:
        self.released = 0

    def on_events(self, outcomes) -> None:  # type: ignore[no-untyped-def]
        self.released += len(outcomes)
