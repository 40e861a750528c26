"""A closed window's events stay held until its handoff has committed.

The processor forgets a window as it closes it; the handoff append follows. In between, the
queue's checkpoint must not pass the window's events: a crash there would replay from past
them and rebuild the window without its first events (or not at all)."""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from streams import StreamId, StreamProvider
from tests.agents.delivery.conftest import drained
from tests.helpers import (
    counted_windows,
    counting_provider,
    handoff_count,
    persisted_checkpoint,
    saved_states,
    start_worker,
    wait_until_async,
)

WORKER = Path(__file__).with_name("handoff_gap_worker.py")
METER = StreamId("meters", "m1")


class GatedSink:
    """A handoff sink whose window appends wait for ``gate``."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink
        self.entered, self.gate = anyio.Event(), anyio.Event()

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[Any]) -> int:
        self.entered.set()
        await self.gate.wait()
        return await self._sink.write(source, consumer, partition, windows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


async def test_the_checkpoint_waits_for_a_closing_windows_handoff(tmp_path):
    provider = counting_provider(tmp_path)
    async with provider:
        (agent,) = provider.agents
        sinks = agent.context.handoff_sinks
        gated = sinks["counts"] = GatedSink(sinks["counts"])  # type: ignore[index]
        stream = provider.get_stream(METER)
        for t in [1.0, 2.0, 3.0, 12.0]:  # records 0..3; the last closes [0, 10)
            await stream.on_next({"t": t})
        with anyio.fail_after(5):
            await gated.entered.wait()
        # Other traffic keeps the agent reading and acknowledging while the append waits.
        for n in range(5):
            await provider.get_stream(StreamId("other", str(n))).on_next(n)
            await anyio.sleep(0.05)
        # Never past record 3 (t=12), whose step is still emitting: record 0 (t=1) is still
        # needed, unless the window's state up to record 0, 1 or 2 was saved with the checkpoint.
        assert agent.receiver.checkpoint in (None, 0, 1, 2)
        gated.gate.set()
        await drained(provider)

        # Window [0, 10) is handed off: the checkpoint moves on, on the agent's next round
        # after the append (soon after the drain, not with it). Window [10, 20) stays open
        # with record 3 (t=12) alone, which a restart must find again: either read again
        # (the checkpoint before it) or in the window's state saved with the checkpoint, as
        # of record 3 or later (the checkpoint may then pass it, up to the last record, 8).
        await wait_until_async(lambda: (agent.receiver.checkpoint or -1) >= 2, 5)
        checkpoint = agent.receiver.checkpoint
        assert checkpoint is not None and 2 <= checkpoint <= 8
        if checkpoint >= 3:
            assert [(stream, seq >= 3) for stream, seq, _ in saved_states(tmp_path)] == [("meters/m1", True)]
    assert counted_windows(tmp_path) == [(0.0, 10.0, 3)]


async def test_a_worker_killed_before_the_handoff_commits_rebuilds_the_whole_window(tmp_path):
    blocked = start_worker(WORKER, tmp_path, "block")
    try:
        async with StreamProvider.embedded(tmp_path, queues=1).client() as client:
            for t in [1.0, 2.0, 3.0, 12.0]:
                await client.get_stream(METER).on_next({"t": t})
        assert blocked.stdout is not None
        assert blocked.stdout.readline().strip() == "in-gap"
        time.sleep(1.0)  # several reads, acknowledgements and checkpoint writes go by
        assert persisted_checkpoint(tmp_path) in (None, 0, 1, 2)  # as above
        blocked.send_signal(signal.SIGKILL)
        blocked.wait()
    finally:
        blocked.kill()
    successor = start_worker(WORKER, tmp_path, "run")
    try:
        async with StreamProvider.embedded(tmp_path, queues=1).client() as client:
            await client.get_stream(METER).on_next({"t": 25.0})  # closes [10, 20)
        await wait_until_async(lambda: handoff_count(tmp_path, "counts") >= 2, 15)
    finally:
        successor.terminate()
        successor.wait()
    assert counted_windows(tmp_path) == [(0.0, 10.0, 3), (10.0, 20.0, 1)]
