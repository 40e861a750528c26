"""A session window's state in the Kafka changelog: saved mid-session, the committed offset
not held by the open session, and restored by the next worker, which extends and closes it."""

from __future__ import annotations

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Session
from tests.agents.delivery.conftest import drained
from tests.helpers import wait_until_async
from tests.streams.kafka.test_saved_state import kafka_provider, saved_states, wait_for_commit


def visits(provider: StreamProvider) -> list[tuple[str, float, float, int]]:
    closed: list[tuple[str, float, float, int]] = []

    @provider.implicit("clicks")
    class Visits:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Session(30), Count(), group_by="user")

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, w):
            closed.append((w.key, w.start, w.end, w.value))

    return closed


async def publish(provider: StreamProvider, *events: tuple[float, str]) -> None:
    stream = provider.get_stream(StreamId("clicks", "web"))
    for t, user in events:
        await stream.on_next({"t": t, "user": user})


async def test_a_session_in_the_changelog_is_restored_by_the_next_worker(kafka_broker, kafka_topic):
    first = kafka_provider(kafka_broker, kafka_topic)
    closed = visits(first)
    async with first:
        await publish(first, (0.0, "ann"), (5.0, "bob"), (10.0, "ann"), (20.0, "ann"))  # offsets 0..3
        await drained(first, 30)
        # every record is committed: the open sessions are in the changelog, not held
        assert await wait_for_commit(kafka_broker, kafka_topic, 4) == 4
        assert await saved_states(kafka_broker, kafka_topic) == [("clicks/web", 3, 0)]
    assert closed == []
    second = kafka_provider(kafka_broker, kafka_topic)
    closed = visits(second)
    async with second:
        await publish(second, (40.0, "ann"))  # W 40: bob's [5, 35) closes; ann's becomes [0, 70)
        await publish(second, (100.0, "ann"))  # W 100: ann's [0, 70) closes with its 4 events
        await drained(second, 30)
        assert await wait_until_async(lambda: len(closed) == 2, 20), closed
    assert closed == [("bob", 5.0, 35.0, 1), ("ann", 0.0, 70.0, 4)]
