"""Event-time state saved in the changelog for topics of one event per record that other
programs write (``records="json"``...): each event's position there is its record's offset,
the same on every read however the records are grouped, so a saved state says exactly which
events it has and open windows no longer hold the committed offset (issue 14, item 1). The
same for headrace's own records is in test_saved_state.py."""

from __future__ import annotations

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

from ..core.conftest import drained
from ..durable.test_saved_state import Distinct, count_windows, publish_quiet_and_busy
from .test_foreign_records import make_topic
from .test_saved_state import (
    changelog_configs,
    committed,
    handed_off,
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


async def test_a_replay_from_an_older_offset_regrouped_skips_exactly_what_each_state_has(
    kafka_broker, kafka_topic, caplog
):
    """A consumer type whose state cannot be saved holds the offset at record 0, so the
    restart replays everything, in reads grouped otherwise than the first run's: the saved
    counts take only the records after the last one each holds."""
    await make_topic(kafka_broker, kafka_topic, 1)
    counts: list[tuple[str, int]] = []
    distinct: list[tuple[str, int]] = []

    def worker() -> StreamProvider:
        provider = json_provider(kafka_broker, kafka_topic, "meters", group_membership=False)
        for name, aggregate, out in (("Counts", Count(), counts), ("Kinds", Distinct(), distinct)):

            class Hourly:
                event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(3600), aggregate, select="t")

                def __init__(self, stream_id: StreamId, out: list = out) -> None:
                    self.key, self.out = stream_id.key, out

                def on_window(self, w) -> None:
                    self.out.append((self.key, w.value))

            provider.implicit("meters")(type(name, (Hourly,), {}))
        return provider

    async with worker() as provider:
        for n in range(100):  # offsets 0..99, read a few records at a time as they come
            await provider.get_stream(METERS[n % 5]).on_next({"t": float(n)})
        await drained(provider, 30)
        await anyio.sleep(1.5)  # a commit interval: the counts' states are saved
    assert await saved_states(kafka_broker, kafka_topic) == [(f"meters/m{i}", 95 + i, 0) for i in range(5)]
    assert await committed(kafka_broker, kafka_topic) is None  # the distinct values' windows hold offset 0
    await publish(json_provider(kafka_broker, kafka_topic, "meters"), [*range(100, 110), *[4000.0] * 5], METERS)
    async with worker() as provider:
        with anyio.fail_after(30):
            while len(counts) < 5 or len(distinct) < 5:
                await anyio.sleep(0.05)
        (agent,) = provider.agents
        replayed = agent.read_events
    assert replayed == 115  # all of it, from offset 0
    assert sorted(counts) == [(m.key, 22) for m in METERS]  # restored, plus the 2 new each
    assert sorted(distinct) == [(m.key, 22) for m in METERS]  # rebuilt from the replay
