"""Deduplication in a worker: a retry is dropped and lettered ``duplicate`` with its
stream and position, and the keys seen are saved with the checkpoint, so a retry that
arrives after a restart is still dropped (windowless and windowed consumers)."""

from __future__ import annotations

from typing import Any

from streams import StreamId
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.eventtime.dedup import Dedup
from streams.testing import Harness

PAYMENTS = StreamId("payments", "ann")


class Payments:
    """Windowless: on_events gets each payment once, however often its producer retried."""

    event_time = EventTime(OrderingPolicy(timestamp_by="t", out_of_order=5), dedup=Dedup(key="id", within=60))

    def __init__(self, stream_id: StreamId) -> None: ...

    def on_events(self, outcomes: list[Any]) -> None: ...


class PaymentCounts:
    event_time = EventTime(
        OrderingPolicy(timestamp_by="t"), Tumbling(100), Count(), dedup=Dedup(key=lambda e: e.value["id"], within=60)
    )

    def __init__(self, stream_id: StreamId) -> None: ...

    def on_window(self, result: Any) -> None: ...


def _ids(harness: Harness) -> list[str]:
    return [o.record.value["id"] for e in harness.emitted(Payments, "on_events") for o in e.value]


async def test_a_retry_after_a_restart_is_still_dropped() -> None:
    async with Harness() as harness:
        harness.implicit("payments")(Payments)
        await harness.publish(PAYMENTS, {"id": "p1", "t": 10}, {"id": "p2", "t": 11}, {"id": "p1", "t": 10}, at=12)
        assert _ids(harness) == ["p1", "p2"]
        await harness.restart()
        await harness.publish(PAYMENTS, {"id": "p2", "t": 11}, {"id": "p3", "t": 20}, at=21)  # p2 retried
        assert _ids(harness) == ["p1", "p2", "p3"]
        letters = harness.dead_letters("duplicate")
        assert [(d.value["id"], d.stream, d.sequence_number is not None) for d in letters] == [
            ("p1", "payments/ann", True),
            ("p2", "payments/ann", True),
        ]
        assert letters[1].detail.startswith("dedup key 'p2' first seen at 11, within 60 s")
        # The horizon passes (W = 80 - 5 >= 11 + 60): p2 is a new payment again, kept.
        await harness.publish(PAYMENTS, {"id": "q", "t": 80}, {"id": "p2", "t": 80}, at=81)
        assert _ids(harness) == ["p1", "p2", "p3", "q", "p2"]
        assert len(harness.dead_letters()) == 2


async def test_a_windowed_consumer_counts_a_payment_once_across_a_restart() -> None:
    async with Harness() as harness:
        harness.implicit("payments")(PaymentCounts)
        await harness.publish(PAYMENTS, {"id": "a", "t": 1}, {"id": "b", "t": 2}, at=3)
        await harness.restart()
        await harness.publish(PAYMENTS, {"id": "a", "t": 1}, {"id": "c", "t": 50}, {"id": "d", "t": 120}, at=121)
        assert [(w.start, w.value) for w in harness.windows(PaymentCounts)] == [(0.0, 3)]  # a, b, c
        assert [d.value["id"] for d in harness.dead_letters("duplicate")] == ["a"]
