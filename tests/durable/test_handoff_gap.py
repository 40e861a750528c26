"""A closed window's events stay held until its handoff has committed (issue 13, item 13).

The processor forgets a window as it closes it; the handoff append follows. In between, the
queue's checkpoint must not pass the window's events: a crash there would replay from past
them and rebuild the window without its first events (or not at all)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa

from spark_sink import Handoff
from spark_sink.offsets import OffsetRange
from spark_sink.storage import EmbeddedStorage
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

from ..core.conftest import drained

WORKER = Path(__file__).with_name("handoff_gap_worker.py")
ROOT = Path(__file__).resolve().parents[2]
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


def handed_off(path: Path) -> list[tuple[float, float, int]]:
    """(window start, window end, count) of every row in the ``counts`` handoff log."""
    storage = EmbeddedStorage(str(path))
    try:
        end = storage.end_offsets("counts").get(0, 0)
        (split,) = storage.plan("counts", [OffsetRange(0, 0, end)])
        rows = pa.Table.from_batches(list(split.batches())).to_pylist() if end else []
    finally:
        storage.close()
    return [(r["window_start"].timestamp(), r["window_end"].timestamp(), r["count"]) for r in rows]


async def wait_for_rows(path: Path, rows: int, seconds: float = 15.0) -> None:
    """Until the ``counts`` handoff log has ``rows`` rows (or ``seconds`` have passed)."""
    deadline = time.monotonic() + seconds
    while len(handed_off(path)) < rows and time.monotonic() < deadline:
        await anyio.sleep(0.1)


def persisted_checkpoint(path: Path) -> int | None:
    with sqlite3.connect(path / "headrace.db") as conn:
        row = conn.execute("SELECT seq FROM checkpoints WHERE queue = 0").fetchone()
    return None if row is None else row[0]


def counting_provider(path: Path, **options: Any) -> StreamProvider:
    """An embedded worker of one queue whose ``meters`` streams hand tumbling 10 s counts
    to the handoff stream ``counts`` (the shape these tests make fail)."""
    provider = StreamProvider.embedded(path, queues=1, **options)

    @provider.implicit("meters")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    return provider


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
        # t=12 (record 3) holds window [10, 20) open, unless its state was saved with the
        # checkpoint meanwhile (tests/durable/test_saved_state.py)
        assert agent.receiver.checkpoint in (2, 3)
    assert handed_off(tmp_path) == [(0.0, 10.0, 3)]


def start_worker(path: Path, mode: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(path), mode], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


async def test_a_worker_killed_before_the_handoff_commits_rebuilds_the_whole_window(tmp_path):
    blocked = start_worker(tmp_path, "block")
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
    successor = start_worker(tmp_path, "run")
    try:
        async with StreamProvider.embedded(tmp_path, queues=1).client() as client:
            await client.get_stream(METER).on_next({"t": 25.0})  # closes [10, 20)
        await wait_for_rows(tmp_path, 2)
    finally:
        successor.terminate()
        successor.wait()
    assert handed_off(tmp_path) == [(0.0, 10.0, 3), (10.0, 20.0, 1)]
