"""A consumer type's refusals are logged once per worker run and kind (its callables raised;
an event's time could not be read), whatever stream, queue or step they come from; the rest
are dead-lettered and counted, not logged."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams import Event, StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.runtime.metrics import metric_families
from streams.runtime.snapshot import take_snapshot
from tests.agents.delivery.conftest import drained


def key_of(event: Event) -> float:
    return 1.0 / event.value["k"]  # k == 0 raises: the consumer's bug


async def test_refused_steps_are_logged_once_per_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = StreamProvider.memory(queues=1)
    windows: list[tuple[object, float, int]] = []

    @provider.implicit("booths")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count(), group_by=key_of)

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, result: object) -> None:
            windows.append((result.key, result.start, result.value))  # type: ignore[attr-defined]

    caplog.set_level(logging.WARNING, logger="headrace")
    batches = [
        [{"t": 1, "k": 1}, {"t": 2, "k": 0}],  # refused, raised: the first (logged)
        [{"t": 3, "k": 0}],  # refused again (counted)
        [{"t": 4, "k": 1}],  # clean
        [{"t": 5, "k": 0}],  # counted
        [{"k": 1}],  # refused, none raised (no time: the data's): the first of its kind (logged)
        [{"t": 6, "k": 0}],  # counted
    ]
    async with provider:
        stream = provider.get_stream(StreamId("booths", "b0"))
        for batch in batches:
            await stream.on_next_batch(batch)
            await drained(provider)
        await stream.on_completed()
        await drained(provider)
        letters = await provider.dead_letters.list()
    logged = [r.getMessage() for r in caplog.records if "its callables could not handle" in r.getMessage()]
    assert len(logged) == 1 and "ZeroDivisionError" in logged[0], logged
    untimed = [r.getMessage() for r in caplog.records if "could not read the event time" in r.getMessage()]
    assert len(untimed) == 1 and "field 't' missing" in untimed[0], untimed
    assert [letter.reason for letter in letters] == ["invalid_value"] * 3 + ["invalid_timestamp", "invalid_value"]
    assert ["ZeroDivisionError" in letter.detail for letter in letters] == [True, True, True, False, True]
    assert windows == [(1.0, 0.0, 2)]  # times 1 and 4, each counted once


async def test_a_typo_in_timestamp_by_names_the_missing_field_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``timestamp_by="ts"`` over events that carry ``t`` letters every
    event, each naming the field and the fields the event has, and the first is logged."""
    provider = StreamProvider.memory(queues=1)
    windows: list[object] = []

    @provider.implicit("clicks")
    class Sessions:
        event_time = EventTime(OrderingPolicy(timestamp_by="ts"), Tumbling(10), Count())

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, result: object) -> None:
            windows.append(result)

    caplog.set_level(logging.WARNING, logger="headrace")
    async with provider:
        stream = provider.get_stream(StreamId("clicks", "u1"))
        for n in range(3):  # three steps, each refusing all of its events: one run
            await stream.on_next_batch([{"user": "u1", "page": f"/{n}", "t": n}, {"user": "u1", "page": "/", "t": n}])
            await drained(provider)
        letters = await provider.dead_letters.list()
    assert windows == []
    assert [letter.reason for letter in letters] == ["invalid_timestamp"] * 6
    assert letters[0].detail == "field 'ts' missing; fields present: user, page, t; token 0:0"
    assert all(letter.detail.startswith("field 'ts' missing; fields present: user, page, t;") for letter in letters)
    (logged,) = [r.getMessage() for r in caplog.records if "could not read the event time" in r.getMessage()]
    assert logged.startswith("clicks/u1: ") and logged.endswith(
        "could not read the event time of 2 event(s) (dead-lettered invalid_timestamp); the first: "
        "field 'ts' missing; fields present: user, page, t; token 0:0 (the next of this consumer type are "
        "counted, not logged: headrace status, headrace dlq)"
    )


async def test_corrupt_events_across_streams_and_queues_log_one_line_and_count_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One event in three of 12 streams on 4 queues has no readable time, each between good
    ones (so every stream's refusals are apart): one warning in all, every one dead-lettered
    and counted in the metrics."""
    provider = StreamProvider.memory(queues=4)
    taken: list[int] = []

    @provider.implicit("meters")
    class Readings:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"))

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_events(self, events: list[Any]) -> None:
            taken.extend(e.record.value["n"] for e in events)

    caplog.set_level(logging.WARNING, logger="headrace")
    keys = [f"m{i}" for i in range(12)]
    async with provider:
        assert len({provider.mapper.get_queue_for_stream(StreamId("meters", k)).number for k in keys}) == 4
        n = 0
        for step in range(6):
            for key in keys:
                value = {"n": n, "t": "corrupt" if step % 3 == 1 else float(step)}
                await provider.get_stream(StreamId("meters", key)).on_next(value)
                n += 1
            await drained(provider)
        letters = await provider.dead_letters.list()
        families = metric_families(take_snapshot(provider), {})
    corrupt = {i for i in range(n) if (i // 12) % 3 == 1}
    assert sorted(taken) == sorted(set(range(n)) - corrupt)
    assert len(letters) == len(corrupt) == 24 and {x.reason for x in letters} == {"invalid_timestamp"}
    logged = [r for r in caplog.records if "could not read the event time" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert (
        logged[0]
        .getMessage()
        .endswith("(the next of this consumer type are counted, not logged: headrace status, headrace dlq)")
    )
    counted = [
        sample.value
        for family in families
        if family.name.startswith("headrace_eventtime_dead_lettered_events")
        for sample in family.samples
        if sample.labels.get("reason") == "invalid_timestamp" and sample.name.endswith("_total")
    ]
    assert sum(counted) == 24, counted
