"""Windows of events in a worker: a window completes at its N-th event across a restart
(its partial count is saved with the checkpoint), and a partial one is emitted when the
stream completes."""

from __future__ import annotations

from typing import Any

from streams import StreamId
from streams.eventtime import Collect, EventTime, Hopping, OrderingPolicy
from streams.testing import Harness

READINGS = StreamId("readings", "s1")


class LastThree:
    """The last three readings of a sensor, every two readings."""

    event_time = EventTime(OrderingPolicy(timestamp_by="t"), Hopping(events=3, every=2), Collect(), select="v")

    def __init__(self, stream_id: StreamId) -> None: ...

    def on_window(self, result: Any) -> None: ...


async def test_a_window_of_events_completes_across_a_restart_and_a_partial_one_at_completion() -> None:
    async with Harness() as harness:
        harness.implicit("readings")(LastThree)
        await harness.publish(READINGS, {"t": 1, "v": "a"}, {"t": 2, "v": "b"}, at=3)
        assert harness.windows(LastThree) == []
        await harness.restart()
        await harness.publish(READINGS, {"t": 3, "v": "c"}, {"t": 4, "v": "d"}, at=5)
        assert [(w.start, w.end, w.value, w.closed_at) for w in harness.windows(LastThree)] == [
            (1.0, 3.0, ["a", "b", "c"], 5.0)
        ]
        await harness.complete(READINGS)
        # The partial one, by the final watermark (closed_at None); both are final results.
        assert [(w.start, w.value, w.closed_at) for w in harness.windows(LastThree)][1:] == [(3.0, ["c", "d"], None)]
        assert all(w.final and w.revision == 0 for w in harness.windows(LastThree))
        assert harness.dead_letters() == []
