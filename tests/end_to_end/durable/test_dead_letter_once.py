"""One dead letter per (queue, position, reason), whatever replays; event-time dead letters
name their queue."""

from __future__ import annotations

import pytest

from streams import StreamId, StreamProvider
from streams.backends.embedded.deadletters import EmbeddedDeadLetterStore
from streams.backends.embedded.store import EmbeddedStore
from streams.backends.memory.stores import MemoryDeadLetterStore
from streams.core.deadletters import DeadLetter
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0


def _letters() -> list[DeadLetter]:
    return [
        DeadLetter("out_of_order", stream="ns/a", queue=1, sequence_number=7, event_index=0, value=1),
        DeadLetter("out_of_order", stream="ns/a", queue=1, sequence_number=7, event_index=1, value=2),
        DeadLetter("window_closed", stream="ns/a", queue=1, sequence_number=7, event_index=1, value=2),
        DeadLetter("out_of_order", stream="ns/b", queue=2, sequence_number=7, event_index=0, value=3),
        DeadLetter("undecodable", queue=1, sequence_number=8, payload=b"\x00"),
    ]


@pytest.fixture(params=["memory", "embedded"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryDeadLetterStore()
    else:
        with EmbeddedStore(tmp_path / "store") as s:
            yield EmbeddedDeadLetterStore(s)


async def test_a_window_rebuilt_and_failed_again_is_one_letter(store):
    def failed(held_from: int) -> DeadLetter:  # a replay may hold from elsewhere: the unit decides
        return DeadLetter(
            "window_failed", stream="rooms/r1", queue=0, sequence_number=held_from, unit="Counts None [10.0, 20.0)"
        )

    other = DeadLetter("window_failed", stream="rooms/r1", queue=0, sequence_number=0, unit="Counts None [20.0, 30.0)")
    event = DeadLetter("late_arrival", stream="rooms/r1", queue=0, sequence_number=0, event_index=0)
    await store.add([failed(0), other, event])
    await store.add([failed(3), failed(0)])  # restarts and replays write it again
    kept = await store.list()
    assert [(x.reason, x.unit) for x in kept] == [
        ("window_failed", "Counts None [10.0, 20.0)"),
        ("window_failed", "Counts None [20.0, 30.0)"),
        ("late_arrival", None),
    ]


async def test_a_store_keeps_one_letter_per_queue_position_and_reason(store):
    await store.add(_letters())
    await store.add(_letters()[1:])  # a replay writes them again
    await store.add([_letters()[0], _letters()[0]])  # twice in one call
    # a letter with no position cannot be told apart from another: both are kept
    await store.add([DeadLetter("other", value="x"), DeadLetter("other", value="x")])
    kept = await store.list(limit=100)
    assert [(d.reason, d.queue, d.sequence_number, d.event_index, d.value) for d in kept] == [
        ("out_of_order", 1, 7, 0, 1),
        ("out_of_order", 1, 7, 1, 2),
        ("window_closed", 1, 7, 1, 2),
        ("out_of_order", 2, 7, 0, 3),
        ("undecodable", 1, 8, None, None),
        ("other", None, None, None, "x"),
        ("other", None, None, None, "x"),
    ]
    assert await store.count() == 7 and await store.count("out_of_order") == 3


def _counting_rooms(provider: StreamProvider) -> list:
    """Registers ten-second counts of the ``rooms`` streams that drop out-of-order events;
    returns the list their windows go to, as (start - T0, count)."""
    results: list = []

    @provider.implicit("rooms")
    class Counts:
        event_time = EventTime(
            OrderingPolicy(out_of_order=0, timestamp_by="t", action="drop"), Tumbling(10, origin=T0), Count()
        )

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            results.append((result.start - T0, result.value))

    return results


def _provider(path) -> tuple[StreamProvider, list]:
    provider = StreamProvider.embedded(path, queues=2)
    return provider, _counting_rooms(provider)


async def test_a_worker_replaying_a_held_range_records_its_dead_letters_once(tmp_path):
    sid = StreamId("rooms", "r1")
    provider, first = _provider(tmp_path / "store")
    async with provider:
        for offset in (0, 5, 12, 3):  # 12 closes [0, 10); 3 then comes out of order
            await provider.get_stream(sid).on_next({"t": T0 + offset})
        await drained(provider)
        before = await provider.dead_letters.list(reason="out_of_order")
    # [10, 20) is still open: the checkpoint stays at 12, so a restart replays 12 and 3
    provider, second = _provider(tmp_path / "store")
    async with provider:
        await drained(provider)
        after = await provider.dead_letters.list(reason="out_of_order")
        counts = await provider.dead_letters.count()
    assert first == [(0, 2)]
    queue = provider.mapper.get_queue_for_stream(sid).number
    assert [(d.value["t"] - T0, d.queue, d.stream) for d in before] == [(3, queue, "rooms/r1")]
    assert after == before and counts == 1  # the replay wrote it again: still one


async def test_event_time_dead_letters_name_their_queue():
    provider = StreamProvider.memory(queues=4)
    _counting_rooms(provider)
    sids = [StreamId("rooms", f"r{i}") for i in range(4)]
    async with provider:
        for sid in sids:
            for offset in (5, 1):
                await provider.get_stream(sid).on_next({"t": T0 + offset})
        await drained(provider)
        letters = await provider.dead_letters.list(reason="out_of_order")
    assert sorted((d.stream, d.queue) for d in letters) == sorted(
        (str(sid), provider.mapper.get_queue_for_stream(sid).number) for sid in sids
    )
