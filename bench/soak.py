"""Soak: workers and a steady producer on one embedded store, for minutes.

``python -m bench.soak [--minutes 10] [--workers 1] [--rate 1200] [--devices 2000]`` starts
the workers (each a process running a windowed ``Handoff`` consumer: tumbling 5 s counts per
device, closed 10 s after their end once a device falls silent; an activation goes after
``--inactivity`` seconds of quiet) and a producer process publishing to per-device streams
with churn (a share of the devices goes quiet and new ones appear every second), half of its
calls one event (``on_next``), half a batch (``on_next_batch``). Once a minute (``--every``) it prints:

- checkpoint lag: the most records written but not yet checkpointed (all queues), and
  seconds (the age of the oldest record not yet checkpointed), of samples every 0.7 s;
- worker RSS (MiB), store size (database and WAL, MiB: small handoff appends are rows in it) and
  the handoff log's segment files (MiB);
- dead letters (by reason) and delivery failures (``delivery_failed`` dead letters and the
  workers' ``delivery`` error lines);
- whether every worker is alive.

:func:`soak` returns the rows, so the test suite runs a one-minute version and asserts on them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # run from a checkout (bench/streams.py is not the package)

from streams.backends.embedded.store import EmbeddedStore  # noqa: E402

QUEUES = 4
NAMESPACE = "devices"
WINDOW = 5.0
SAMPLE = 0.7  # [s] between two samples of the checkpoint lag
IDLE = 10.0  # [s] after a window's end, a silent device's window closes


@dataclass
class SoakRow:
    """One line of the soak's report."""

    elapsed: float
    lag_records: int
    lag_seconds: float
    worker_rss_mb: list[float]
    store_mb: float
    dead_letters: dict[str, int] = field(default_factory=dict)
    delivery_failures: int = 0
    workers_alive: bool = True
    producer_alive: bool = True
    published: int = 0
    worker_cpu: list[float] = field(default_factory=list)  # share of one core since the last row
    handoff_age: float | None = None  # seconds since the newest handed-off window ended
    handoff_mb: float = 0.0  # the handoff log's segment files on disk (small appends are in the store)

    def line(self) -> str:
        rss = "/".join(f"{r:.0f}" for r in self.worker_rss_mb)
        letters = ",".join(f"{k}={v}" for k, v in sorted(self.dead_letters.items())) or "0"
        cpu = "/".join(f"{c:.0%}" for c in self.worker_cpu)
        age = "-" if self.handoff_age is None else f"{self.handoff_age:.1f} s"
        return (
            f"{self.elapsed / 60:5.1f} min  published {self.published:>8}  "
            f"checkpoint lag up to {self.lag_records:>6} records {self.lag_seconds:6.1f} s  "
            f"newest window handed off {age} ago  worker CPU {cpu}  "
            f"worker RSS {rss} MiB  store {self.store_mb:6.1f} MiB  handoff files {self.handoff_mb:6.1f} MiB  dead letters {letters}  "
            f"delivery failures {self.delivery_failures}  workers {'alive' if self.workers_alive else 'DEAD'}"
            f"{'' if self.producer_alive else '  producer DEAD'}"
        )


# -- the worker ------------------------------------------------------------------------------


def run_worker(path: str, name: str, inactivity: float) -> None:
    import anyio

    from balancer import BalancerOptions
    from spark_sink import Handoff
    from streams import StreamId, StreamProvider
    from streams.adapters.retention import RetentionPolicy
    from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

    provider = StreamProvider.embedded(
        path,
        queues=QUEUES,
        retention=RetentionPolicy(max_age=30.0, interval=5.0),
        worker_name=name,
        # Devices leave for good (churn): their activations go after a minute of quiet, the
        # open windows parked (saved with the checkpoint, restored if they come back).
        stream_inactivity_period=inactivity,
        balancer_options=BalancerOptions(lease_length=6.0, renew_period=2.0, refresh_period=0.5),
    )

    @provider.implicit(NAMESPACE)
    class Readings:
        # A device that leaves for good has its last window closed by the clock (idle
        # timeout) rather than kept open, and its activation then goes with nothing to keep.
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(WINDOW, idle_timeout=IDLE), Count())
        handoff = Handoff("soak_counts", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    async def main() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with provider:
                print("ready", flush=True)
                async for _ in signals:
                    break  # leave gracefully: checkpoints flushed, leases released

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    anyio.run(main)


# -- the producer ----------------------------------------------------------------------------


def run_producer(path: str, rate: float, devices: int, churn: float, count_file: str) -> None:
    import anyio

    from streams import StreamId, StreamProvider

    provider = StreamProvider.embedded(path, queues=QUEUES)
    rng = random.Random(7)
    live = list(range(devices))
    next_device = devices
    published = 0

    async def publish(device: int, n: int) -> None:
        nonlocal published
        stream = provider.get_stream(StreamId(NAMESPACE, f"d{device}"))
        now = time.time()
        if n == 1:
            await stream.on_next({"t": now, "v": 1})
        else:
            await stream.on_next_batch([{"t": now, "v": i} for i in range(n)])
        published += n

    async def main() -> None:
        nonlocal next_device
        async with provider.client():
            tick = time.monotonic()
            while True:
                # One second's worth of calls, concurrently (group commit shares transactions).
                async with anyio.create_task_group() as tg:
                    budget = int(rate)
                    while budget > 0:
                        n = 1 if rng.random() < 0.5 else min(budget, rng.randint(2, 8))
                        tg.start_soon(publish, rng.choice(live), n)
                        budget -= n
                for _ in range(int(len(live) * churn)):  # devices go quiet, new ones appear
                    live[rng.randrange(len(live))] = next_device
                    next_device += 1
                Path(count_file + ".tmp").write_text(str(published))
                os.replace(count_file + ".tmp", count_file)  # the monitor never reads half a file
                tick += 1.0
                await anyio.sleep(max(0.0, tick - time.monotonic()))

    async def until_signalled() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(main)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    break

    anyio.run(until_signalled)


# -- the monitor -----------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def _store_mb(path: str) -> float:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        file = Path(path) / f"headrace.db{suffix}"
        if file.exists():
            total += file.stat().st_size
    return total / 2**20


def _tree_mb(directory: Path) -> float:
    """Bytes of the files under ``directory`` (MiB); files that go meanwhile count nothing."""
    total = 0
    for file in directory.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            total += file.stat().st_size
    return total / 2**20


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _handoff_age(path: str) -> float | None:
    """How long ago the newest window in the handoff log ended: a worker that keeps up hands
    each window off about one window length after it ends; one that falls behind, later and later."""
    from spark_sink.offsets import OffsetRange
    from streams.backends.embedded.handoff_log import EmbeddedStorage

    storage = EmbeddedStorage(path)
    try:
        try:
            ends = storage.end_offsets("soak_counts")
        except Exception:  # nothing handed off yet: the log is made by its first append
            return None
        newest = None
        for split in storage.plan("soak_counts", [OffsetRange(p, max(0, e - 50), e) for p, e in ends.items() if e]):
            for batch in split.batches():
                column = batch.column("window_end").cast("int64").to_pylist()  # microseconds
                if column:
                    newest = max(newest or 0, max(column))
    finally:
        storage.close()
    return None if newest is None else time.time() - newest / 1e6


def _lag(store: EmbeddedStore) -> tuple[int, float]:
    """Checkpoint lag over all queues: records written but not yet checkpointed, and the age
    (seconds) of the oldest of them."""
    with store.snapshot() as conn:
        heads = dict(conn.execute("SELECT queue, next_seq FROM queue_heads"))
        checkpoints = dict(conn.execute("SELECT queue, seq FROM checkpoints"))
        lag_records, oldest = 0, None
        for queue, next_seq in heads.items():
            first = checkpoints.get(queue, -1) + 1
            lag_records += max(0, next_seq - first)
            row = conn.execute(
                "SELECT enqueued FROM queue_records WHERE queue = ? AND seq >= ? ORDER BY seq LIMIT 1",
                (queue, first),
            ).fetchone()
            if row is not None:
                oldest = row[0] if oldest is None else min(oldest, row[0])
    return lag_records, 0.0 if oldest is None else max(0.0, time.time() - oldest)


def _dead_letters(store: EmbeddedStore) -> dict[str, int]:
    """Dead letters by reason."""
    with store.snapshot() as conn:
        try:
            return dict(conn.execute("SELECT reason, count(*) FROM deadletters GROUP BY reason"))
        except sqlite3.OperationalError:  # no dead letter yet: the table is made on first use
            return {}


def soak(
    minutes: float = 10.0,
    *,
    workers: int = 1,
    rate: float = 1200.0,
    devices: int = 2000,
    churn: float = 0.01,
    inactivity: float = 60.0,
    every: float = 60.0,
    path: str | None = None,
    echo: bool = True,
) -> list[SoakRow]:
    """Run the soak; return one row per ``every`` seconds (and one at the end)."""
    path = path or tempfile.mkdtemp(prefix="headrace-soak-")
    logs = Path(path) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
    }
    me = [sys.executable, "-m", "bench.soak"]
    procs: list[subprocess.Popen[bytes]] = []
    rows: list[SoakRow] = []
    count_file = str(Path(path) / "published")
    producer: subprocess.Popen[bytes] | None = None
    files = contextlib.ExitStack()
    try:
        for i in range(workers):
            err = files.enter_context(open(logs / f"worker-{i + 1}.log", "wb"))  # noqa: SIM115
            worker = subprocess.Popen(
                [*me, "--role", "worker", "--store", path, "--name", f"soak-{i + 1}", "--inactivity", str(inactivity)],
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"worker {i + 1} did not start; see {logs}")
            procs.append(worker)
        producer = subprocess.Popen(
            [
                *me,
                "--role",
                "producer",
                "--store",
                path,
                "--rate",
                str(rate),
                "--devices",
                str(devices),
                "--churn",
                str(churn),
                "--count-file",
                count_file,
            ],
            stderr=files.enter_context(open(logs / "producer.log", "wb")),
            env=env,  # noqa: SIM115
        )
        monitor = files.enter_context(contextlib.closing(EmbeddedStore(path)))  # the monitor's reads
        start = time.monotonic()
        end = start + minutes * 60
        cpu_before, at = [0.0 for _ in procs], time.monotonic()
        while True:
            # The producer publishes a second's calls at once: sample the lag at every phase
            # of its second (every 0.7 s), and report the most seen since the last row.
            lag_records, lag_seconds = 0, 0.0
            row_at = min(time.monotonic() + every, end)
            while (left := row_at - time.monotonic()) > 0:
                time.sleep(min(SAMPLE, left))
                records, seconds = _lag(monitor)
                lag_records, lag_seconds = max(lag_records, records), max(lag_seconds, seconds)
            letters = _dead_letters(monitor)
            cpu_now, now = [_cpu_seconds(p.pid) for p in procs], time.monotonic()
            cpu = [(b - a) / max(now - at, 1e-9) for a, b in zip(cpu_before, cpu_now)]
            cpu_before, at = cpu_now, now
            failures = letters.get("delivery_failed", 0) + sum(
                (logs / f"worker-{i + 1}.log").read_text(errors="replace").count("delivery failed")
                for i in range(workers)
            )
            published = Path(count_file).read_text() if Path(count_file).exists() else "0"
            row = SoakRow(
                elapsed=time.monotonic() - start,
                lag_records=lag_records,
                lag_seconds=lag_seconds,
                worker_rss_mb=[_rss_mb(p.pid) for p in procs],
                store_mb=_store_mb(path),
                dead_letters=letters,
                delivery_failures=failures,
                workers_alive=all(p.poll() is None for p in procs),
                producer_alive=producer.poll() is None,
                published=int(published or 0),
                worker_cpu=cpu,
                handoff_age=_handoff_age(path),
                handoff_mb=_tree_mb(Path(path) / "handoff"),
            )
            rows.append(row)
            if echo:
                print(row.line(), flush=True)
            if time.monotonic() >= end - 0.5:
                break
    finally:
        children = [*procs, *([producer] if producer is not None else [])]
        for proc in children:
            if proc.poll() is None:
                proc.terminate()
        for proc in children:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        files.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["monitor", "worker", "producer"], default="monitor")
    parser.add_argument("--store")
    parser.add_argument("--name", default="soak-1")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rate", type=float, default=1200.0, help="events per second")
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--churn", type=float, default=0.01, help="share of devices replaced per second")
    parser.add_argument("--inactivity", type=float, default=60.0, help="seconds of quiet before an activation goes")
    parser.add_argument("--count-file")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON at the end")
    args = parser.parse_args()
    if args.role == "worker":
        run_worker(args.store, args.name, args.inactivity)
    elif args.role == "producer":
        run_producer(args.store, args.rate, args.devices, args.churn, args.count_file)
    else:
        print(
            f"soak: {args.workers} worker(s), {args.rate:.0f} events/s over {args.devices} devices "
            f"(churn {args.churn:.0%}/s), {args.minutes} min",
            flush=True,
        )
        rows = soak(
            args.minutes,
            workers=args.workers,
            rate=args.rate,
            devices=args.devices,
            churn=args.churn,
            inactivity=args.inactivity,
            every=args.every,
            path=args.store,
        )
        if args.json:
            print(json.dumps([asdict(r) for r in rows]))
        from bench import timing

        late = rows[1:] or rows  # from minute 2: the first minute fills the caches
        timing.save_run(
            __file__,
            {
                "checkpoint lag, most records": max((r.lag_records for r in rows), default=math.nan),
                "worker RSS from minute 2, least MiB": min(
                    (min(r.worker_rss_mb) for r in late if r.worker_rss_mb), default=math.nan
                ),
                "worker RSS from minute 2, most MiB": max(
                    (max(r.worker_rss_mb) for r in late if r.worker_rss_mb), default=math.nan
                ),
                "delivery failures": sum(r.delivery_failures for r in rows[-1:]),
                "dead letters": sum(sum(r.dead_letters.values()) for r in rows[-1:]),
            },
            params=vars(args),
        )


if __name__ == "__main__":
    main()
