"""A consumer that raises: retried with back-off within ``max_event_delivery_time``, then
dead-lettered with its traceback; logged with its traceback; implicit activations never
faulted; every delivery runs with the worker, queue and stream in the logging context."""

from __future__ import annotations

import logging

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.runtime.logs import LogContextFilter
from tests.agents.delivery.conftest import drained

FAST_RETRIES = {"max_event_delivery_time": 5.0, "delivery_retry_backoff": 0.01}


class _Flaky:
    """Raises on its first ``fails`` calls for a batch holding ``bad``, then succeeds."""

    def __init__(self, fails: int, bad: object = 2) -> None:
        self.fails, self.bad = fails, bad
        self.calls = 0
        self.seen: list = []

    def step(self, batch) -> None:
        if any(e.value == self.bad for e in batch):
            self.calls += 1
            if self.calls <= self.fails:
                raise ValueError(f"boom {self.calls}")
        self.seen.extend(e.value for e in batch)


@pytest.mark.parametrize("shape", ["task", "inline"])
async def test_a_failed_delivery_is_retried_and_then_succeeds(shape):
    provider = StreamProvider.memory(queues=1, **FAST_RETRIES)
    flaky = _Flaky(fails=3)
    errors: list = []

    if shape == "task":

        class Consumer:
            async def on_next(self, batch):
                await anyio.sleep(0)  # may suspend: delivered by the consumer's task
                flaky.step(batch)

            async def on_error(self, error):
                errors.append(error)
    else:

        class Consumer:  # type: ignore[no-redef]
            def on_next(self, batch):  # cannot suspend: the agent calls it inline
                flaky.step(batch)

            def on_error(self, error):
                errors.append(error)

    async with provider:
        stream = provider.get_stream(StreamId("ns", "retry"))
        await stream.subscribe(Consumer())
        for n in range(5):
            await stream.on_next(n)
        await drained(provider)
        letters = await provider.dead_letters.count()
        (consumer,) = provider.agents[0].consumers(StreamId("ns", "retry"))
    assert flaky.seen == [0, 1, 2, 3, 4]  # in order, 2 once it stopped failing
    assert flaky.calls == 4
    assert (consumer.delivered_batches, consumer.delivered_events) == (5, 5)  # the retried one counts once
    assert errors == [] and provider.failure_handler.failures == 0 and letters == 0


@pytest.mark.parametrize("shape", ["task", "inline"])
async def test_a_delivery_failing_until_the_deadline_is_dead_lettered_once_with_its_traceback(shape, caplog):
    provider = StreamProvider.memory(queues=1, max_event_delivery_time=0.3, delivery_retry_backoff=0.01)
    flaky = _Flaky(fails=10**9)

    if shape == "task":

        async def consume_in_user_code(batch):
            await anyio.sleep(0)
            flaky.step(batch)
    else:

        def consume_in_user_code(batch):  # type: ignore[misc]
            flaky.step(batch)

    caplog.set_level(logging.INFO, logger="headrace")
    async with provider:
        stream = provider.get_stream(StreamId("ns", "dead"))
        await stream.subscribe(consume_in_user_code)
        for n in range(4):
            await stream.on_next(n)
        await drained(provider)
        letters = await provider.dead_letters.list(reason="delivery_failed")
    assert flaky.seen == [0, 1, 3]
    assert flaky.calls > 2  # retried, with back-off, before giving up
    assert provider.failure_handler.failures == 1
    (letter,) = letters
    assert (letter.value, letter.queue, letter.stream) == (2, 0, "ns/dead")
    # the detail keeps the traceback text: where in the consumer it raised
    assert "Traceback (most recent call last)" in letter.detail
    assert "consume_in_user_code" in letter.detail and f"ValueError: boom {flaky.calls}" in letter.detail
    # The first failure is logged at warning with its traceback, once: the retries are
    # quiet, and the dead-lettering is one line.
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("headrace")]
    first, failure = warnings
    assert first.exc_info is not None and str(first.exc_info[1]) == "boom 1"
    assert failure.name == "headrace.delivery" and failure.exc_info is None
    assert "consume_in_user_code" in caplog.text  # the logged traceback names the consumer's frame
    assert caplog.text.count("Traceback (most recent call last)") == 1


async def test_fault_on_error_spares_implicit_activations():
    provider = StreamProvider.memory(
        queues=1, fault_on_error=True, max_event_delivery_time=0.05, delivery_retry_backoff=0.01
    )
    seen: list = []

    @provider.implicit("imp")
    class Failing:
        def __init__(self, stream_id):
            pass

        async def on_next(self, batch):
            seen.extend(e.value for e in batch)
            if batch[0].value == 1:
                raise ValueError("bad")

    async with provider:
        stream = provider.get_stream(StreamId("imp", "s"))
        for n in range(4):
            await stream.on_next(n)
            await drained(provider)
        (consumer,) = provider.agents[0].consumers(StreamId("imp", "s"))
        letters = await provider.dead_letters.list(reason="delivery_failed")
    assert [v for v in seen if v != 1] == [0, 2, 3]  # delivery went on after the failure
    assert consumer.failures == 1 and not consumer.faulted
    assert [d.value for d in letters] == [1]


@pytest.mark.parametrize("shape", ["task", "inline"])
async def test_user_log_lines_in_a_consumer_carry_worker_queue_and_stream(shape):
    provider = StreamProvider.memory(queues=4, worker_name="w-log")
    user_log = logging.getLogger("user.consumer")
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    handler.addFilter(LogContextFilter())
    user_log.addHandler(handler)
    user_log.setLevel(logging.INFO)

    if shape == "task":

        async def consumer(batch):
            await anyio.sleep(0)
            user_log.info("got %d", len(batch))
    else:

        def consumer(batch):  # type: ignore[misc]
            user_log.info("got %d", len(batch))

    sids = [StreamId("ns", f"s{i}") for i in range(3)]
    try:
        async with provider:
            for sid in sids:
                await provider.get_stream(sid).subscribe(consumer)
            for sid in sids:
                await provider.get_stream(sid).on_next(1)
            await drained(provider)
    finally:
        user_log.removeHandler(handler)
    expected = sorted((provider.mapper.get_queue_for_stream(sid).number, str(sid)) for sid in sids)
    assert sorted((r.queue, r.stream) for r in records) == expected
    assert {r.worker for r in records} == {"w-log"}


async def test_an_activation_hooks_log_lines_carry_its_stream():
    provider = StreamProvider.memory(queues=2, worker_name="w-hooks")
    user_log = logging.getLogger("user.hooks")
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    handler.addFilter(LogContextFilter())
    user_log.addHandler(handler)
    user_log.setLevel(logging.INFO)

    @provider.implicit("hooked")
    class Hooked:
        def __init__(self, stream_id):
            pass

        async def on_activate(self):
            user_log.info("activated")

        def on_next(self, batch):
            user_log.info("batch")

    sid = StreamId("hooked", "h1")
    try:
        async with provider:
            await provider.get_stream(sid).on_next(1)
            await drained(provider)
    finally:
        user_log.removeHandler(handler)
    queue = provider.mapper.get_queue_for_stream(sid).number
    assert sorted((r.getMessage(), r.worker, r.queue, r.stream) for r in records) == [
        ("activated", "w-hooks", queue, "hooked/h1"),
        ("batch", "w-hooks", queue, "hooked/h1"),
    ]
