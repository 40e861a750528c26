"""A parked activation of a durable type keeps its state in the embedded store only (more keys
than memory): the worker holds no bytes of it, and the stream's next event reads
it back by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams import Durable, StreamId, StreamProvider
from streams.backends.embedded.pubsub import EmbeddedPubSubStore
from streams.backends.embedded.receiver import EmbeddedQueueReceiver
from tests.agents.delivery.conftest import drained
from tests.helpers import persisted_checkpoint, saved_states, wait_until_async


def counting_devices(provider: StreamProvider) -> dict[str, list[int]]:
    """Register a durable count per "devices" stream; by key, the count after each batch."""
    counts: dict[str, list[int]] = {}

    @provider.implicit("devices")
    class Device:
        count = Durable(0)

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)
            counts.setdefault(self.key, []).append(self.count)

    return counts


async def test_parked_durable_state_is_only_in_the_store_and_comes_back(tmp_path: Path) -> None:
    provider = StreamProvider.embedded(tmp_path, queues=2, stream_inactivity_period=0.3)
    counts = counting_devices(provider)

    keys = [f"d{i}" for i in range(50)]
    async with provider:
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).on_next(1)
        await drained(provider, 30)
        assert await wait_until_async(lambda: not any(a.stream_ids() for a in provider.agents), 15)
        assert len(saved_states(tmp_path)) == 50
        # White-box: nothing of the parked states is kept in the worker (the store has them).
        assert all(not agent._catalog._saved for agent in provider.agents)
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).on_next_batch([2, 3])
        await drained(provider, 30)
    assert counts == {key: [1, 3] for key in keys}


async def test_a_windowless_handoffs_held_events_survive_a_restart_on_the_embedded_store(tmp_path: Path) -> None:
    """The events a windowless handoff holds for the watermark are saved with the checkpoint
    (with durable fields or without) and handed off after a restart, each once."""
    from spark_sink import EventHandoff
    from streams.eventtime import EventTime, OrderingPolicy
    from tests.helpers import handoff_rows

    def app() -> StreamProvider:
        provider = StreamProvider.embedded(tmp_path, queues=1)

        @provider.implicit("plain")
        class Passed:
            event_time = EventTime(OrderingPolicy(timestamp_by="t", out_of_order=5))
            handoff = EventHandoff("passed", {"t": "double"})

            def __init__(self, stream_id: StreamId) -> None: ...

        @provider.implicit("counted")
        class Counted(Passed):
            count = Durable(0)
            handoff = EventHandoff("counted", {"t": "double"})

            def on_events(self, events: list[Any]) -> None:
                self.count += len(events)

        return provider

    first = app()
    async with first:
        for namespace in ("plain", "counted"):
            stream = first.get_stream(StreamId(namespace, "k"))
            await stream.on_next({"t": 10.0})
            await stream.on_next({"t": 20.0})  # W = 15: held
        for n in range(5):  # other records: the checkpoint passes the held ones
            await first.get_stream(StreamId("plain", "other")).on_next({"t": float(n)})
        await drained(first, 30)
        assert await wait_until_async(lambda: persisted_checkpoint(tmp_path) == 8, 10)
    second = app()
    async with second:
        for namespace in ("plain", "counted"):
            await second.get_stream(StreamId(namespace, "k")).on_next({"t": 40.0})  # W = 35: t=20 goes
        await drained(second, 30)
        assert await wait_until_async(lambda: len(handoff_rows(tmp_path, "counted")) == 2, 10)
    for handoff in ("passed", "counted"):
        times = [r["t"] for r in handoff_rows(tmp_path, handoff) if r["stream_id"].endswith("/k")]
        assert times == [10.0, 20.0], handoff


async def test_streams_that_come_together_are_looked_up_together(tmp_path: Path, monkeypatch: Any) -> None:
    """The new streams of one queue read have their subscriptions and parked durable states
    read in one query each (counted on the real store), and each state comes back exact."""
    reads: dict[str, int] = {"one stream": 0, "streams": 0, "one state": 0, "states": 0}

    def counted(cls: type, name: str, label: str) -> None:
        original = getattr(cls, name)

        def spy(self: Any, *args: Any) -> Any:
            reads[label] += 1
            return original(self, *args)

        monkeypatch.setattr(cls, name, spy)

    counted(EmbeddedPubSubStore, "subscriptions", "one stream")
    counted(EmbeddedPubSubStore, "subscriptions_of", "streams")
    counted(EmbeddedQueueReceiver, "saved_state", "one state")
    counted(EmbeddedQueueReceiver, "saved_states", "states")
    provider = StreamProvider.embedded(tmp_path, queues=1, stream_inactivity_period=0.3)
    counts = counting_devices(provider)

    keys = [f"d{i}" for i in range(300)]
    async with provider:
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).send(1)
        await provider.flush()
        await drained(provider, 30)
        assert await wait_until_async(lambda: not any(a.stream_ids() for a in provider.agents), 15)
        first = dict(reads)
        for key in keys:
            await provider.get_stream(StreamId("devices", key)).send_batch([2, 3])
        await provider.flush()
        await drained(provider, 30)
    assert counts == {key: [1, 3] for key in keys}
    # 300 streams each time, taken in a few reads: a query per read, not per stream.
    assert first["streams"] <= 10 and first["one stream"] <= 10, first
    assert reads["states"] <= 10 and reads["one state"] <= 10, reads
    assert reads["states"] >= 1 and reads["streams"] > first["streams"], reads
