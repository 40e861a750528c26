"""Scaling out on one machine: ``headrace worker`` processes sharing one embedded store.

Run: ``.venv/bin/python bench/scale.py [--records N] [--events E] [--lease S]``. Every figure
is measured in this run, side by side:

- delivered events/s with 1 and with 2 worker processes, each run on its own copy of one
  pre-filled store (the same backlog, spread evenly over 8 queues), timed by
  bench/timing.py in the consumers' own ``on_next`` (each process writes its stamps to a
  file, :class:`~bench.timing.StampFile`, merged onto one time line,
  :func:`~bench.timing.merged`): from the first event any worker took to the last, and the
  steady part (10 % to 90 % of the events), with the workers' CPU time over wall-clock
  time (over 1: more than one core busy); and the time for the whole backlog, from
  launching the workers until every record is acknowledged (which includes the second
  worker joining and the first handing it half the queues);
- after a worker's SIGKILL: the time until its queues are owned by the other worker again
  (their leases expired, then one balancing round) and until they are read again (the new
  owner's first checkpoint on each), with a producer publishing all along;
- after a worker's SIGTERM: the time until its queues are owned by the other worker (handed
  back at once, no lease to wait for), and until the leaving process has exited.

The workers run this module's :func:`app` (``--app bench.scale:app``): an implicit consumer
per stream that sums the values it gets.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench/streams.py would shadow the package

from balancer import BalancerOptions  # noqa: E402
from bench import timing  # noqa: E402
from bench.timing import HEADER, Report, StampFile, merged, row  # noqa: E402
from streams import StreamId, StreamProvider  # noqa: E402
from streams.backends.embedded.adapter import EmbeddedAdapterFactory  # noqa: E402
from streams.core.batch import BatchContainer, BatchKind  # noqa: E402
from streams.core.ids import QueueId  # noqa: E402

QUEUES = 8
STREAMS_PER_QUEUE = 8
NAMESPACE = "scale"


# -- the worker application --------------------------------------------------------------------


def app() -> StreamProvider:
    """The provider each worker process runs (configured by environment variables)."""
    lease = float(os.environ["HEADRACE_BENCH_LEASE"])
    provider = StreamProvider.embedded(
        os.environ["HEADRACE_BENCH_STORE"],
        queues=QUEUES,
        balancer_options=BalancerOptions(lease, renew_period=lease / 3, refresh_period=lease / 12),
    )

    stamps_dir = os.environ.get("HEADRACE_BENCH_STAMPS")
    stamps = StampFile(f"{stamps_dir}/{os.getpid()}.stamps", every=20_000) if stamps_dir else None

    @provider.implicit(NAMESPACE)
    class Sum:
        def __init__(self, stream_id: StreamId) -> None:
            self.total = 0

        def on_next(self, batch: Any) -> None:
            if stamps is not None:
                stamps.taken(len(batch))
            self.total += sum(batch.values)
            if stamps is not None:
                stamps.result()

    return provider


# -- the driver ----------------------------------------------------------------------------------


def even_streams(factory: EmbeddedAdapterFactory) -> dict[QueueId, list[StreamId]]:
    """``STREAMS_PER_QUEUE`` stream ids for each queue, so every queue gets the same backlog."""
    mapper = factory.get_queue_mapper()
    streams: dict[QueueId, list[StreamId]] = {q: [] for q in mapper.get_all_queues()}
    n = 0
    while any(len(s) < STREAMS_PER_QUEUE for s in streams.values()):
        sid = StreamId(NAMESPACE, f"s{n}")
        queue = mapper.get_queue_for_stream(sid)
        if len(streams[queue]) < STREAMS_PER_QUEUE:
            streams[queue].append(sid)
        n += 1
    return streams


async def prefill(path: Path, records: int, events: int) -> None:
    """``records`` batch containers of ``events`` integers each, round-robin over the queues."""
    async with EmbeddedAdapterFactory(path, QUEUES) as factory:
        adapter = await factory.create_adapter()
        streams = even_streams(factory)
        rows = []
        for i in range(STREAMS_PER_QUEUE):  # one stream of each queue in turn
            for queue in sorted(streams):
                sid = streams[queue][i]
                payload = BatchContainer(sid, BatchKind.DATA, time.time(), list(range(events))).encode()
                rows.append((queue, sid, payload))
        for start in range(0, records, 2000):
            end = min(records, start + 2000)
            await adapter.queue_message_batches([rows[i % len(rows)] for i in range(start, end)])


class Store:
    """Read-only views of a store's lease and checkpoint tables, for the driver."""

    def __init__(self, path: Path) -> None:
        self.database = path / "headrace.db"

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.database, timeout=10) as conn:
            return conn.execute(sql).fetchall()

    def owners(self) -> dict[int, str]:
        now = time.time()
        rows = self._rows("SELECT queue, owner, expires_at FROM lease_queues")
        return {q: owner for q, owner, expires in rows if owner is not None and expires > now}

    def owned_by(self, name: str) -> set[int]:
        return {q for q, owner in self.owners().items() if owner == name}

    def checkpoints(self) -> dict[int, int]:
        return dict(self._rows("SELECT queue, seq FROM checkpoints"))

    def acknowledged(self) -> int:
        """Records acknowledged so far, over every queue."""
        return sum(seq + 1 for seq in self.checkpoints().values())


class Workers:
    def __init__(self, store: Path, lease: float, logs: Path, stamps: Path | None = None) -> None:
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HEADRACE_BENCH_STORE": str(store),
            "HEADRACE_BENCH_LEASE": str(lease),
            **({"HEADRACE_BENCH_STAMPS": str(stamps)} if stamps is not None else {}),
        }
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def launch(self, name: str) -> subprocess.Popen[str]:
        command = ["worker", "--app", "bench.scale:app", "--name", name, "--log-level", "warning"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", *command],
            cwd=ROOT,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=open(self.logs / f"{name}.log", "a"),
        )
        self.procs[name] = proc
        return proc

    def wait_running(self, name: str) -> None:
        line = self.procs[name].stdout.readline()  # type: ignore[union-attr]
        if "running" not in line:
            raise RuntimeError(f"worker {name} did not start: {(self.logs / f'{name}.log').read_text()}")

    def cpu_seconds(self) -> float:
        """User and system CPU time the running workers have used so far (Linux)."""
        total = 0
        for proc in self.procs.values():
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
        return total / os.sysconf("SC_CLK_TCK")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            proc.wait(timeout=60)


async def until(condition: Callable[[], bool], seconds: float = 120, poll: float = 0.01) -> float:
    """Wait until ``condition()`` holds; return when it did (time.monotonic)."""
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(poll)
    return time.monotonic()


def balanced(store: Store, names: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        owners = list(store.owners().values())
        return len(owners) == QUEUES and all(owners.count(n) == QUEUES // len(names) for n in names)

    return check


@dataclass(frozen=True)
class Run:
    report: Report  # the consumers' own stamps, all workers together (bench/timing.py)
    whole: float  # seconds from launching the workers until the backlog was all acknowledged
    cpu: float  # CPU seconds the workers used, from their launch to the whole backlog


async def throughput(template: Path, work: Path, workers: int, records: int, events: int, lease: float) -> Run:
    """One run of ``workers`` processes over a copy of the pre-filled store."""
    run = Path(tempfile.mkdtemp(prefix=f"run-{workers}-", dir=work))  # one a round
    path = run / "store"
    shutil.copytree(template, path)
    stamps = run / "stamps"
    stamps.mkdir()
    store = Store(path)
    names = [f"w{n}" for n in range(workers)]
    cluster = Workers(path, lease, work, stamps)
    try:
        launched = time.monotonic()
        for name in names:
            cluster.launch(name)
        for name in names:
            cluster.wait_running(name)
        done = await until(lambda: store.acknowledged() >= records, poll=0.005)
        cpu = cluster.cpu_seconds()
    finally:
        cluster.stop_all()
    report = merged([str(p) for p in sorted(stamps.iterdir())], records * events)
    return Run(report, done - launched, cpu)


async def handovers(work: Path, lease: float) -> tuple[float, float, float, float]:
    """(SIGKILL -> owned again, SIGKILL -> read again, SIGTERM -> owned again,
    SIGTERM -> process exited), in seconds, with a producer publishing throughout."""
    path = work / "handover"
    store = Store(path)
    cluster = Workers(path, lease, work)
    client = StreamProvider.embedded(path, queues=QUEUES)
    try:
        async with client.client(), anyio.create_task_group() as tg:
            streams = [sid for sids in even_streams(client.factory).values() for sid in sids]  # type: ignore[arg-type]
            stop = anyio.Event()

            async def produce() -> None:
                n = 0
                while not stop.is_set():
                    await client.get_stream(streams[n % len(streams)]).on_next(n)
                    n += 1
                    await anyio.sleep(0.002)

            tg.start_soon(produce)
            for name in ("a", "b"):
                cluster.launch(name)
                cluster.wait_running(name)
            await until(balanced(store, ["a", "b"]))
            await anyio.sleep(1)

            doomed = store.owned_by("b")
            before = store.checkpoints()
            killed = time.monotonic()
            cluster.procs["b"].send_signal(signal.SIGKILL)
            owned_again = await until(lambda: store.owned_by("a") >= doomed) - killed
            read_again = await until(lambda: all(store.checkpoints()[q] > before[q] for q in doomed)) - killed

            cluster.launch("c")
            cluster.wait_running("c")
            await until(balanced(store, ["a", "c"]))
            await anyio.sleep(1)
            leaving = store.owned_by("c")
            termed = time.monotonic()
            cluster.procs["c"].send_signal(signal.SIGTERM)
            handed_over = await until(lambda: store.owned_by("a") >= leaving) - termed
            await anyio.to_thread.run_sync(cluster.procs["c"].wait)
            exited = time.monotonic() - termed
            stop.set()
    finally:
        cluster.stop_all()
    return owned_again, read_again, handed_over, exited


async def main(records: int, events: int, lease: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        template = work / "template"
        started = time.perf_counter()
        await prefill(template, records, events)
        filled = time.perf_counter() - started
        print(
            f"headrace scale benchmark: {records:,} records x {events} events over {QUEUES} queues "
            f"in one embedded store (pre-filled in {filled:.1f} s), {os.cpu_count()} cores, lease {lease:g} s"
        )
        runs: dict[int, list[Run]] = {1: [], 2: []}
        for _ in range(rounds):
            for n in (1, 2):
                runs[n].append(await throughput(template, work, n, records, events, lease))
        best = {n: min(r, key=lambda run: run.report.wall if run.report.rate else math.inf) for n, r in runs.items()}
        print(f"best of {rounds}; CPU/wall over 1: more than one core busy\n")
        print(HEADER.replace("vs base", "  vs 1"))
        for n in (1, 2):
            name = f"{n} worker process{'es' if n > 1 else ''}"
            print(row(name, best[n].report, best[1].report if n == 2 else None))
        for n in (1, 2):
            run = best[n]
            print(f"  {n}: whole backlog from launch {run.whole:.2f} s ({run.cpu:.1f} CPU s)")
        one, two = best[1].report, best[2].report
        timing.note_ratio("two workers / one, whole run", two, one)
        timing.note_ratio("two workers / one, per CPU second", two, one, cpu=True)
        if one.rate and two.rate and one.steady_rate and two.steady_rate:
            print(
                f"  ratio 2/1: {two.rate / one.rate:.2f} whole run, {two.steady_rate / one.steady_rate:.2f} steady part "
                f"; {best[1].whole / best[2].whole:.2f} for the whole backlog from launch, "
                "start and first rebalancing included"
            )
        owned, read, handed, exited = await handovers(work, lease)
        timing.note("SIGKILL to the queues read again, s", read)
        timing.note("SIGTERM to the queues handed over, s", handed)
        print(f"  SIGKILL -> queues owned again: {owned:.2f} s, read again: {read:.2f} s   (lease {lease:g} s)")
        print(f"  SIGTERM -> queues owned again: {handed:.2f} s; the leaving process exited after {exited:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000, help="pre-filled records (default 400,000)")
    parser.add_argument("--events", type=int, default=100, help="events per record (default 100)")
    parser.add_argument("--lease", type=float, default=3.0, help="lease length in seconds (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each worker count; the best is shown")
    args = parser.parse_args()
    anyio.run(main, args.records, args.events, args.lease, args.rounds)
    timing.save_run(__file__, {}, params=vars(args))
