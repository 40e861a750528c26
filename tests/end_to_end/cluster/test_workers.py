"""Several ``headrace worker`` processes on one embedded store: they share the queues, take
over a killed worker's queues once its leases expire, make room for a newcomer, and take a
leaving worker's queues at once; under continuous production no event is lost and no queue
is ever touched by two workers at the same moment."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import anyio

from streams import StreamId, StreamProvider
from tests.end_to_end.cluster.worker_app import NAMESPACE, QUEUES

ROOT = Path(__file__).resolve().parents[3]
LEASE = 2.0  # seconds; the app renews every LEASE/4 and balances every LEASE/8


class Cluster:
    """Worker processes started with ``headrace worker`` on one store, and what they record."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = tmp_path / "store"
        self.records = tmp_path / "records"
        self.records.mkdir()
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HEADRACE_TEST_STORE": str(self.store),
            "HEADRACE_TEST_RECORDS": str(self.records),
            "HEADRACE_TEST_LEASE": str(LEASE),
        }
        self.workers: dict[str, subprocess.Popen[str]] = {}

    def launch(self, name: str, *options: str) -> subprocess.Popen[str]:
        """Start ``headrace worker`` with ``options`` (by default, this test app under
        ``name``), its stderr going to ``<name>.log``."""
        options = options or ("--app", "tests.end_to_end.cluster.worker_app:app", "--name", name)
        return subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", *options],
            cwd=ROOT,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=open(self.logs / f"{name}.log", "a"),
        )

    def start(self, name: str) -> subprocess.Popen[str]:
        """A worker, once it runs (it has joined and taken its first share)."""
        proc = self.launch(name)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"headrace worker {name}: running"), (line, self.log(name))
        self.workers[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def leases(self) -> dict[int, tuple[str | None, float]]:
        """Each queue's lease row: (owner, expires_at)."""
        with sqlite3.connect(self.store / "headrace.db") as conn:
            rows = conn.execute("SELECT queue, owner, expires_at FROM lease_queues").fetchall()
        return {queue: (owner, expires) for queue, owner, expires in rows}

    def owners(self) -> dict[int, str]:
        """The queues leased now, and to whom."""
        now = time.time()
        return {q: owner for q, (owner, expires) in self.leases().items() if owner and expires > now}

    def owned_by(self, name: str) -> set[int]:
        return {q for q, owner in self.owners().items() if owner == name}

    async def until(self, condition: Callable[[dict[int, str]], bool], seconds: float = 15) -> float:
        """Wait until ``condition(owners)`` holds; return how long it took."""
        start = time.monotonic()
        with anyio.fail_after(seconds):
            while not condition(self.owners()):
                await anyio.sleep(0.05)
        return time.monotonic() - start

    def deliveries(self) -> list[tuple[str, str]]:
        return [
            tuple(line.split())  # type: ignore[misc]
            for path in self.records.glob("*.deliveries")
            for line in path.read_text().splitlines()
        ]

    def tenures(self) -> dict[int, list[tuple[float, float, str]]]:
        """Per queue: (first call began, last call ended, worker) of every agent's receiver."""
        spans: dict[tuple[int, str], tuple[float, float, str]] = {}
        for path in self.records.glob("*.reads"):
            for line in path.read_text().splitlines():
                worker, queue, tenure, begin, end = line.split()
                key = (int(queue), tenure)
                first, last, _ = spans.get(key, (float(begin), float(end), worker))
                spans[key] = (min(first, float(begin)), max(last, float(end)), worker)
        per_queue: dict[int, list[tuple[float, float, str]]] = {}
        for (queue, _), span in spans.items():
            per_queue.setdefault(queue, []).append(span)
        return {queue: sorted(spans) for queue, spans in per_queue.items()}

    def stop_all(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.workers.items():
            assert proc.wait(timeout=30) in (0, -signal.SIGKILL), self.log(name)


class Producer:
    """Publishes ``p0``, ``p1``, ... round-robin over 32 streams (every queue gets some)."""

    def __init__(self, client: StreamProvider) -> None:
        self.client = client
        self.published: list[str] = []
        self.stopped = anyio.Event()
        self.done = anyio.Event()  # the last publish has returned

    async def run(self) -> None:
        streams = [self.client.get_stream(StreamId(NAMESPACE, f"s{n}")) for n in range(32)]
        try:
            while not self.stopped.is_set():
                value = f"p{len(self.published)}"
                await streams[len(self.published) % len(streams)].on_next(value)
                self.published.append(value)
                await anyio.sleep(0.005)
        finally:
            self.done.set()

    async def stop(self) -> None:
        """Stop publishing; return once the publish in flight (if any) has returned, so that
        ``published`` is final."""
        self.stopped.set()
        await self.done.wait()

    async def more(self, count: int) -> None:
        """Wait until ``count`` more events are published (the workers read meanwhile)."""
        target = len(self.published) + count
        while len(self.published) < target:
            await anyio.sleep(0.02)


def spread_over(names: set[str]) -> Callable[[dict[int, str]], bool]:
    """Every queue leased, to exactly these workers, each holding at least two."""

    def holds(owners: dict[int, str]) -> bool:
        counts = {name: list(owners.values()).count(name) for name in names}
        return len(owners) == QUEUES and set(owners.values()) == names and min(counts.values()) >= 2

    return holds


async def test_workers_share_the_queues_through_a_kill_a_join_and_a_leave(tmp_path):
    cluster = Cluster(tmp_path)
    client = StreamProvider.embedded(cluster.store, queues=QUEUES)
    try:
        async with client.client(), anyio.create_task_group() as tg:
            producer = Producer(client)
            tg.start_soon(producer.run)
            for name in ("w1", "w2", "w3"):
                cluster.start(name)
            await cluster.until(spread_over({"w1", "w2", "w3"}))
            await producer.more(100)

            killed = cluster.owned_by("w2")
            cluster.workers["w2"].send_signal(signal.SIGKILL)
            cluster.workers["w2"].wait()
            taken_over = await cluster.until(spread_over({"w1", "w3"}))
            # a lease lasts LEASE from its last renewal; then one balancing round picks it up
            assert taken_over < LEASE + 1.0, taken_over
            await producer.more(100)

            cluster.start("w4")
            await cluster.until(spread_over({"w1", "w3", "w4"}))
            await producer.more(100)

            leaving = cluster.owned_by("w1")
            cluster.workers["w1"].send_signal(signal.SIGTERM)
            assert cluster.workers["w1"].wait(timeout=30) == 0, cluster.log("w1")
            # handed back, not left to expire: no lease row names w1 any more
            assert all(owner != "w1" for owner, _ in cluster.leases().values())
            await cluster.until(spread_over({"w3", "w4"}))

            await producer.stop()
            with anyio.fail_after(20):  # the backlog is delivered by the two remaining workers
                while {value for value, _ in cluster.deliveries()} < set(producer.published):
                    await anyio.sleep(0.1)
    finally:
        cluster.stop_all()

    assert killed and leaving
    assert_nothing_lost_and_no_overlap(cluster, producer.published, moved=killed | leaving)


def assert_nothing_lost_and_no_overlap(cluster: Cluster, published: list[str], moved: set[int]) -> None:
    """Every published event was delivered at least once (a redelivery is the same record),
    no queue was ever read by two workers at once, and the ``moved`` queues changed hands."""
    delivered = cluster.deliveries()
    assert {value for value, _ in delivered} == set(published)
    tokens: dict[str, set[str]] = {}
    for value, token in delivered:
        tokens.setdefault(value, set()).add(token)
    assert all(len(t) == 1 for t in tokens.values())
    tenures = cluster.tenures()
    assert sorted(tenures) == list(range(QUEUES))
    for queue, spans in tenures.items():
        for (_, end, before), (start, _, after) in pairwise(spans):
            assert end <= start, f"queue {queue}: {before} until {end!r}, {after} from {start!r}"
    changed_hands = {q for q, spans in tenures.items() if len({worker for _, _, worker in spans}) > 1}
    assert changed_hands >= moved


async def test_a_second_worker_under_a_live_name_is_refused(tmp_path):
    cluster = Cluster(tmp_path)
    config = tmp_path / "twin.toml"
    config.write_text('[worker]\napp = "tests.end_to_end.cluster.worker_app:app"\nname = "w1"\n')
    cluster.start("w1")
    try:
        twin = cluster.launch("twin", "--config", str(config))
        out, _ = twin.communicate(timeout=30)
    finally:
        cluster.stop_all()
    error = cluster.log("twin").strip().splitlines()
    assert twin.returncode == 2
    assert out == ""
    assert len(error) == 1 and error[0].startswith("headrace worker: error: worker name 'w1' is in use")
