"""Orleans' subscription semantics on headrace's API: handles that compare equal,
``handle.resume()`` with and without a token, stream filters, and what a subscription made
through ``provider.client()`` tells its user."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from streams import (
    ConfigurationError,
    KeptEvents,
    StreamId,
    StreamProvider,
    StreamSubscriptionHandle,
    SubscriptionNotFoundError,
)
from tests.agents.delivery.conftest import Recorder, drained

SID = StreamId("ns", "k")


async def publish(provider: StreamProvider, values: range) -> None:
    """One record per value, each drained: the tokens of the values are distinct records."""
    stream = provider.get_stream(SID)
    for value in values:
        await stream.on_next(value)
    await drained(provider)


def durable_types(provider: StreamProvider) -> tuple[type, type]:
    """Two registered consumer types, each recording the values that reach any instance."""

    @provider.consumer("First")
    class First:
        values: list = []

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:
            type(self).values.extend(batch.values)

    @provider.consumer("Second")
    class Second(First):
        values: list = []

    return First, Second


# -- handles ---------------------------------------------------------------------------------


async def test_handles_of_one_subscription_are_equal_however_obtained():
    """Orleans' ActiveSubscriptionTest: subscribe several times, then the stream's handles
    are exactly those subscriptions, as a set and one by one; after unsubscribing one, the
    others."""
    provider = StreamProvider.memory(queues=1)
    first, _ = durable_types(provider)
    async with provider:
        stream = provider.get_stream(SID)
        made = [await stream.subscribe(Recorder()) for _ in range(3)] + [await stream.subscribe(first)]
        listed = await stream.get_all_subscription_handles()
        assert set(listed) == set(made) and len(set(listed + made)) == 4
        assert sorted(h.durable for h in listed) == [False, False, False, True]
        assert all(made.count(h) == 1 for h in listed)  # each equals exactly one made
        await made[1].unsubscribe()
        assert set(await stream.get_all_subscription_handles()) == {made[0], made[2], made[3]}
        other = provider.get_stream(StreamId("ns", "other"))
        assert await other.get_all_subscription_handles() == []
    assert made[0] != made[2] and hash(made[0]) == hash(listed[listed.index(made[0])])


# -- resume ----------------------------------------------------------------------------------


@asynccontextmanager
async def subscribed(old: Recorder, published: int) -> AsyncIterator[tuple[StreamProvider, StreamSubscriptionHandle]]:
    """A worker on memory queues whose one in-process subscription (to ``old``) has taken
    the values ``0 .. published - 1``: the provider and the subscription's handle."""
    provider = StreamProvider.memory(queues=1)
    async with provider:
        handle = await provider.get_stream(SID).subscribe(old)
        await publish(provider, range(published))
        yield provider, handle


async def test_resume_hands_what_follows_to_the_new_observer():
    old, new = Recorder(), Recorder()
    async with subscribed(old, 5) as (provider, handle):
        (listed,) = await provider.get_stream(SID).get_all_subscription_handles()
        resumed = await listed.resume(new)
        await publish(provider, range(5, 9))
        assert resumed == handle
        assert await provider.get_stream(SID).get_all_subscription_handles() == [handle]
    assert old.values == [0, 1, 2, 3, 4]
    assert new.values == [5, 6, 7, 8]  # nothing skipped, nothing repeated


async def test_resume_with_a_token_replays_from_it():
    old, new = Recorder(), Recorder()
    async with subscribed(old, 10) as (provider, handle):
        await handle.resume(new, token=old.events[3].token)
        await drained(provider)
        await publish(provider, range(10, 12))
    assert old.values == list(range(10))
    assert new.values == list(range(3, 12))
    assert [e.token for e in new.events[:7]] == [e.token for e in old.events[3:]]


async def test_resume_of_a_durable_subscription_changes_its_type_for_good(tmp_path):
    provider = StreamProvider.embedded(tmp_path, queues=1)
    first, second = durable_types(provider)
    async with provider:
        handle = await provider.get_stream(SID).subscribe(first)
        await publish(provider, range(3))
        await handle.resume(second)
        await publish(provider, range(3, 5))
        (record,) = await provider.pubsub.subscriptions(SID)
        assert record.consumer_type == "Second"
    assert (first.values, second.values) == ([0, 1, 2], [3, 4])

    restarted = StreamProvider.embedded(tmp_path, queues=1)
    _, again = durable_types(restarted)  # a new process registers its types
    async with restarted:
        await publish(restarted, range(5, 7))
    assert again.values == [5, 6]  # the record names Second: it survived the restart


async def test_resume_makes_a_faulted_durable_subscription_deliver_again():
    provider = StreamProvider.memory(
        queues=1, fault_on_error=True, max_event_delivery_time=0.05, delivery_retry_backoff=0.01
    )
    first, second = durable_types(provider)

    @provider.consumer("Failing")
    class Failing(first):  # type: ignore[misc, valid-type]
        def on_next(self, batch) -> None:
            raise ValueError("bad")

    async with provider:
        handle = await provider.get_stream(SID).subscribe(Failing)
        await publish(provider, range(2))  # 0 fails every retry: faulted, 1 never delivered
        (faulted,) = await provider.pubsub.subscriptions(SID)
        await handle.resume(second)
        await publish(provider, range(2, 4))
        (resumed,) = await provider.pubsub.subscriptions(SID)
    assert (faulted.state.value, resumed.state.value) == ("faulted", "active")
    assert (resumed.consumer_type, second.values) == ("Second", [2, 3])


async def test_resume_refuses_what_it_cannot_do():
    provider = StreamProvider.memory(queues=1)
    first, _ = durable_types(provider)
    async with provider:
        stream = provider.get_stream(SID)
        durable = await stream.subscribe(first)
        with pytest.raises(ConfigurationError, match="resumes with a consumer type registered"):
            await durable.resume(Recorder())
        with pytest.raises(TypeError, match="token is a SequenceToken"):
            await durable.resume(first, token=3)
        gone = await stream.subscribe(Recorder())
        await gone.unsubscribe()
        with pytest.raises(SubscriptionNotFoundError, match=f"subscription {gone.subscription_id} of"):
            await gone.resume(Recorder())
        with pytest.raises(TypeError, match="a stream observer is a callable"):
            await (await stream.subscribe(Recorder())).resume(42)


# -- filters ---------------------------------------------------------------------------------


async def test_a_filter_keeps_the_events_it_returns_true_for():
    provider = StreamProvider.memory(queues=1)
    evens, everything, batches = Recorder(), Recorder(), []
    async with provider:
        stream = provider.get_stream(SID)
        await stream.subscribe(evens, filter=lambda e: e.value % 2 == 0)
        await stream.subscribe(everything)
        await stream.subscribe(batches.append, filter=lambda e: e.value > 2)
        await stream.on_next_batch(range(6))
        await stream.on_next_batch([7, 9])  # evens keeps none of it: not delivered to evens
        await drained(provider)
    assert evens.values == [0, 2, 4] and evens.batches == 1
    assert everything.values == [0, 1, 2, 3, 4, 5, 7, 9]
    assert [type(b).__name__ for b in batches] == ["KeptEvents", "EventBatch"]  # all kept: the batch
    assert isinstance(batches[0], KeptEvents) and batches[0].values == [3, 4, 5]
    assert [str(e.token) for e in evens.events] == ["0:0", "0:2", "0:4"]  # the gaps show
    assert await provider.dead_letters.list() == []


async def test_one_observer_under_two_filters_gets_what_either_keeps():
    """Orleans' MultipleSubscriptionsDifferentFilterData: one consumer subscribed twice,
    once for 3 and once for 7, receives exactly those two."""
    provider = StreamProvider.memory(queues=1)
    seen = Recorder()
    async with provider:
        stream = provider.get_stream(SID)
        await stream.subscribe(seen, filter=lambda e: e.value == 3)
        await stream.subscribe(seen, filter=lambda e: e.value == 7)
        await publish(provider, range(10))
    assert sorted(seen.values) == [3, 7]


async def test_a_raising_filter_dead_letters_its_event_and_the_stream_goes_on(caplog):
    provider = StreamProvider.memory(queues=1)
    kept, other = Recorder(), Recorder()
    async with provider:
        stream = provider.get_stream(SID)
        await stream.subscribe(kept, filter=lambda e: 1 / (e.value % 3) > 0)  # raises on 0, 3, 6
        await stream.subscribe(other)
        with caplog.at_level(logging.WARNING, "headrace.agent"):
            for start in (0, 3, 6):
                await stream.on_next_batch(range(start, start + 3))
            await drained(provider)
        await stream.on_next_batch([7, 8])
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert kept.values == [1, 2, 4, 5, 7, 8, 7, 8]
    assert other.values == [0, 1, 2, 3, 4, 5, 6, 7, 8, 7, 8]
    assert [(s.reason, s.value, s.event_index) for s in letters] == [
        ("filter_failed", 0, 0),
        ("filter_failed", 3, 0),
        ("filter_failed", 6, 0),
    ]
    assert "ZeroDivisionError: division by zero" in letters[0].detail
    warned = [r for r in caplog.records if "filter" in r.getMessage()]
    assert len(warned) == 1  # the first of the run, with its traceback; the rest in the letters
    assert "raised ZeroDivisionError" in warned[0].getMessage() and warned[0].exc_info is not None


class NoTruth:
    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array with more than one element is ambiguous")


async def test_a_filter_returning_nonsense_is_taken_by_truth_or_refused_clearly():
    provider = StreamProvider.memory(queues=1)
    truthy, lazy, ambiguous = Recorder(), Recorder(), Recorder()

    async def later(event):  # a coroutine is always true: refused, not taken as "keep"
        return False

    # One stream per filter: a store keeps one letter per event and reason, whichever
    # subscription wrote it (as for delivery_failed).
    streams = [provider.get_stream(StreamId("ns", key)) for key in ("truthy", "lazy", "ambiguous")]
    async with provider:
        await streams[0].subscribe(truthy, filter=lambda e: e.value.get("vip"))  # None, "", "gold"
        await streams[1].subscribe(lazy, filter=lambda e: later(e))
        await streams[2].subscribe(ambiguous, filter=lambda e: NoTruth())
        for stream in streams:
            await stream.on_next_batch([{"vip": None}, {"vip": ""}, {"vip": "gold"}])
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert truthy.values == [{"vip": "gold"}]
    assert lazy.values == [] and ambiguous.values == []
    assert sorted((letter.stream, letter.reason) for letter in letters) == sorted(
        [("ns/lazy", "filter_failed")] * 3 + [("ns/ambiguous", "filter_failed")] * 3
    )
    details = {letter.stream: letter.detail for letter in letters}
    assert details["ns/lazy"].endswith(
        "TypeError: a stream filter returns a bool, not a coroutine: make it a plain def"
    )
    assert details["ns/ambiguous"].endswith(
        "ValueError: the truth value of an array with more than one element is ambiguous"
    )


async def test_filters_refused_at_subscribe():
    provider = StreamProvider.memory(queues=1)
    first, _ = durable_types(provider)

    async def vip(event):
        return True

    async with provider:
        stream = provider.get_stream(SID)
        with pytest.raises(ConfigurationError, match="vip is async"):
            await stream.subscribe(Recorder(), filter=vip)
        with pytest.raises(ConfigurationError, match="a durable subscription .* takes no filter"):
            await stream.subscribe(first, filter=lambda e: True)
        with pytest.raises(ConfigurationError, match="a function of one event, not 'vip'"):
            await stream.subscribe(Recorder(), filter="vip")
        assert await stream.get_all_subscription_handles() == []


async def test_a_stalling_filter_holds_its_worker_until_it_returns_and_loses_nothing():
    """A filter is sync code: the delivery watchdog cannot cut it short (nothing can, in
    Python), so a stall delays delivery and nothing is dead-lettered."""
    provider = StreamProvider.memory(queues=1, max_event_delivery_time=0.05)
    kept, other = Recorder(), Recorder()

    def slow(event) -> bool:
        if event.value == 1:
            time.sleep(0.3)
        return True

    async with provider:
        stream = provider.get_stream(SID)
        await stream.subscribe(kept, filter=slow)
        await stream.subscribe(other)
        await stream.on_next_batch(range(3))
        await stream.on_next(3)
        await drained(provider)
        assert await provider.dead_letters.list() == []
    assert kept.values == other.values == [0, 1, 2, 3]


async def test_a_filter_is_kept_when_the_subscription_resumes():
    provider = StreamProvider.memory(queues=1)
    old, new = Recorder(), Recorder()
    async with provider:
        handle = await provider.get_stream(SID).subscribe(old, filter=lambda e: e.value % 2)
        await publish(provider, range(4))
        await handle.resume(new)
        await publish(provider, range(4, 8))
    assert (old.values, new.values) == ([1, 3], [5, 7])


# -- a client's subscriptions ----------------------------------------------------------------


async def test_an_observer_subscribed_through_a_client_is_warned_it_receives_nothing(caplog):
    provider = StreamProvider.memory(queues=1)
    first, _ = durable_types(provider)
    observer = Recorder()
    async with provider.client():
        stream = provider.get_stream(SID)
        with caplog.at_level(logging.WARNING, "headrace.provider"):
            await stream.subscribe(observer)
            await stream.subscribe(first)  # a durable one: a worker delivers it
        await stream.on_next(1)
    (warning,) = [r for r in caplog.records if r.name == "headrace.provider"]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage() == (
        "ns/k: an in-process observer subscribed through provider.client() receives nothing in "
        "this process: a client reads no queue. Subscribe it in a worker (async with provider), "
        "or subscribe a @provider.consumer() type, which the worker reading the stream delivers to"
    )
    assert observer.values == []
