"""A backlog gives what the live run gave: however long reading it takes, the
wall clock never overtakes the records. The worker's timer period (1 ms) is far shorter than
the read of the backlog, so its agent's timer runs throughout; every event's outcome, every
window and every dead letter must still equal what the records alone give (the core's replay
of the same arrivals), under adjust, drop and accept, however reads split the queue."""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.core.batch import BatchContainer, BatchKind
from streams.core.micros import to_micros, to_seconds
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from streams.eventtime.replay import Row
from tests.agents.delivery.conftest import GatedRecorder, drained
from tests.agents.eventtime.backlog import (
    HOUR,
    NAMESPACE,
    YEAR,
    Seen,
    backlog_rows,
    collect,
    containers,
    counting_type,
    reference,
)

STREAM = StreamId(NAMESPACE, "busy")

TICK = 0.001  # the agent's timer period: far shorter than reading the backlog
# A backlog of this many records is five reads of the worker's cache (4096 records), each
# hundreds of timer periods long: the timer falls due throughout the read.
RECORDS = 20_000


async def read_backlog(payloads, action: str, cache_size: int = 4096) -> tuple[dict[str, Seen], int]:
    """A memory queue holding ``payloads`` before its worker starts, read to its end by a
    worker whose reads take at most ``cache_size`` records: what each stream gave, and how
    many ticks the agent gave its activations."""
    provider = StreamProvider.memory(
        queues=1, get_queue_msgs_timer_period=TICK, cache_size=cache_size, cache_buckets=min(10, cache_size)
    )
    seen = counting_type(provider, action)
    adapter = await provider.factory.create_adapter()
    mapper = provider.factory.get_queue_mapper()
    for sid, payload in payloads:
        await adapter.queue_message_batch(mapper.get_queue_for_stream(sid), sid, payload)
    async with provider:
        await drained(provider, 120)
        await collect(provider, seen)
        [agent] = provider.agents
        ticks = agent.ticks
    return seen, ticks


@pytest.mark.parametrize("action", ["adjust", "drop", "accept"])
async def test_a_backlog_of_20000_records_an_hour_old_gives_what_the_records_alone_give(action):
    rows = backlog_rows(RECORDS, HOUR)  # one event a record, 10 ms apart
    expected = reference(rows, action)
    seen, _ = await read_backlog(containers(rows), action)
    assert seen["busy"].fates == expected.fates
    assert seen["busy"].windows == expected.windows
    assert seen["busy"].letters == expected.letters
    # Every fate occurs, so the comparison could fail: late and out-of-order events
    # adjusted, dropped, or accepted into their windows or dead-lettered.
    fates = expected.fates
    if action == "adjust":
        assert fates["adjusted"] > 6_000, fates
    elif action == "drop":
        assert fates["late_arrival_dropped"] > 4_000 and fates["out_of_order_dropped"] > 1_000, fates
    else:
        assert fates["window_closed"] > 200, fates


async def test_a_backlog_a_year_old_of_80000_events_in_records_of_4_gives_what_the_records_alone_give():
    rows = backlog_rows(4 * RECORDS, YEAR, per_record=4, seed=5)  # RECORDS records of 4 events
    seen, _ = await read_backlog(containers(rows), "accept")
    assert seen["busy"].all() == reference(rows, "accept").all()


@pytest.mark.parametrize("action", ["adjust", "accept"])
async def test_reads_of_1_100_and_10000_records_give_the_same(action):
    rows = backlog_rows(12_000, HOUR, seed=7)  # one event a record
    expected = reference(rows, action).all()
    for cache_size in (1, 100, 10_000):
        seen, _ = await read_backlog(containers(rows), action, cache_size)
        assert seen["busy"].all() == expected, cache_size


@pytest.mark.parametrize("action", ["adjust", "drop", "accept"])
async def test_a_quiet_stream_in_a_backlog_follows_the_records_clock(action):
    # One record in 200 of the backlog's first half is the quiet stream's; then it is
    # silent while the busy stream's records go on. Its windows close by the agent's ticks
    # at the records' clock (the busy stream's arrivals), never the wall clock's, and under
    # accept each of its records is judged after catching up with the clock as the busy
    # stream's records left it: the reference ticks it there too.
    rows = backlog_rows(30_000, HOUR, quiet_every=200, seed=3)
    seen, ticks = await read_backlog(containers(rows), action)
    for key in ("busy", "quiet"):
        assert seen[key].all() == reference(rows, action, key).all(), key
    assert ticks > 0  # the quiet stream's windows were closed by ticks, not by its completion
    assert len(seen["quiet"].windows) > 10


@pytest.mark.parametrize("closing", ["late_arrival", "idle_timeout"])
async def test_a_worker_that_caught_up_and_went_quiet_closes_windows_by_the_wall_clock(closing):
    # A backlog an hour old, not completed: once the worker has read it all, the queue is
    # caught up and the wall clock ticks it, closing the windows the records left open
    # (which the records' own clock never would) with what the records put in them; then a
    # live event's window closes by the wall clock too, as before.
    if closing == "late_arrival":
        ordering, window = OrderingPolicy(late_arrival=0.05, out_of_order=0.01), Tumbling(0.1)
    else:
        ordering, window = OrderingPolicy(out_of_order=0.01), Tumbling(0.1, idle_timeout=0.1)
    rows = backlog_rows(5_000, HOUR, lags=(0.03, 0.3), seed=11)
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=TICK)
    seen = counting_type(provider, "adjust", ordering=ordering, window=window)
    adapter = await provider.factory.create_adapter()
    for sid, payload in containers(rows, complete=False):
        await adapter.queue_message_batch(provider.factory.get_queue_mapper().get_queue_for_stream(sid), sid, payload)
    expected = reference(rows, "adjust", ordering=ordering, window=window, then=time.time())
    async with provider:
        await drained(provider)
        with anyio.fail_after(10):
            while len(seen["busy"].windows) < len(expected.windows):
                await anyio.sleep(0.01)
        await collect(provider, seen)
        assert seen["busy"].all() == expected.all()
        await provider.get_stream(STREAM).on_next(-1, event_time=time.time())  # live, now
        with anyio.fail_after(10):  # its window closes by the wall clock alone
            while seen["busy"].windows[-1][2] != (-1,):
                await anyio.sleep(0.01)


async def merged_backlog(late_arrival: float | None) -> tuple[list[tuple[str, int, float, str]], StreamProvider]:
    """A backlog an hour old of one key's tolls (600, 0.1 s apart, each on time) and one
    price before them, read by an activation over both inputs (no window: events leave in
    event-time order once the merged watermark passes them); prices then complete."""
    provider = StreamProvider.memory(
        queues=1, co_partitioned=[("tolls", "prices")], get_queue_msgs_timer_period=TICK, cache_size=50
    )
    released: list[tuple[str, int, float, str]] = []

    @provider.implicit("tolls", "prices")
    class PricedTolls:
        event_time = EventTime(OrderingPolicy(late_arrival=late_arrival), inputs=("tolls", "prices"))

        def __init__(self, stream_id):
            pass

        def on_events(self, events):
            released.extend((e.record.stream_id.namespace, e.record.value, e.timestamp, e.status) for e in events)

    first = time.time() - HOUR
    prices, tolls = StreamId("prices", "b1"), StreamId("tolls", "b1")
    records = [(prices, BatchContainer(prices, BatchKind.DATA, first, [-1], [first]))]
    for n in range(600):
        at = first + 0.1 * (n + 1)
        records.append((tolls, BatchContainer(tolls, BatchKind.DATA, at, [n], [at])))
    records.append((prices, BatchContainer(prices, BatchKind.COMPLETED, first + 60.1, [])))
    adapter = await provider.factory.create_adapter()
    for sid, container in records:
        await adapter.queue_message_batch(
            provider.factory.get_queue_mapper().get_queue_for_stream(sid), sid, container.encode()
        )
    async with provider:
        await drained(provider)
    exact = [to_seconds(to_micros(first + 0.1 * n)) for n in range(601)]  # to the microsecond
    expected = [("prices", -1, exact[0], "kept")] + [("tolls", n, exact[n + 1], "kept") for n in range(600)]
    assert released == expected  # each on time, in event-time order, at its own timestamp
    return released, provider


async def test_a_silent_input_holds_a_backlog_back_for_seconds_of_the_records_clock(caplog):
    # Without late_arrival the silent prices hold every toll back; the hold-back is reported
    # once it has lasted 5 s of processing time: the records' (60 s of tolls), though reading
    # them takes a fraction of a second of the wall clock's.
    caplog.set_level(logging.INFO, "headrace.eventtime")
    await merged_backlog(None)
    held = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "input 'prices'" in r.getMessage()
    ]
    assert len(held) == 1 and " holds the merged watermark back " in held[0] and " for 5 s " in held[0], held


async def test_ticks_move_a_silent_input_by_the_records_clock_in_a_backlog():
    # With late_arrival the ticks move the silent prices (and the tolls) to the records'
    # clock - L, never the wall clock's: every toll keeps its own time. (At the wall
    # clock's, every toll after the first tick would be adjusted to an hour later.)
    await merged_backlog(5.0)


async def test_a_stuck_observer_of_the_same_stream_does_not_hold_the_activations_ticks_back():
    # A tick waits for the records of its own activation only: an in-process observer of the
    # same stream, stuck in its first delivery, does not keep the windows from closing.
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=0.01)
    results: list[int] = []

    @provider.implicit("quiet")
    class Counts:
        event_time = EventTime(OrderingPolicy(late_arrival=0.05), Tumbling(0.1), Count())

        def __init__(self, stream_id):
            pass

        def on_window(self, result):
            results.append(result.value)

    stuck = GatedRecorder()
    async with provider:
        stream = provider.get_stream(StreamId("quiet", "q"))
        await stream.subscribe(stuck)
        await stream.on_next_batch(["x", "y", "z"])
        with anyio.fail_after(5):
            while not results:  # only ticks can close the window
                await anyio.sleep(0.01)
        assert stuck.events == []  # still in its first delivery
        stuck.gate.set()
    assert results == [3]


@pytest.mark.parametrize("action", ["adjust", "accept"])
async def test_a_record_at_the_instant_an_idle_timeout_falls_due_counts_first(action):
    # The contract: "an event that arrives at the very instant a timeout falls due counts as
    # ingested first". Window [t0, t0+10) of `busy` falls idle-due at t0+15 (its last event
    # arrived at t0+9, idle_timeout 5). Another stream's record moves the queue's clock to
    # t0+15, then `busy`'s next record arrives at that same instant with a time inside the
    # window: neither the agent's tick at the records' clock nor the catch-up before the
    # batch (under accept) may close the window first.
    t0 = (time.time() - HOUR) // 10 * 10
    rows = [
        Row(0, t0 + 1, t0 + 1, "busy"),
        Row(1, t0 + 9, t0 + 9, "busy"),
        Row(2, t0 + 15, t0 + 15, "other"),
        Row(3, t0 + 15, t0 + 5, "busy"),
    ]
    provider = StreamProvider.memory(queues=1, get_queue_msgs_timer_period=TICK, cache_size=1, cache_buckets=1)
    ordering = OrderingPolicy(out_of_order=100.0, late_arrival=1000.0, action=action)  # ticks follow the clock
    seen = counting_type(provider, action, ordering=ordering, window=Tumbling(10, idle_timeout=5))
    adapter = await provider.factory.create_adapter()
    mapper = provider.factory.get_queue_mapper()
    for sid, payload in containers(rows):
        await adapter.queue_message_batch(mapper.get_queue_for_stream(sid), sid, payload)
    async with provider:
        await drained(provider, 30)
        await collect(provider, seen)
    assert seen["busy"].windows == [(t0, t0 + 10, (0, 1, 3))]
    assert seen["busy"].letters == []
    assert seen["busy"].fates["adjusted"] == 0
