"""A parked activation of a durable type keeps its state in the embedded store only (issue 35,
"more keys than memory"): the worker holds no bytes of it, and the stream's next event reads
it back by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams import Durable, StreamId, StreamProvider
from tests.agents.delivery.conftest import drained
from tests.helpers import saved_states, wait_until_async


async def test_parked_durable_state_is_only_in_the_store_and_comes_back(tmp_path: Path) -> None:
    provider = StreamProvider.embedded(tmp_path, queues=2, stream_inactivity_period=0.3)
    counts: dict[str, list[int]] = {}

    @provider.implicit("devices")
    class Device:
        count = Durable(0)

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)
            counts.setdefault(self.key, []).append(self.count)

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
