"""A failing ``on_window`` under the worker's retry budget (``Harness(app,
delivery_retry_backoff=...)``, as docs/guide.md's *Testing your consumers* says): the same exception
on the same window is given up after 3 attempts, not retried for the whole
``max_event_delivery_time``; a failure that changes, or an I/O error, is retried on."""

from __future__ import annotations

import logging
import time

from streams import StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.testing import Harness


def app(fail: list[Exception]) -> tuple[StreamProvider, type, list[float]]:
    """A counting consumer whose ``on_window`` raises the next of ``fail`` (then takes the
    window); the times it was called."""
    provider = StreamProvider.memory(queues=1)
    calls: list[float] = []

    @provider.implicit("tolls")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            calls.append(time.monotonic())
            if fail:
                raise fail.pop(0)

    return provider, Counts, calls


async def windows_of(provider: StreamProvider) -> Harness:
    # The worker's budget: max_event_delivery_time 60 s, with a back-off short enough for a test.
    async with Harness(provider, delivery_retry_backoff=0.01) as harness:
        await harness.publish("tolls/north", {"t": 1}, {"t": 12}, at=12)
    return harness


async def test_the_same_error_on_the_same_window_is_given_up_after_three_attempts(caplog):
    caplog.set_level(logging.INFO, "headrace")
    provider, _, calls = app([ValueError("no price for B1")] * 10)
    began = time.monotonic()
    harness = await windows_of(provider)
    assert len(calls) == 3  # not retried for 60 s
    assert time.monotonic() - began < 5
    [letter] = harness.dead_letters()
    assert letter.reason == "window_failed" and "ValueError: no price for B1" in letter.detail
    # What the log says, the window's bounds as times a person reads
    counts = f"{__name__}.app.<locals>.Counts"  # the type's registered name
    said = [r.getMessage().replace(counts, "Counts") for r in caplog.records if "on_window of" in r.getMessage()]
    assert said == [
        "tolls/north: on_window of Counts raised ValueError('no price for B1') for the window None "
        "[1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z); retrying with back-off for up to 60.0s "
        "(3 attempts if it raises the same)",
        "tolls/north: on_window of Counts failed for the window None [1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z); "
        "dead-lettered (window_failed)",
    ]


async def test_a_failure_that_changes_is_retried_until_an_attempt_takes_the_window():
    provider, _, calls = app([ValueError(f"attempt {i}") for i in range(4)])
    harness = await windows_of(provider)
    assert len(calls) == 5 and harness.dead_letters() == []


async def test_an_io_error_is_retried_past_three_attempts():
    provider, cls, calls = app([ConnectionRefusedError("db down")] * 4)
    harness = await windows_of(provider)
    assert len(calls) == 5 and harness.dead_letters() == []
    assert [(w.start, w.value) for w in harness.windows(cls)] == [(0.0, 1)] * 5  # each attempt recorded
