"""Delivery by the agent itself to consumers whose ``on_next`` cannot suspend: the same
calls in the same order as delivery by a consumer task, failures and watermarks included."""

from __future__ import annotations

import asyncio
import functools

import anyio

from agents.delivery import inline_on_next
from streams import StreamId, StreamProvider, inline
from streams.core.observer import as_observer
from tests.agents.delivery.conftest import Recorder, drained


@inline
async def _counts(batch):
    return len(batch)


async def _unmarked(batch):
    return len(batch)


class _Counter:
    @inline
    async def on_next(self, batch):
        self.n = len(batch)


def test_only_a_plain_function_or_one_marked_inline_is_called_where_the_data_arrives():
    def call(fn):
        return inline_on_next(as_observer(fn))

    assert call(len) is not None and call(lambda batch: None) is not None  # cannot suspend
    assert call(_counts) is not None and call(_Counter().on_next) is not None  # declared
    assert call(_unmarked) is None  # no await, but not declared: nothing is guessed
    assert call(functools.partial(_unmarked)) is None


async def test_an_inline_consumer_that_awaits_fails_that_delivery_with_a_clear_error():
    provider = StreamProvider.memory(queues=1, delivery_retry_backoff=120)  # no time to retry
    seen: list = []

    @inline
    async def awaits(batch):
        seen.extend(e.value for e in batch)
        if batch[0].value == 1:
            await anyio.sleep(0)

    async with provider:
        stream = provider.get_stream(StreamId("ns", "awaits"))
        await stream.subscribe(awaits)
        for n in range(3):
            await stream.on_next(n)
        await drained(provider)
        letters = await provider.dead_letters.list(reason="delivery_failed")
    assert [d.value for d in letters] == [1]  # only the batch that awaited, the others delivered
    assert "awaits is marked @inline but awaited" in letters[0].detail
    assert [v for v in seen if v != 1] == [0, 2]


async def test_consumers_called_inline_keep_no_task_while_caught_up():
    provider = StreamProvider.memory(queues=2)
    sids = [StreamId("idle", str(i)) for i in range(100)]
    recorders = [Recorder() for _ in sids]
    async with provider:
        before = len(asyncio.all_tasks())
        for sid, rec in zip(sids, recorders):
            await provider.get_stream(sid).subscribe(rec)
            await provider.get_stream(sid).subscribe(lambda batch: None)
        for sid in sids:
            await provider.get_stream(sid).on_next(sid.key)
        await drained(provider)
        await anyio.sleep(0.01)
        assert len(asyncio.all_tasks()) - before < 10
    assert [rec.values for rec in recorders] == [[sid.key] for sid in sids]


async def test_an_inline_failure_is_reported_before_the_next_batch_is_delivered():
    provider = StreamProvider.memory(queues=1, delivery_retry_backoff=120)  # no time to retry
    log: list = []

    class Failing:
        @inline
        async def on_next(self, batch):  # marked: called by the agent
            log.extend(e.value for e in batch)
            if batch[0].value == 2:
                raise ValueError("boom on 2")

        async def on_error(self, error):
            await anyio.sleep(0)
            log.append(str(error))

    async with provider:
        stream = provider.get_stream(StreamId("ns", "f"))
        await stream.subscribe(Failing())
        for n in range(5):
            await stream.on_next(n)
        await drained(provider)
        letters = await provider.dead_letters.list(reason="delivery_failed")
    assert log == [0, 1, 2, "boom on 2", 3, 4]
    assert provider.failure_handler.failures == 1
    assert [d.value for d in letters] == [2]


async def test_fault_on_error_stops_an_inline_consumer_at_its_first_failure():
    provider = StreamProvider.memory(queues=1, fault_on_error=True, delivery_retry_backoff=120)  # no retry
    seen: list = []

    def failing(batch):
        seen.extend(e.value for e in batch)
        raise ValueError("bad")

    async with provider:
        stream = provider.get_stream(StreamId("ns", "faulted"))
        await stream.subscribe(failing)
        for n in range(3):
            await stream.on_next(n)
        await drained(provider)
    assert seen == [0]


async def test_an_awaitable_returned_by_a_plain_function_is_awaited_in_order():
    provider = StreamProvider.memory(queues=1)
    seen: list = []

    async def record(batch):
        await anyio.sleep(0.001)
        seen.extend(e.value for e in batch)

    async with provider:
        stream = provider.get_stream(StreamId("ns", "a"))
        await stream.subscribe(lambda batch: record(batch))
        for n in range(10):
            await stream.on_next(n)
        await drained(provider)
    assert seen == list(range(10))


async def test_an_awaitable_returned_by_a_plain_function_is_under_the_watchdog():
    provider = StreamProvider.memory(queues=1, max_event_delivery_time=0.05)
    errors: list = []
    seen: list = []

    class Hanging:
        def on_next(self, batch):
            seen.extend(e.value for e in batch)
            return anyio.sleep(5) if batch[0].value == 0 else None

        def on_error(self, error):
            errors.append(error)

    async with provider:
        stream = provider.get_stream(StreamId("ns", "w"))
        await stream.subscribe(Hanging())
        await stream.on_next(0)
        await stream.on_next(1)
        await drained(provider)
    assert seen == [0, 1]
    assert len(errors) == 1 and "max_event_delivery_time" in str(errors[0])


async def test_watermarks_and_completion_keep_their_place_among_inline_batches():
    provider = StreamProvider.memory(queues=1)
    log: list = []

    class Obs:
        async def on_next(self, batch):
            log.extend(e.value for e in batch)

        async def on_watermark(self, watermark):
            await anyio.sleep(0)
            log.append(("watermark", watermark))

        async def on_completed(self):
            await anyio.sleep(0)
            log.append("completed")

    async with provider:
        stream = provider.get_stream(StreamId("ns", "p"))
        await stream.subscribe(Obs())
        await stream.on_next_batch([1, 2])
        await stream.advance_time(100.0)
        await stream.on_next(3)
        await stream.on_next(4)
        await stream.on_completed()
        await drained(provider)
    assert log == [1, 2, ("watermark", 100.0), 3, 4, "completed"]


async def test_a_large_reads_completions_run_between_its_slices_not_after_the_whole_read():
    # A backlog read at once (1,200 records, one read): what its streams leave to their
    # tasks (here each completion) runs once _PENDING_TASKS of them wait, before the agent
    # adds its next slice, not after all 600 streams were added.
    provider = StreamProvider.memory(queues=1)
    log: list = []
    streams = 600

    @provider.implicit("devices")
    class Device:
        def __init__(self, stream_id):
            self.key = stream_id.key

        @inline
        async def on_next(self, batch):
            log.append(("next", self.key))

        async def on_completed(self):
            log.append(("completed", self.key))

    async with provider:
        for i in range(streams):  # no await suspends: the agent reads all of it at once
            stream = provider.get_stream(StreamId("devices", str(i)))
            await stream.on_next_batch([i])
            await stream.on_completed()
        await drained(provider)
    keys = [str(i) for i in range(streams)]
    assert sorted(k for kind, k in log if kind == "next") == sorted(keys)
    assert sorted(k for kind, k in log if kind == "completed") == sorted(keys)
    assert all(log.index(("next", k)) < log.index(("completed", k)) for k in keys)
    # Each slice holds 32 streams: the first completion follows the slice in which the
    # 256th task began, well before the last stream's data.
    first = log.index(("completed", "0"))
    assert first < log.index(("next", str(streams - 1)))
    assert [kind for kind, _ in log[:first]].count("next") == 256
