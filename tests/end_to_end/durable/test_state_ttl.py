"""State with a time to live: the state of a stream idle longer than its type's
``ttl`` is dropped from the worker and from the embedded store; the stream's next event
starts from the defaults."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from streams import Durable, StreamId, StreamProvider
from tests.agents.delivery.conftest import drained
from tests.helpers import assert_started_over, idle_past_ttl, saved_states, wait_until_async
from tests.streams.cli.helpers import headrace


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
        # "kept" stays active (an event every 0.3 s); "gone" goes quiet past the ttl.
        gone = await idle_past_ttl(provider, lambda: len(saved_states(tmp_path)) == 2, rounds=10)
        assert [s for s, _, _ in saved_states(tmp_path)] == ["devices/kept"]
        (agent,) = provider.agents
        assert StreamId("devices", "gone") not in agent.stream_ids()
        await gone.on_next(3)  # after its ttl: a new state, from the defaults
        await drained(provider, 30)
    assert_started_over(seen, kept_count=11)


def _last_seen(provider: StreamProvider, ttl: float) -> None:
    """Registers ``LastSeen`` (one registry name whatever ``ttl``) on ``provider``."""

    @provider.implicit("devices")
    class LastSeen:
        count = Durable(0, ttl=ttl)

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)


async def test_states_left_by_a_restart_expire_on_every_queue_with_no_new_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "headrace.agent")
    keys = [f"d{i}" for i in range(24)]
    first = StreamProvider.embedded(tmp_path, queues=4)
    _last_seen(first, ttl=3600.0)  # nothing expires before the restart
    async with first:
        for key in keys:
            await first.get_stream(StreamId("devices", key)).on_next(1)
        await drained(first, 30)
        queues = {first.mapper.get_queue_for_stream(StreamId("devices", k)).number for k in keys}
        assert queues == {0, 1, 2, 3}  # states on every queue
        assert await wait_until_async(lambda: len(saved_states(tmp_path)) == len(keys), 10)
    assert len(saved_states(tmp_path)) == len(keys)

    restarted = StreamProvider.embedded(tmp_path, queues=4)
    _last_seen(restarted, ttl=1.0)
    async with restarted:  # no event after the restart: the queues' own sweeps expire them
        assert await wait_until_async(lambda: not saved_states(tmp_path), 15), saved_states(tmp_path)
    expired = [r.getMessage() for r in caplog.records if "expired (their time to live passed)" in r.getMessage()]
    assert sum(int(m.split(": ")[1].split()[0]) for m in expired) == len(keys), expired
    assert {m.split(":")[0] for m in expired} == {"queue-0", "queue-1", "queue-2", "queue-3"}, expired
    shown = headrace("state", "--path", tmp_path, "LastSeen", cwd=tmp_path)
    assert (shown.returncode, shown.stdout.strip()) == (0, "no saved state of LastSeen: nothing is saved for it")
