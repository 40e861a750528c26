"""Early and updated results through the runtime: updates reach ``on_window`` and the Spark
handoff with their revisions, a restart goes on from the saved revisions and never emits a
second final result, and an ``on_window`` raising on an update takes the window_failed path."""

from __future__ import annotations

from typing import Any

from spark_sink import Handoff
from streams import Every, StreamId
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.testing import Harness

SENSOR = StreamId("sensors", "a")


class Counts:
    """A count per 10 s window, updated every second event."""

    event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10, emit=Every(events=2)), Count())

    def __init__(self, stream_id: StreamId) -> None: ...

    def on_window(self, result: Any) -> None: ...


def results(harness: Harness, cls: type) -> list[tuple[float, int, bool, int]]:
    return [(w.start, w.value, w.final, w.revision) for w in harness.windows(cls)]


async def test_updates_then_the_final_reach_on_window_and_a_restart_goes_on_from_the_revisions() -> None:
    async with Harness() as harness:
        harness.implicit("sensors")(Counts)
        await harness.publish("sensors/a", {"t": 1}, {"t": 2}, at=3)
        assert results(harness, Counts) == [(0.0, 2, False, 0)]
        await harness.restart()
        await harness.publish("sensors/a", {"t": 3}, {"t": 4}, {"t": 5}, at=6)
        await harness.restart()
        await harness.publish("sensors/a", {"t": 12}, at=13)  # W = 12: [0, 10) closes
        seen = results(harness, Counts)
        # A replay may give an update again, with its revision; never a second final.
        assert sorted(set(seen)) == [(0.0, 2, False, 0), (0.0, 4, False, 1), (0.0, 5, True, 2)]
        assert [r for r in seen if r[2]] == [(0.0, 5, True, 2)]
        assert seen[-1] == (0.0, 5, True, 2)


async def test_updates_by_the_processing_clock_come_at_ticks() -> None:
    class Ticking:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(60, emit=Every(10)), Count())

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_window(self, result: Any) -> None: ...

    async with Harness() as harness:
        harness.implicit("sensors")(Ticking)
        await harness.publish("sensors/a", {"t": 1}, {"t": 2}, at=5)
        await harness.advance_to(14)
        assert results(harness, Ticking) == []
        await harness.advance_to(15)  # a period after the window opened
        assert results(harness, Ticking) == [(0.0, 2, False, 0)]
        await harness.advance_to(40)  # nothing changed: nothing new
        await harness.publish("sensors/a", {"t": 3}, at=41)
        await harness.advance_to(41)
        assert results(harness, Ticking) == [(0.0, 2, False, 0), (0.0, 3, False, 1)]


async def test_an_on_window_raising_on_an_update_is_dead_lettered_and_the_final_still_comes() -> None:
    class Flaky:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10, emit=Every(events=1)), Count())
        got: list[tuple[bool, int]] = []

        def __init__(self, stream_id: StreamId) -> None: ...

        def on_window(self, result: Any) -> None:
            if (result.start, result.final, result.revision) == (0.0, False, 0):
                raise RuntimeError("no update, thanks")
            Flaky.got.append((result.final, result.revision))

    async with Harness() as harness:
        harness.implicit("sensors")(Flaky)
        await harness.publish("sensors/a", {"t": 1}, at=1)
        (letter,) = harness.dead_letters("window_failed")
        assert (letter.value["final"], letter.value["revision"], letter.value["value"]) == (False, 0, 1)
        assert letter.unit.endswith("[0.0, 10.0) revision 0")
        assert "RuntimeError: no update, thanks" in letter.detail
        await harness.publish("sensors/a", {"t": 2}, {"t": 11}, at=12)
        assert Flaky.got == [(False, 1), (True, 2), (False, 0)]  # [0, 10) goes on; [10, 20) opens
        assert len(harness.dead_letters("window_failed")) == 1


async def test_the_handoff_writes_updates_and_one_final_row_per_window_across_a_restart() -> None:
    class ToSpark:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10, emit=Every(events=2)), Count())
        handoff = Handoff("counts_early", {"n": "bigint"})

        def __init__(self, stream_id: StreamId) -> None: ...

    class FinalOnly:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
        handoff = Handoff("counts_final", {"n": "bigint"})

        def __init__(self, stream_id: StreamId) -> None: ...

    harness = Harness()  # the types first: the worker opens their handoff sinks as it starts
    harness.implicit("sensors")(ToSpark)
    harness.implicit("sensors")(FinalOnly)
    async with harness:
        await harness.publish("sensors/a", {"t": 1}, {"t": 2}, {"t": 3}, at=4)
        await harness.restart()
        await harness.publish("sensors/a", {"t": 4}, {"t": 15}, at=16)
        await harness.publish("sensors/a", {"t": 21}, at=22)
        rows = [
            (r["window_start"].timestamp(), r["n"], r["final"], r["revision"])
            for r in harness.handed_off("counts_early")
        ]
        finals = [r for r in rows if r[2]]
        assert finals == [(0.0, 4, True, 2), (10.0, 1, True, 0)]
        assert sorted(set(rows) - set(finals)) == [(0.0, 2, False, 0), (0.0, 4, False, 1)]
        # every update of a window is written before its final row
        assert max(i for i, r in enumerate(rows) if r[0] == 0.0 and not r[2]) < rows.index((0.0, 4, True, 2))
        plain = [
            (r["window_start"].timestamp(), r["n"], r["final"], r["revision"])
            for r in harness.handed_off("counts_final")
        ]
        assert plain == [(0.0, 4, True, 0), (10.0, 1, True, 0)]
