"""The worker of the clock-step tests, run under libfaketime (its wall clock stepped by the
test through an offset file; its monotonic clock true): on the embedded store at ``argv[1]``,

- ``Counts`` (namespace ``meters``, values ``{"t": time}``): one-second tumbling counts,
  ``late_arrival=2``, handed off to ``counts``;
- ``Reminder`` (namespace ``reminders``, values ``{"at": time}``): a processing-time timer
  at that time, and ``set KEY MONOTONIC`` / ``fired KEY MONOTONIC`` lines in ``argv[2]``;
  any other value (the test's mark) a ``mark KEY MONOTONIC`` line.

Its log (warnings and up) goes to stderr."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from balancer import BalancerOptions
from spark_sink import Handoff
from streams import StreamId, StreamProvider, Timer, Timers
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.helpers import serve

# Leases far shorter than the step, renewed often: a step judged by the wall clock outlasts one.
LEASES = BalancerOptions(lease_length=10.0, renew_period=1.0, refresh_period=0.25)


def main(path: str, out: str) -> None:
    provider = StreamProvider.embedded(path, queues=1, balancer_options=LEASES)

    def write(line: str) -> None:
        with open(out, "a") as f:
            f.write(line + "\n")

    @provider.implicit("meters")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t", late_arrival=2.0), Tumbling(1), Count())
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    @provider.implicit("reminders")
    class Reminder:
        timers = Timers()

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            for value in batch.values:
                if "at" not in value:  # the producer's mark, published once the timer is due
                    write(f"mark {self.key} {time.monotonic()}")
                    continue
                self.timers.at_processing_time(value["at"], "ping")
                write(f"set {self.key} {time.monotonic()}")

        def on_timer(self, timer: Timer) -> None:
            write(f"fired {self.key} {time.monotonic()}")

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    serve(provider, reading=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
