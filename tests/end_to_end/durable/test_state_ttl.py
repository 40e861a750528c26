"""State with a time to live: the state of a stream idle longer than its type's
``ttl`` is dropped from the worker and from the embedded store; the stream's next event
starts from the defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams import Durable, StreamId, StreamProvider
from tests.agents.delivery.conftest import drained
from tests.helpers import saved_states, wait_until_async


async def test_an_idle_streams_state_is_gone_from_the_store_after_its_ttl(tmp_path: Path) -> None:
    provider = StreamProvider.embedded(tmp_path, queues=1)
    seen: list[tuple[str, int]] = []

    @provider.implicit("devices")
    class LastSeen:
        count = Durable(0, ttl=1.0)
        last = Durable(None)  # the type's shortest ttl is its state's

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)
            self.last = batch.values[-1]
            seen.append((self.key, self.count))

    async with provider:
        gone, kept = provider.get_stream(StreamId("devices", "gone")), provider.get_stream(StreamId("devices", "kept"))
        await gone.on_next_batch([1, 2])
        await kept.on_next(1)
        await drained(provider, 30)
        assert await wait_until_async(lambda: len(saved_states(tmp_path)) == 2, 10)
        # "kept" stays active (an event every 0.3 s); "gone" goes quiet past the ttl.
        for n in range(10):
            await kept.on_next(n)
            await drained(provider, 30)
            await wait_until_async(lambda: False, 0.3)
        assert [s for s, _, _ in saved_states(tmp_path)] == ["devices/kept"]
        (agent,) = provider.agents
        assert StreamId("devices", "gone") not in agent.stream_ids()
        await gone.on_next(3)  # after its ttl: a new state, from the defaults
        await drained(provider, 30)
    assert seen[:2] == [("gone", 2), ("kept", 1)]
    assert ("gone", 1) in seen[2:] and ("kept", 11) in seen
