"""On Kafka too, a quiet stream's activation goes with its windows open: its state stays in the
changelog (no tombstone), and the stream's next data restores it. The embedded store's
counterpart is tests/end_to_end/durable/test_parked_activations.py."""

from __future__ import annotations

from streams import StreamProvider
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_parked_activations import publish, windows_of
from tests.helpers import wait_until_async
from tests.streams.kafka.test_saved_state import changelog_records, saved_states, wait_for_commit


async def test_an_open_window_is_parked_on_kafka_and_resumes_with_its_data(kafka_broker, kafka_topic):
    settings = {"idempotent": False, "group_membership": False}
    provider = StreamProvider.kafka(
        kafka_broker,
        kafka_topic,
        queues=1,
        kafka=settings,
        stream_inactivity_period=0.1,
        get_queue_msgs_timer_period=0.01,
    )
    closed, deactivated = windows_of(provider)
    async with provider:
        (agent,) = provider.agents
        await publish(provider, "d", 1.0, 2.0, 6.0)  # offsets 0..2: [0, 5) closes, [5, 10) open
        await drained(provider, 30)
        assert await wait_for_commit(kafka_broker, kafka_topic, 3) == 3
        assert await wait_until_async(lambda: deactivated == ["d"], 10), deactivated
        assert agent.stream_ids() == []
        assert await saved_states(kafka_broker, kafka_topic) == [("devices/d", 2, 0)]
        await publish(provider, "d", 7.0, 11.0)  # [5, 10) closes: 6 and 7
        await drained(provider, 30)
        assert await wait_until_async(lambda: len(closed) == 2, 20), closed
    assert closed == [("d", 0.0, 2), ("d", 5.0, 2)]
    # Saved at each checkpoint, never deleted while parked (no tombstone).
    assert [tombstone for _, tombstone in await changelog_records(kafka_broker, kafka_topic)].count(True) == 0
