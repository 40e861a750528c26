"""Delivering a batch again after its consumer raised (agents/hook_calls.redeliver, through
the one retry helper): the consumer's last error when time runs out, no attempt that would
start past the deadline, none once the delivery stops, and no retry of values that do not
decode."""

from __future__ import annotations

import time

from agents.redelivery import redeliver
from streams.core.errors import DecodeError


class Consumer:
    """Raises each of ``errors`` in turn (``None``: takes the batch)."""

    def __init__(self, *errors: Exception | None) -> None:
        self.errors = list(errors)
        self.batches: list[list[int]] = []

    async def on_next(self, batch: list[int]) -> None:
        self.batches.append(batch)
        error = self.errors.pop(0) if self.errors else ValueError(f"attempt {len(self.batches)}")
        if error is not None:
            raise error


async def test_a_batch_taken_on_a_retry_returns_none() -> None:
    consumer = Consumer(ValueError("again"), None)
    assert (
        await redeliver(consumer.on_next, [7], ValueError("first"), time.monotonic() + 5, 0.001, lambda: False) is None
    )
    assert consumer.batches == [[7], [7]]


async def test_when_time_runs_out_the_consumers_last_error_is_returned() -> None:
    consumer = Consumer()  # raises on every attempt, each error its own
    last = await redeliver(consumer.on_next, [1], ValueError("first"), time.monotonic() + 0.3, 0.01, lambda: False)
    assert consumer.batches and isinstance(last, ValueError)
    assert str(last) == f"attempt {len(consumer.batches)}"  # the last attempt's, not the first


async def test_no_attempt_starts_when_the_first_pause_would_end_past_the_deadline() -> None:
    consumer = Consumer(None)
    first = ValueError("first")
    began = time.monotonic()
    assert await redeliver(consumer.on_next, [1], first, began + 60, 120, lambda: False) is first
    assert consumer.batches == [] and time.monotonic() - began < 30  # it did not wait for the pause


async def test_a_stopped_delivery_makes_no_further_attempt() -> None:
    consumer = Consumer(None)
    first = ValueError("first")
    assert await redeliver(consumer.on_next, [1], first, time.monotonic() + 5, 0.001, lambda: True) is first
    assert consumer.batches == []
    stopping = Consumer(ValueError("second"), None)
    stops = iter([False, True])
    last = await redeliver(stopping.on_next, [1], first, time.monotonic() + 5, 0.001, lambda: next(stops))
    assert str(last) == "second" and stopping.batches == [[1]]


async def test_values_that_do_not_decode_are_not_retried() -> None:
    unreadable = DecodeError("not a batch")
    consumer = Consumer(unreadable, None)
    assert (
        await redeliver(consumer.on_next, [1], ValueError("first"), time.monotonic() + 5, 0.001, lambda: False)
        is unreadable
    )
    assert consumer.batches == [[1]]
