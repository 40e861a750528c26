"""Event-time state saved in the changelog for topics of one event per record that other
programs write (``records="json"``...): each event's position there is its record's offset,
the same on every read however the records are grouped, so a saved state says exactly which
events it has and open windows no longer hold the committed offset; and a
handoff's mark of the events it handed off says which a replay has. The same for headrace's
own records is in test_saved_state.py."""

from __future__ import annotations

import anyio
import pytest

from spark_sink import EventHandoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_saved_state import Distinct, count_windows, publish_quiet_and_busy
from tests.streams.kafka.test_foreign_records import make_topic
from tests.streams.kafka.test_saved_state import (
    changelog_configs,
    committed,
    handed_off,
    handoff_rows,
    saved_states,
    stop_with_open_windows,
    wait_for_commit,
)

METERS = [StreamId("meters", f"m{i}") for i in range(5)]


def json_provider(bootstrap: str, topic: str, namespace: str, **kafka: object) -> StreamProvider:
    settings = {"idempotent": False, **kafka}
    return StreamProvider.kafka(bootstrap, topic, queues=1, records="json", namespace=namespace, kafka=settings)


async def publish(provider: StreamProvider, times: range | list[float], streams: list[StreamId]) -> None:
    """One JSON record ``{"t": t}`` for each time, to the streams in turn."""
    async with provider.client() as client:
        for n, t in enumerate(times):
            await client.get_stream(streams[n % len(streams)]).on_next({"t": float(t)})


async def test_a_quiet_stream_beside_a_busy_one_does_not_pin_a_json_topics_committed_offset(kafka_broker, kafka_topic):
    await make_topic(kafka_broker, kafka_topic, 1)
    provider = json_provider(kafka_broker, kafka_topic, "devices", group_membership=False)
    closed = count_windows(provider)
    async with provider:
        await publish_quiet_and_busy(provider, 500)  # offsets 0 (quiet), 1..500: 100 windows, the last open
        # The busy stream's last record is committed, though quiet's window [0, 5) is open.
        assert await wait_for_commit(kafka_broker, kafka_topic, 501) == 501
        # Each state is at the offset of the last record it holds (event index 0: one a record).
        assert await saved_states(kafka_broker, kafka_topic) == [("devices/busy", 500, 0), ("devices/quiet", 0, 0)]
        configs = await changelog_configs(kafka_broker, kafka_topic)  # made by headrace, not by a first write
        assert configs["cleanup.policy"] == "compact" and configs["segment.ms"] == "600000"
    assert not any(key == "quiet" for key, _, _ in closed)
    busy = [(k, v) for k, _, v in closed if k == "busy"]
    assert len(busy) == 99 and all(v == 5 for _, v in busy)
    # A restart reads only what came after: quiet's window closes with its saved event.
    provider = json_provider(kafka_broker, kafka_topic, "devices", group_membership=False)
    closed = count_windows(provider)
    async with provider:
        await provider.get_stream(StreamId("devices", "quiet")).on_next({"t": 7.0})  # offset 501
        await drained(provider, 30)
        (agent,) = provider.agents
        assert agent.read_events == 1
    assert closed == [("quiet", 0.0, 1)]


@pytest.mark.parametrize("ending", ["sigkill", "takeover"])
async def test_a_json_queue_restarted_or_taken_over_with_open_windows_loses_and_repeats_nothing(
    tmp_path, kafka_broker, kafka_topic, ending
):
    await make_topic(kafka_broker, kafka_topic, 1)
    replayed = await stop_with_open_windows(tmp_path, kafka_broker, kafka_topic, ending, "json")
    # An uninterrupted run's results (20 + 2 events a window), and the replay was the new
    # records only (at most 15), not the 100 the first worker had taken.
    assert sorted(await handed_off(kafka_broker, kafka_topic)) == [(0.0, 3600.0, 22)] * 5
    assert replayed <= 15


def hourly_counts(provider: StreamProvider, counted: list[str], distinct: list[str]) -> list[tuple[str, str, int]]:
    """One-hour windows of field ``t``: ``Counts`` (a count: its state is saved) on the
    namespaces ``counted``, ``Kinds`` (distinct values, a set: its windows hold the offset)
    on ``distinct``. Returns the list their results go to: (type, stream, value)."""
    closed: list[tuple[str, str, int]] = []
    for name, aggregate, namespaces in (("Counts", Count(), counted), ("Kinds", Distinct(), distinct)):

        class Hourly:
            event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(3600), aggregate, select="t")

            def __init__(self, stream_id: StreamId, name: str = name) -> None:
                self.name, self.stream = name, str(stream_id)

            def on_window(self, w) -> None:
                closed.append((self.name, self.stream, w.value))

        made = type(name, (Hourly,), {})
        for namespace in namespaces:
            provider.implicit(namespace)(made)
    return closed


async def wait_for_windows(closed: list, count: int) -> None:
    with anyio.fail_after(30):
        while len(closed) < count:
            await anyio.sleep(0.05)


async def test_a_replay_from_an_older_offset_regrouped_skips_exactly_what_each_state_has(kafka_broker, kafka_topic):
    """A consumer type whose state cannot be saved holds the offset at record 0, so the
    restart replays everything, in reads grouped otherwise than the first run's: the saved
    counts take only the records after the last one each holds."""
    await make_topic(kafka_broker, kafka_topic, 1)
    provider = json_provider(kafka_broker, kafka_topic, "meters", group_membership=False)
    hourly_counts(provider, ["meters"], ["meters"])
    async with provider:
        for n in range(100):  # offsets 0..99, read a few records at a time as they come
            await provider.get_stream(METERS[n % 5]).on_next({"t": float(n)})
        await drained(provider, 30)
        await anyio.sleep(1.5)  # a commit interval: the counts' states are saved
    assert await saved_states(kafka_broker, kafka_topic) == [(f"meters/m{i}", 95 + i, 0) for i in range(5)]
    assert await committed(kafka_broker, kafka_topic) is None  # the distinct values' windows hold offset 0
    await publish(json_provider(kafka_broker, kafka_topic, "meters"), [*range(100, 110), *[4000.0] * 5], METERS)
    provider = json_provider(kafka_broker, kafka_topic, "meters", group_membership=False)
    closed = hourly_counts(provider, ["meters"], ["meters"])
    async with provider:
        await wait_for_windows(closed, 10)
        (agent,) = provider.agents
        replayed = agent.read_events
    assert replayed == 115  # all of it, from offset 0
    # The counts restored, plus the 2 new events each; the distinct values rebuilt from the replay.
    assert sorted(closed) == [(t, f"meters/m{i}", 22) for t in ("Counts", "Kinds") for i in range(5)]


async def test_co_partitioned_topics_save_each_states_position_in_its_own_topic(kafka_broker, kafka_topic):
    """Two topics read together: a state's position is an offset of its stream's topic. The
    distinct values of one topic's streams hold the queue (both topics: its positions
    interleave theirs) at offset 0; a restart replays both, regrouped, and each saved count
    skips exactly the records of its own topic it has."""
    tolls, prices = f"{kafka_topic}-tolls", f"{kafka_topic}-prices"
    for topic in (tolls, prices):
        await make_topic(kafka_broker, topic, 1)

    def provider_of(**kafka: object) -> StreamProvider:
        settings = {"idempotent": False, **kafka}
        return StreamProvider.kafka(
            kafka_broker, topics={"tolls": tolls, "prices": prices}, queues=1, records="json", kafka=settings
        )

    streams = [StreamId("tolls", f"p{i}") for i in range(3)] + [StreamId("prices", f"p{i}") for i in range(2)]
    provider = provider_of(group_membership=False)
    hourly_counts(provider, ["tolls", "prices"], ["tolls"])
    async with provider:
        for n in range(50):  # tolls offsets 0..29 (10 a stream), prices 0..19 (10 a stream)
            await provider.get_stream(streams[n % 5]).on_next({"t": float(n)})
        await drained(provider, 30)
        await anyio.sleep(1.5)  # a commit interval: the counts' states are saved
    assert await saved_states(kafka_broker, tolls) == [
        ("prices/p0", 18, 0),
        ("prices/p1", 19, 0),
        ("tolls/p0", 27, 0),
        ("tolls/p1", 28, 0),
        ("tolls/p2", 29, 0),
    ]
    assert (await committed(kafka_broker, tolls), await committed(kafka_broker, prices)) == (None, None)
    await publish(provider_of(), [*range(50, 60), *[4000.0] * 5], streams)  # 2 more each, then close
    provider = provider_of(group_membership=False)
    closed = hourly_counts(provider, ["tolls", "prices"], ["tolls"])
    async with provider:
        await wait_for_windows(closed, 8)
        (agent,) = provider.agents
        replayed = agent.read_events
    assert replayed == 50 + 15  # both topics from offset 0
    assert sorted(closed) == sorted(
        [("Counts", str(s), 12) for s in streams] + [("Kinds", str(s), 12) for s in streams[:3]]
    )


async def test_events_handed_off_before_a_regrouped_replay_are_neither_lost_nor_repeated(kafka_broker, kafka_topic):
    """A windowless consumer hands its events to Spark once the watermark passes them. The
    events it holds (a quiet stream's at record 0, the busy one's last five) are saved in the
    state changelog: the offset passes them, and a restart restores them rather than
    replaying their records; the busy stream's events are each handed off once either way."""
    await make_topic(kafka_broker, kafka_topic, 1)

    def worker() -> StreamProvider:
        provider = json_provider(kafka_broker, kafka_topic, "m", group_membership=False, handoff_prefix=kafka_topic)

        @provider.implicit("m")
        class Readings:
            event_time = EventTime(OrderingPolicy(timestamp_by="t", out_of_order=5))
            handoff = EventHandoff("readings", {"t": "double"})

            def __init__(self, stream_id: StreamId) -> None:
                pass

        return provider

    quiet, busy = StreamId("m", "quiet"), StreamId("m", "busy")
    async with worker() as provider:
        await provider.get_stream(quiet).on_next({"t": 0.0})  # offset 0: held (its watermark is -5)
        for n in range(100):  # offsets 1..100, read a few records at a time as they come
            await provider.get_stream(busy).on_next({"t": float(n)})
        await drained(provider, 30)
    assert len(await handoff_rows(kafka_broker, kafka_topic, "readings")) == 95  # t 95..99 still held
    # Not held back at record 0 by the quiet stream's held event: it is in the saved state.
    assert (await committed(kafka_broker, kafka_topic) or 0) > 0
    async with worker() as provider:  # restores the held events, replays what came after the commit
        for n in range(100, 110):
            await provider.get_stream(busy).on_next({"t": float(n)})
        await drained(provider, 30)
    rows = await handoff_rows(kafka_broker, kafka_topic, "readings")
    assert sorted(r["t"] for r in rows if r["stream_id"] == "m/busy") == [float(n) for n in range(105)]
