"""A run of steps whose callables raise is logged once, at its first step, until a step
refuses events with none raised, however the activation keeps its hooks' calls between steps
(agents.output.HookCalls: made for an emit, kept while a run of refused steps goes on)."""

from __future__ import annotations

import logging

import pytest

from streams import Event, StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained


def key_of(event: Event) -> float:
    return 1.0 / event.value["k"]  # k == 0 raises: the consumer's bug


async def test_a_run_of_refused_steps_is_logged_once_until_a_step_refuses_none_raised(
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
        [{"t": 1, "k": 1}, {"t": 2, "k": 0}],  # refused, raised: a run begins (logged)
        [{"t": 3, "k": 0}],  # refused again: the same run (quiet)
        [{"t": 4, "k": 1}],  # clean: nothing refused, the run goes on
        [{"t": 5, "k": 0}],  # the same run (quiet)
        [{"k": 1}],  # refused, none raised (no time: the data's): the run ends
        [{"t": 6, "k": 0}],  # refused, raised: a new run (logged)
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
    assert len(logged) == 2, logged
    assert all("ZeroDivisionError" in line for line in logged)
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
        "field 'ts' missing; fields present: user, page, t; token 0:0"
    )
