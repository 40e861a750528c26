"""The application of the secured-cluster tests: its provider is the configuration's (a
headrace.toml or ``HEADRACE_*`` variables naming a TLS cluster), and its one consumer type
appends every event it takes to ``$HEADRACE_TEST_OUT`` (``key n`` per line) and counts them
in a durable field, which ``headrace state`` shows."""

from __future__ import annotations

import os

from streams import Durable, StreamId
from streams.runtime.config import load_config

provider = load_config().provider()


@provider.implicit("sensors")
class Tally:
    seen = Durable(0)

    def __init__(self, stream_id: StreamId) -> None:
        self.key = stream_id.key

    def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
        self.seen += len(batch)
        with open(os.environ["HEADRACE_TEST_OUT"], "a") as out:
            out.writelines(f"{self.key} {event.value['n']}\n" for event in batch)
