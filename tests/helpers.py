"""Helpers the test packages share: worker subprocesses (starting them, and the worker side's
``serve``), reading what an embedded store's handoff log holds, and waiting for it.

Worker scripts import this module too: ``start_worker`` puts the repository on their
``PYTHONPATH``. It imports no pyspark (workers need none)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import pyarrow as pa

from balancer import BalancerOptions
from spark_sink import Handoff
from spark_sink.offsets import OffsetRange
from streams import Stream, StreamId, StreamProvider
from streams.backends.embedded.handoff_log import EmbeddedStorage, HandoffLog
from streams.core.errors import HandoffStoreNotFoundError, UnknownHandoffStreamError
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

ROOT = Path(__file__).resolve().parents[1]

# Short-lived JVMs (each Spark driver or executor a test starts): C1 compiles enough for a few
# small jobs and starts them at about half the CPU (measured 16-20 s against 32 s of the JVM's
# CPU to a first job), and one GC thread.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# Short leases: a worker started after another was killed takes its queues within a second.
SHORT_LEASES = BalancerOptions(lease_length=1.0, renew_period=0.3, refresh_period=0.1)


def python_env(**extra: str) -> dict[str, str]:
    """This environment with the repository first on ``PYTHONPATH`` (and ``extra`` set), for a
    Python subprocess that must import this checkout's packages and ``tests``."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}


def start_worker(
    script: Path,
    *args: object,
    ready: str = "ready",
    env: Mapping[str, str] | None = None,
    stderr: IO[str] | None = None,
) -> subprocess.Popen[str]:
    """``script args`` in a Python subprocess, once it has printed the line ``ready`` (see
    ``serve``); ``env`` adds to its environment, ``stderr`` takes its log."""
    process = subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        cwd=ROOT,
        env=python_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == ready
    return process


def serve(
    provider: StreamProvider,
    *,
    reading: bool = False,
    setup: Callable[[StreamProvider], None] | None = None,
) -> None:
    """A worker's main: run ``provider`` until killed, printing ``ready`` once it runs (with
    ``reading``, once it has an agent; ``setup`` then runs on it first)."""

    async def run() -> None:
        async with provider:
            while (reading or setup) and not provider.agents:
                await anyio.sleep(0.02)
            if setup is not None:
                setup(provider)
            print("ready", flush=True)
            await anyio.sleep_forever()

    anyio.run(run)


def counting_provider(path: Path | str, window: float = 10, **options: Any) -> StreamProvider:
    """An embedded worker of one queue whose ``meters`` streams hand tumbling counts (of
    ``window`` seconds, event time ``t``) to the handoff stream ``counts``."""
    provider = StreamProvider.embedded(path, queues=1, **options)

    @provider.implicit("meters")
    class Counts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(window), Count())
        handoff = Handoff("counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    return provider


def counted_windows(path: Path) -> list[tuple[float, float, int]]:
    """(window start, window end, count) of every row a ``counting_provider`` handed off."""
    rows = handoff_rows(path, "counts")
    return [(r["window_start"].timestamp(), r["window_end"].timestamp(), r["count"]) for r in rows]


def saved_states(path: Path) -> list[tuple[str, int, int]]:
    """(stream, seq, idx) of each activation state an embedded store at ``path`` holds."""
    with sqlite3.connect(path / "headrace.db") as conn:
        return conn.execute("SELECT stream, seq, idx FROM activation_states ORDER BY stream").fetchall()


def persisted_checkpoint(path: Path, queue: int = 0) -> int | None:
    """The checkpoint an embedded store at ``path`` holds for ``queue`` (None: none yet)."""
    with sqlite3.connect(path / "headrace.db") as conn:
        row = conn.execute("SELECT seq FROM checkpoints WHERE queue = ?", (queue,)).fetchone()
    return None if row is None else int(row[0])


def handoff_batches(path: Path, stream: str, partition: int = 0) -> list[pa.RecordBatch]:
    """Every row committed in ``partition`` of handoff ``stream``, read as Spark's tasks read
    them (from the partition's first retained offset to its end)."""
    storage = EmbeddedStorage(str(path))
    try:
        start = storage.start_offsets(stream).get(partition, 0)
        end = storage.end_offsets(stream).get(partition, 0)
        if start == end:
            return []
        (split,) = storage.plan(stream, [OffsetRange(partition, start, end)])
        return list(split.batches())
    finally:
        storage.close()


def handoff_rows(path: Path, stream: str, partition: int = 0) -> list[dict[str, Any]]:
    """``handoff_batches`` as one dict a row."""
    return [row for batch in handoff_batches(path, stream, partition) for row in batch.to_pylist()]


def handoff_count(path: Path, stream: str) -> int:
    """Rows handed off to ``stream`` so far, over all partitions: 0 until a worker has
    declared it."""
    try:
        log = HandoffLog.open(path)
    except (HandoffStoreNotFoundError, UnknownHandoffStreamError):
        return 0
    try:
        return sum(log.end_offsets(stream).values())
    finally:
        log.close()


@contextmanager
def busy_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A TCP port on ``host`` that a socket listens on while the block runs: a port in use."""
    with socket.socket() as busy:
        busy.bind((host, 0))
        busy.listen()
        yield int(busy.getsockname()[1])


def collected(provider: StreamProvider, namespace: str) -> list[Any]:
    """The values of every event ``provider`` delivers on ``namespace``, in delivery order, as
    its implicit consumer (one a stream) takes them."""
    values: list[Any] = []

    @provider.implicit(namespace)
    class Collect:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch: Any) -> None:
            values.extend(batch.values)

    return values


def wait_until(done: Callable[[], bool], seconds: float, poll: float = 0.05) -> bool:
    """Polls ``done`` until it holds or ``seconds`` have passed; whether it holds. Once it
    holds it is not asked again (a ``done`` that runs a command costs seconds a call)."""
    deadline = time.monotonic() + seconds
    while True:
        late = time.monotonic() >= deadline  # before asking: the last look is after the deadline
        if done():
            return True
        if late:
            return False
        time.sleep(poll)


async def wait_until_async(done: Callable[[], bool], seconds: float, poll: float = 0.05) -> bool:
    """``wait_until`` for a test whose own event loop must keep running meanwhile."""
    deadline = time.monotonic() + seconds
    while True:
        late = time.monotonic() >= deadline
        if done():
            return True
        if late:
            return False
        await anyio.sleep(poll)


async def idle_past_ttl(provider: StreamProvider, settled: Callable[[], bool], rounds: int) -> Stream:
    """The state-TTL tests' opening: stream "devices/gone" takes two events and "devices/kept"
    one; once ``settled`` (both states saved) "kept" takes an event every 0.3 s, ``rounds``
    times, while "gone" stays idle past its ttl. Returns "gone", for its next event."""
    gone, kept = provider.get_stream(StreamId("devices", "gone")), provider.get_stream(StreamId("devices", "kept"))
    await gone.on_next_batch([1, 2])
    await kept.on_next(1)
    with anyio.fail_after(30):
        await provider.drain()
    assert await wait_until_async(settled, 15)
    for n in range(rounds):
        await kept.on_next(n)
        with anyio.fail_after(30):
            await provider.drain()
        await anyio.sleep(0.3)
    return gone


def assert_started_over(seen: list[tuple[str, int]], kept_count: int) -> None:
    """ "gone"'s event after its ttl counted from the defaults; "kept" counted on throughout."""
    assert seen[:2] == [("gone", 2), ("kept", 1)]
    assert ("gone", 1) in seen[2:] and ("kept", kept_count) in seen
