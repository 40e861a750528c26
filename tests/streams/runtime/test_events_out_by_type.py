"""The events each consumer type's consumers were delivered (its ``events_out``), plain
consumers' as well as event-time ones', as a worker's snapshot and status rows count them:
kept when the streams go quiet and their consumers close, and nothing counted for an
in-process observer, which has no type."""

from __future__ import annotations

import anyio

from streams import StreamId, StreamProvider
from streams.adapters.status import AgentStatus, consumer_type_fates
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.runtime.snapshot import take_snapshot
from streams.runtime.status import agent_status
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0


async def test_plain_and_event_time_types_count_the_events_delivered_to_them():
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=0.01, stream_inactivity_period=0.1)

    @provider.implicit("logs")
    class Audit:  # a plain consumer
        def __init__(self, stream_id):
            pass

        def on_next(self, batch):
            pass

    @provider.implicit("meters")
    class PerTen:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            pass

    seen: list[object] = []
    async with provider:
        await provider.get_stream(StreamId("meters", "m1")).subscribe(seen.append)  # no type: not counted
        for stream_id, n in ((StreamId("meters", "m1"), 3), (StreamId("meters", "m2"), 2), (StreamId("logs", "l1"), 4)):
            stream = provider.get_stream(stream_id)
            for t in range(n):
                await stream.on_next({"t": T0 + t})
        await drained(provider)
        (queue,) = take_snapshot(provider).queues
        with anyio.fail_after(5):  # the quiet logs stream closes, and its consumer: its count stays
            while StreamId("logs", "l1") in provider.agents[0].stream_ids():
                await anyio.sleep(0.02)
        (quiet,) = take_snapshot(provider).queues
    audit, per_ten = (
        f"{__name__}.{test_plain_and_event_time_types_count_the_events_delivered_to_them.__name__}.<locals>.{n}"
        for n in ("Audit", "PerTen")
    )
    assert {name: f["events_out"] for name, f in queue.fates.items()} == {audit: 4, per_ten: 5}
    assert queue.events_delivered == 4 + 5 + 3  # the queue counts the observer's three too
    assert {name: f["events_out"] for name, f in quiet.fates.items()} == {audit: 4, per_ten: 5}
    assert (quiet.fates[audit]["events"], quiet.fates[per_ten]["events"]) == (0, 5)  # events: event time's
    row = agent_status("w", quiet, 0.0, 1.0)
    assert AgentStatus.from_row(row.as_row()).fates == row.fates
    totals = {t.consumer_type: t.events_out for t in consumer_type_fates([row, row])}  # two queues' rows add up
    assert totals == {audit: 8, per_ten: 10}
