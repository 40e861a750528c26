"""Session windows in the runtime: per key with group_by and with substreams on the memory
queues, refused events in the dead-letter store, and on the embedded store a session saved
with the checkpoint mid-way, restored by the next worker, and handed off to the log."""

from __future__ import annotations

from pathlib import Path

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Session, Sum
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_saved_state import saved_states, wait_for_checkpoint
from tests.helpers import handoff_rows, wait_until_async

T0 = 1_700_000_000.0


def sessions_of(provider: StreamProvider, spec: EventTime) -> list[tuple[str, object, float, float, object]]:
    closed: list[tuple[str, object, float, float, object]] = []

    @provider.implicit("clicks")
    class Visits:
        event_time = spec

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_window(self, w):
            closed.append((self.key, w.key, w.start - T0, w.end - T0, w.value))

    return closed


async def publish(provider: StreamProvider, key: str, *events: tuple[float, str, float]) -> None:
    stream = provider.get_stream(StreamId("clicks", key))
    for t, user, amount in events:
        await stream.on_next({"t": T0 + t, "user": user, "amount": amount})


async def test_sessions_per_key_on_memory_queues_and_a_refused_event_in_the_dead_letter_store():
    provider = StreamProvider.memory(queues=2)
    policy = OrderingPolicy(out_of_order=2, timestamp_by="t", action="accept")
    closed = sessions_of(provider, EventTime(policy, Session(10), Sum(), group_by="user", select="amount"))
    async with provider:
        await publish(provider, "shop", (0, "ann", 1), (4, "bob", 2), (8, "ann", 3), (15, "ann", 4), (16, "bob", 5))
        # W 14: bob's [4, 14) is emitted; ann's [0, 25) stays open
        await drained(provider)
        assert closed == [("shop", "bob", 4.0, 14.0, 2.0)]
        await publish(provider, "shop", (13, "bob", 100))  # [13, 23) would extend the emitted [4, 14)
        await publish(provider, "shop", (40, "ann", 6))  # W 38: closes ann's [0, 25) and bob's [16, 26)
        await drained(provider)
        letters = await provider.dead_letters.list(reason="window_closed")
        await provider.get_stream(StreamId("clicks", "shop")).on_completed()
        await drained(provider)
    assert closed == [
        ("shop", "bob", 4.0, 14.0, 2.0),
        ("shop", "ann", 0.0, 25.0, 8.0),
        ("shop", "bob", 16.0, 26.0, 5.0),
        ("shop", "ann", 40.0, 50.0, 6.0),
    ]
    assert [(d.value["user"], d.value["amount"]) for d in letters] == [("bob", 100)]


async def test_sessions_per_substream_close_by_their_own_watermark():
    provider = StreamProvider.memory(queues=1)
    spec = EventTime(OrderingPolicy(timestamp_by="t", over="user"), Session(5), Count())
    closed = sessions_of(provider, spec)
    async with provider:
        # bob's clock runs 100 s behind ann's: with one watermark every bob event would be
        # out of order; with substreams each user's sessions close by the user's own events.
        await publish(provider, "app", (100, "ann", 0), (1, "bob", 0), (103, "ann", 0), (3, "bob", 0), (9, "bob", 0))
        await drained(provider)
        assert closed == [("app", "bob", 1.0, 8.0, 2)]
        await publish(provider, "app", (200, "ann", 0))
        await drained(provider)
    assert closed == [("app", "bob", 1.0, 8.0, 2), ("app", "ann", 100.0, 108.0, 2)]


def handed_sessions(path: Path) -> list[tuple[float, float, int, str]]:
    rows = handoff_rows(path, "visits")
    return [(r["window_start"].timestamp() - T0, r["window_end"].timestamp() - T0, r["visits"], r["key"]) for r in rows]


def embedded_visits(path: Path) -> StreamProvider:
    provider = StreamProvider.embedded(path, queues=1)

    @provider.implicit("clicks")
    class Visits:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Session(30), Count(), group_by="user")
        handoff = Handoff("visits", {"visits": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    return provider


async def test_a_session_saved_mid_way_is_restored_by_the_next_worker_and_handed_off_once(tmp_path):
    first = embedded_visits(tmp_path)
    async with first:
        # records 0..3: ann's session [0, 50) holds three of them, bob's [5, 35) one
        await publish(first, "web", (0, "ann", 0), (5, "bob", 0), (10, "ann", 0), (20, "ann", 0))
        await drained(first)
        # its state is saved with the checkpoint: the open sessions no longer hold it
        assert await wait_for_checkpoint(tmp_path, 3) == 3
        assert saved_states(tmp_path) == [("clicks/web", 3, 0)]
    assert handed_sessions(tmp_path) == []
    second = embedded_visits(tmp_path)
    async with second:
        # W 40: bob's [5, 35) closes; ann's 40 joins [0, 50) -> [0, 70), known only from the state
        await publish(second, "web", (40, "ann", 0))
        await drained(second)
        assert await wait_until_async(lambda: len(handed_sessions(tmp_path)) == 1, 10)
        await publish(second, "web", (100, "ann", 0))  # W 100: [0, 70) closes with its 4 events
        await drained(second)
        assert await wait_until_async(lambda: len(handed_sessions(tmp_path)) == 2, 10)
    assert handed_sessions(tmp_path) == [(5.0, 35.0, 1, "bob"), (0.0, 70.0, 4, "ann")]
