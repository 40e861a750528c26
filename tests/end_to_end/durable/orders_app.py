"""The application of the durable-state tests, run with ``headrace worker --app
tests.end_to_end.durable.orders_app:app``: on the embedded store at ``HEADRACE_TEST_STORE``, or
on the topic ``HEADRACE_TEST_TOPIC`` of the broker at ``HEADRACE_TEST_KAFKA`` (the worker's local
state store under ``HEADRACE_TEST_STATE_DIR``, if set, and ``HEADRACE_TEST_STANDBY_REPLICAS`` standby
copies of each queue). What its
consumers do is appended to ``HEADRACE_TEST_OUT``, a line each:

- ``ThirdOrderAlert`` (namespace ``orders``, values ``{"amount": x}``): ``took USER N`` for
  each order, and ``alert USER 3 TOTAL`` at a user's third order;
- ``RunningTotal`` (namespace ``amounts``, integer values): keeps the sum and count per key
  in durable fields and writes nothing (the tests read its saved state);
- ``AlertToSpark`` (namespace ``purchases``, values ``{"t": time, "amount": x}``): the same
  alert as a row of the handoff stream ``alerts`` (its ``on_events`` returns only the alert),
  ``bought USER N`` for each purchase;
- ``Reminder`` (namespace ``reminders``, values ``{"in": seconds}``): sets a processing-time
  timer that many seconds ahead, ``set KEY``, and writes ``fired KEY NAME`` when it fires.
"""

from __future__ import annotations

import os
import time
from typing import Any

from balancer import BalancerOptions
from spark_sink import EventHandoff
from streams import Durable, StreamId, StreamProvider, Timer, Timers
from streams.eventtime import EventTime, OrderingPolicy

QUEUES = 2
LEASES = BalancerOptions(lease_length=2.0, renew_period=0.5, refresh_period=0.25)


def _write(line: str) -> None:
    with open(os.environ["HEADRACE_TEST_OUT"], "a") as out:
        out.write(line + "\n")


class AlertToSpark:
    """The third-order alert as Spark receives it: a windowless handoff whose durable fields
    count a user's purchases and whose on_events returns only the alert (a filter and an
    enrichment of one input). ``bought`` is told of each purchase."""

    event_time = EventTime(OrderingPolicy(timestamp_by="t", out_of_order=5))
    handoff = EventHandoff("alerts", {"user": "string", "total": "double"})
    orders = Durable(0)
    total = Durable(0.0)

    def __init__(self, stream_id: StreamId) -> None:
        self.user = stream_id.key

    def bought(self) -> None: ...

    def on_events(self, events: list[Any]) -> list[Any]:
        alerts = []
        for event in events:
            self.orders += 1
            self.total += event.record.value["amount"]
            self.bought()
            if self.orders == 3:
                alerts.append(event.with_value({"user": self.user, "total": self.total}))
        return alerts  # only these are handed off


def app() -> StreamProvider:
    kafka = os.environ.get("HEADRACE_TEST_KAFKA")
    if kafka:
        provider = StreamProvider.kafka(
            kafka,
            os.environ["HEADRACE_TEST_TOPIC"],
            queues=QUEUES,
            kafka={"idempotent": False},
            state_dir=os.environ.get("HEADRACE_TEST_STATE_DIR"),  # the worker's local state store
            standby_replicas=int(os.environ.get("HEADRACE_TEST_STANDBY_REPLICAS", "0")),
            balancer_options=BalancerOptions(3.0, renew_period=1.0, refresh_period=0.5),
            shutdown_timeout=5.0,
        )
    else:
        provider = StreamProvider.embedded(os.environ["HEADRACE_TEST_STORE"], queues=QUEUES, balancer_options=LEASES)

    @provider.implicit("orders")
    class ThirdOrderAlert:
        orders = Durable(0)
        total = Durable(0.0)

        def __init__(self, stream_id: StreamId) -> None:
            self.user = stream_id.key

        def on_next(self, batch: Any) -> None:
            for value in batch.values:
                self.orders += 1
                self.total += value["amount"]
                _write(f"took {self.user} {self.orders}")
                if self.orders == 3:
                    _write(f"alert {self.user} {self.orders} {self.total:.2f}")

    @provider.implicit("amounts")
    class RunningTotal:
        total = Durable(0)
        count = Durable(0)

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_next(self, batch: Any) -> None:
            values = batch.values
            self.total += sum(values)
            self.count += len(values)

    @provider.implicit("purchases")
    class AlertsWritten(AlertToSpark):
        event_time = EventTime(OrderingPolicy(timestamp_by="t"))  # in order: each released at once

        def bought(self) -> None:
            _write(f"bought {self.user} {self.orders}")

    @provider.implicit("reminders")
    class Reminder:
        timers = Timers()
        fired = Durable(0)

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            for value in batch.values:
                self.timers.at_processing_time(time.time() + value["in"], "ping")
                _write(f"set {self.key}")

        def on_timer(self, timer: Timer) -> None:
            self.fired += 1
            _write(f"fired {self.key} {timer.name}")

    return provider
