"""A pulling agent whose queue fails: it retries with back-off through the one retry helper
(streams/core/retry.py), says so once per outage, loses nothing, and still stops."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.backends.memory.adapter import MemoryAdapterFactory, MemoryQueueAdapter, MemoryQueueReceiver
from streams.backends.memory.backend import MemoryBackend
from streams.core.batch import QueueMessage
from streams.core.errors import QueueAdapterError
from streams.core.ids import QueueId, SequenceToken
from tests.agents.delivery.conftest import GatedRecorder, Recorder, drained


class Outage:
    """Which calls fail, shared by the receivers: ``reads``/``acks`` more failures to come
    (``-1``: until further notice); every call is counted."""

    def __init__(self) -> None:
        self.reads = 0
        self.acks = 0
        self.empties = 0  # reads that bring nothing, not caught up (a fetch not yet answered)
        self.read_calls = 0
        self.ack_calls = 0


class FlakyReceiver(MemoryQueueReceiver):
    def __init__(self, queue: QueueId, inner: MemoryQueueReceiver, outage: Outage) -> None:
        self.queue, self._inner, self._outage = queue, inner, outage
        self._short = False  # the last read brought nothing without reaching the end

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        self._outage.read_calls += 1
        self._short = False
        if self._outage.reads:
            self._outage.reads -= self._outage.reads > 0
            raise QueueAdapterError("the queue is away")
        if self._outage.empties:
            self._outage.empties -= 1
            self._short = True
            return []
        return await self._inner.get_queue_messages(max_count)

    @property
    def caught_up(self) -> bool:  # type: ignore[override]  # the inner queue's answer
        return not self._short and self._inner.caught_up

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        self._outage.ack_calls += 1
        if self._outage.acks:
            self._outage.acks -= self._outage.acks > 0
            raise QueueAdapterError("the queue is away")
        await self._inner.messages_delivered(tokens)


class FlakyAdapter(MemoryQueueAdapter):
    def __init__(self, outage: Outage) -> None:
        super().__init__(queues=1)
        self.outage = outage

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> FlakyReceiver:
        return FlakyReceiver(queue, super().create_receiver(queue, max_record_size), self.outage)


class FlakyFactory(MemoryAdapterFactory):
    def __init__(self, outage: Outage) -> None:
        self._adapter = FlakyAdapter(outage)


SID = StreamId("ns", "s")


def flaky_provider(outage: Outage, **options: Any) -> StreamProvider:
    return StreamProvider(MemoryBackend(FlakyFactory(outage)), max_read_backoff=0.01, **options)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await anyio.sleep(0.001)


def agent_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "headrace.agent" and r.levelno >= logging.WARNING]


async def test_reads_that_fail_are_retried_with_one_line_at_each_end_of_the_outage_and_nothing_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage()
    provider = flaky_provider(outage)
    recorder = Recorder()
    caplog.set_level(logging.WARNING, logger="headrace.agent")
    async with provider:
        await provider.get_stream(SID).subscribe(recorder)
        await provider.get_stream(SID).on_next_batch([0, 1, 2])
        await drained(provider)
        outage.reads = 5
        await provider.get_stream(SID).on_next_batch([3, 4])
        await drained(provider)
        [agent] = provider.agents
        assert agent.read_failures == 5
    assert recorder.values == [0, 1, 2, 3, 4]
    lines = agent_warnings(caplog)
    assert len(lines) == 2, lines
    assert lines[0] == (
        "queue-0 is unreachable (QueueAdapterError: the queue is away); retrying with back-off, "
        "positions and data are kept"
    )
    assert lines[1].startswith("queue-0 is reachable again after ")


async def test_a_read_that_brings_nothing_before_the_queue_s_end_does_not_end_a_drain() -> None:
    # A Kafka fetch not yet answered, or a back-off after a failed read, brings nothing
    # while records wait; the receiver says it is not caught up. A drain took such a read
    # for the end of the queue and returned with the records unread.
    outage = Outage()
    provider = flaky_provider(outage, get_queue_msgs_timer_period=60)  # no timer reads
    recorder = Recorder()
    async with provider:
        await provider.get_stream(SID).subscribe(recorder)
        outage.empties = 3
        await provider.get_stream(SID).on_next_batch([0, 1, 2])
        await drained(provider)
        assert outage.empties == 0
        assert recorder.values == [0, 1, 2]


async def test_an_agent_whose_queue_stays_away_ends_its_retry_at_the_next_failure_once_stopping() -> None:
    outage = Outage()
    provider = flaky_provider(outage)
    recorder = Recorder()
    with anyio.fail_after(10):  # a hang guard, not a speed assertion
        async with provider:
            await provider.get_stream(SID).subscribe(recorder)
            await provider.get_stream(SID).on_next_batch([0, 1])
            await drained(provider)
            outage.acks = -1  # away until further notice
            await provider.get_stream(SID).on_next_batch([2])
            await until(lambda: outage.ack_calls >= 4)  # the agent is retrying its acknowledgement
            acks_before = outage.ack_calls
    assert outage.ack_calls - acks_before == 1
    assert recorder.values == [0, 1, 2]


async def test_at_shutdown_a_failed_acknowledgement_is_tried_once_more_then_left_to_the_next_owner() -> None:
    outage = Outage()
    # Reads come only when a producer wakes the agent: no timer read acknowledges meanwhile.
    provider = flaky_provider(outage, get_queue_msgs_timer_period=60)
    recorder = GatedRecorder()
    with anyio.fail_after(10):  # a hang guard, not a speed assertion
        async with provider:
            await provider.get_stream(SID).subscribe(recorder)
            await provider.get_stream(SID).on_next_batch([0, 1])
            [agent] = provider.agents
            await until(lambda: agent.read_messages >= 1)
            outage.acks = -1  # away until further notice
            recorder.gate.set()
            await until(lambda: recorder.values == [0, 1])
            assert outage.ack_calls == 0  # the consumer held the checkpoint until now
    assert outage.ack_calls == 2
