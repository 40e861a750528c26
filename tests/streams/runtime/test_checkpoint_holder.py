"""What holds a queue's checkpoint back, as a worker's snapshot names it (the status rows,
``headrace status`` and the status page start from it): an activation with the reason it
holds (held events of one of its inputs, an emit in flight), and nothing once it lets go."""

from __future__ import annotations

import anyio

from streams import StreamId, StreamProvider
from streams.adapters.status import AgentStatus, CheckpointHolder
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.runtime.snapshot import take_snapshot
from streams.runtime.status import agent_status
from tests.agents.delivery.conftest import drained
from tests.streams.runtime.test_holder import register_tolls

T0 = 1_700_000_000.0


def holder(provider: StreamProvider) -> CheckpointHolder | None:
    (queue,) = take_snapshot(provider).queues
    return queue.checkpoint_holder


async def test_a_merged_input_whose_event_is_held_holds_the_checkpoint():
    provider = StreamProvider.memory(queues=1, co_partitioned=[("tolls", "prices")], get_queue_msgs_timer_period=0.02)
    register_tolls(provider)
    async with provider:
        await provider.get_stream(StreamId("prices", "a")).on_next({"t": T0 + 1})
        await provider.get_stream(StreamId("tolls", "a")).on_next({"t": T0 + 5})  # held: prices are at T0 + 1
        await drained(provider)
        held = holder(provider)
        (queue,) = take_snapshot(provider).queues
        row = agent_status("w", queue, 0.0, 1.0)
        # prices pass the toll: it goes, and the new price waits for the tolls in its turn
        await provider.get_stream(StreamId("prices", "a")).on_next({"t": T0 + 9})
        await drained(provider)
        with anyio.fail_after(5):
            while (after := holder(provider)) == held:
                await anyio.sleep(0.02)
    name = "tests.streams.runtime.test_holder.register_tolls.<locals>.Tolls"
    assert held == CheckpointHolder(1, "tolls/a", name, None, "tolls", "held events")  # the toll, second record
    assert after == CheckpointHolder(2, "tolls/a", name, None, "prices", "held events")
    assert row.checkpoint_holder == held
    assert AgentStatus.from_row(row.as_row()).checkpoint_holder == held  # as the embedded store keeps it


async def test_an_emit_in_flight_holds_the_checkpoint_until_it_returns():
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=0.02)
    gate = anyio.Event()

    @provider.implicit("meters")
    class Slow:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())

        def __init__(self, stream_id):
            pass

        async def on_window(self, result):
            await gate.wait()

    async with provider:
        stream = provider.get_stream(StreamId("meters", "m1"))
        for t in (1, 2, 15):  # 15 closes [0, 10): its emit waits on the gate
            await stream.on_next({"t": T0 + t})
        with anyio.fail_after(5):
            while holder(provider) is None or holder(provider).why != "an emit in flight":  # type: ignore[union-attr]
                await anyio.sleep(0.02)
        in_flight = holder(provider)
        gate.set()
        await drained(provider)
        after = holder(provider)
    name = "tests.streams.runtime.test_checkpoint_holder.test_an_emit_in_flight_holds_the_checkpoint_until_it_returns.<locals>.Slow"
    assert in_flight == CheckpointHolder(0, "meters/m1", name, None, None, "an emit in flight")
    # the window [10, 20) is open: its first event, the third record, holds the checkpoint now
    assert after == CheckpointHolder(2, "meters/m1", name, None, None, "open windows")


def test_the_holder_survives_the_kafka_status_topics_encoding():
    from streams.backends.kafka.status import WorkerReport, decode_report, encode_report

    held = CheckpointHolder(41, "tolls/a", "app.PricedTolls", None, "prices", "its input's event in force")
    row = AgentStatus("w1", 0, 0, 1, False, 1, 1, 0, None, None, 0.0, 1.0, checkpoint_holder=held)
    report = WorkerReport(
        "w1", "host/1", 0.0, 0.0, 1.0, [row, AgentStatus("w1", 1, 0, 1, False, 1, 1, 0, None, None, 0.0, 1.0)]
    )
    decoded = decode_report(encode_report(report))
    assert [a.checkpoint_holder for a in decoded.agents] == [held, None]
    # a row of another version, whose holder does not read, has none rather than failing
    assert CheckpointHolder.of({"sequence": 1}) is None and CheckpointHolder.of("nonsense") is None
