"""A handoff append that fails is never lost in silence: a failure that
passes is retried with back-off while the checkpoint stays held, one log line per outage;
a window or event the handoff cannot take is dead-lettered (``handoff_failed``) with what
it held, and the rest goes on."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pyarrow as pa
import pytest

from spark_sink import EventHandoff, Handoff
from spark_sink.handoff import conform
from spark_sink.schema import HandoffSchema
from streams import StreamId, StreamProvider
from streams.backends.embedded.handoff_sink import EmbeddedHandoffSink
from streams.backends.embedded.store import EmbeddedStore
from streams.core.batch import Event
from streams.core.errors import HandoffRefusedError, HandoffSchemaError
from streams.core.ids import SequenceToken
from streams.eventtime import EventTime, OrderingPolicy, Sum, Tumbling
from streams.eventtime.results import EventOutcome, WindowResult
from tests.agents.delivery.conftest import drained
from tests.helpers import counting_provider, handoff_rows

METER = StreamId("meters", "m1")


class FlakySink:
    """A handoff sink whose first ``failures`` appends fail as a full disk would."""

    def __init__(self, sink: Any, failures: int) -> None:
        self._sink = sink
        self.failures = failures
        self.failed = anyio.Event()
        self.checkpoints_while_failing: list[int | None] = []
        self.agent: Any = None

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[Any]) -> int:
        if self.failures:
            self.failures -= 1
            self.checkpoints_while_failing.append(self.agent.receiver.checkpoint)
            if not self.failures:
                self.failed.set()
            raise OSError(28, "No space left on device")
        return await self._sink.write(source, consumer, partition, windows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


async def test_a_failing_append_is_retried_while_the_checkpoint_holds_and_nothing_is_lost(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    provider = counting_provider(tmp_path)
    async with provider:
        (agent,) = provider.agents
        sinks = agent.context.handoff_sinks
        flaky = sinks["counts"] = FlakySink(sinks["counts"], failures=4)  # type: ignore[index]
        flaky.agent = agent
        stream = provider.get_stream(METER)
        for t in [1.0, 2.0, 3.0, 12.0]:  # the last closes [0, 10): its append fails 4 times
            await stream.on_next({"t": t})
        with anyio.fail_after(10):
            await flaky.failed.wait()
        await drained(provider)
        await stream.on_next({"t": 25.0})  # closes [10, 20)
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert [(r["window_start"].timestamp(), r["count"]) for r in handoff_rows(tmp_path, "counts")] == [
        (0.0, 3),
        (10.0, 1),
        (20.0, 1),
    ]
    # Never past record 3 (t=12), whose step is retrying: record 0 (t=1) stays needed unless
    # the window's state up to record 0, 1 or 2 was saved with the checkpoint.
    assert len(flaky.checkpoints_while_failing) == 4
    assert all(c in (None, 0, 1, 2) for c in flaky.checkpoints_while_failing)
    assert letters == []
    outage = [r.getMessage() for r in caplog.records if "handoff stream 'counts'" in r.getMessage()]
    assert len(outage) == 2, outage  # one line when it began, one when it ended
    assert "No space left on device" in outage[0] and "reachable again" in outage[1]


async def test_windows_the_handoff_cannot_take_are_dead_lettered_and_the_rest_handed_off(tmp_path):
    provider = StreamProvider.embedded(tmp_path, queues=1)

    @provider.implicit("meters")
    class Totals:
        # bigint cannot hold a total of 2.5: that window is refused, the others go on
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Sum(), group_by="booth", select="toll")
        handoff = Handoff("totals", {"total": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    tolls = [(1.0, "a", 2.0), (2.0, "a", 0.5), (3.0, "b", 4.0), (12.0, "a", 3.0), (25.0, "b", 4.0)]
    async with provider:
        stream = provider.get_stream(METER)
        await stream.on_next_batch([{"t": t, "booth": booth, "toll": toll} for t, booth, toll in tolls])
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list()
        (agent,) = provider.agents
        checkpoint = agent.receiver.checkpoint
    handed = [
        (r["stream_id"], r["key"], r["window_start"].timestamp(), r["total"]) for r in handoff_rows(tmp_path, "totals")
    ]
    assert handed == [("meters/m1", "b", 0.0, 4), ("meters/m1", "a", 10.0, 3), ("meters/m1", "b", 20.0, 4)]
    [letter] = letters
    assert (letter.reason, letter.stream, letter.queue) == ("handoff_failed", "meters/m1", 0)
    assert letter.value == {"key": "a", "start": 0.0, "end": 10.0, "value": 2.5}
    assert "totals" in letter.detail and "total" in letter.detail
    # every toll is either handed off or in the dead letter
    assert sum(r[3] for r in handed) + letter.value["value"] == sum(toll for *_, toll in tolls)
    assert checkpoint == 1  # nothing held any more: the queue moved on


def window(key: str, end: float, value: object) -> WindowResult:
    return WindowResult(key, end - 10, end, value, None)


async def test_the_sink_names_each_window_it_cannot_take_and_appends_nothing(tmp_path):
    store = EmbeddedStore(tmp_path)
    try:
        sink = await anyio.to_thread.run_sync(EmbeddedHandoffSink, store, Handoff("n", {"n": "bigint"}))
        good, bad = window("a", 10, 1), window("b", 10, "many")
        with pytest.raises(HandoffRefusedError) as caught:
            await sink.write("s/1", "C", 0, [good, bad])
        [(item, why)] = caught.value.refused
        assert item is bad and "column 'n'" in why
        assert handoff_rows(tmp_path, "n") == []
        assert await sink.write("s/1", "C", 0, [good]) == 1
        events = EventHandoff("e", {"v": "double"})
        event_sink = await anyio.to_thread.run_sync(EmbeddedHandoffSink, store, events)
        outcome = EventOutcome(
            Event("not a mapping", 1.0, 1.0, SequenceToken(3, 0), METER), 0, None, 1.0, 1.0, "kept", None
        )
        with pytest.raises(HandoffRefusedError) as caught:
            await event_sink.write_events("s/1", "C", 0, [outcome], None)
        assert [item for item, _ in caught.value.refused] == [outcome]
    finally:
        store.close()


class PairwiseSchema(HandoffSchema):
    """A schema whose rows convert one by one but not together (as mixed Arrow types may)."""

    def to_table(self, data: Any) -> pa.Table:
        if len(data) > 1:
            raise HandoffSchemaError("mixed types")
        return super().to_table(data)


def test_rows_that_fail_only_together_are_all_refused_never_retried_for_ever():
    schema = PairwiseSchema.of({"n": "bigint"})
    with pytest.raises(HandoffRefusedError) as caught:
        conform(schema, [1, 2], lambda i: {"n": i}, "s")
    assert [(item, why) for item, why in caught.value.refused] == [
        (1, "handoff 's': mixed types"),
        (2, "handoff 's': mixed types"),
    ]


async def test_an_append_retried_past_the_delivery_limit_is_not_cut_short_by_the_watchdog(tmp_path):
    """The delivery watchdog times consumers, not the runtime's own appends: an outage longer
    than max_event_delivery_time dead-letters nothing, and every window is handed off once."""
    provider = counting_provider(tmp_path, max_event_delivery_time=0.5)
    async with provider:
        (agent,) = provider.agents
        sinks = agent.context.handoff_sinks
        # Five failures: the append's back-off (0.05 s, doubling) retries it for over 1.5 s,
        # three times max_event_delivery_time.
        flaky = sinks["counts"] = FlakySink(sinks["counts"], failures=5)  # type: ignore[index]
        flaky.agent = agent
        stream = provider.get_stream(METER)
        for t in [1.0, 2.0, 3.0, 12.0]:  # the last closes [0, 10): its append fails for ~1.5 s
            await stream.on_next({"t": t})
        with anyio.fail_after(30):
            await flaky.failed.wait()
        await stream.on_next({"t": 25.0})
        await drained(provider, 30)
        letters = await provider.dead_letters.list()
    assert letters == []
    assert [(r["window_start"].timestamp(), r["count"]) for r in handoff_rows(tmp_path, "counts")] == [
        (0.0, 3),
        (10.0, 1),
    ]
