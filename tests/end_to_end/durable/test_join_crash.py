"""An interval join killed mid-stream gives the same pairs as an uninterrupted run:
two SIGKILLs while clicks and orders of ten users arrive, and the rows Spark would read from
the handoff log are exactly those of a run that was never interrupted."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from streams import StreamId
from tests import helpers
from tests.end_to_end.durable.join_worker import provider
from tests.helpers import handoff_rows, persisted_checkpoint, wait_until_async

WORKER = Path(__file__).with_name("join_worker.py")
USERS = [f"u{i}" for i in range(10)]


def workload(seed: int) -> list[tuple[str, str, dict[str, object]]]:
    """(namespace, user, value): clicks and orders with some disorder, in publishing order."""
    rng = random.Random(seed)
    items: list[tuple[str, str, dict[str, object]]] = []
    for n in range(600):
        t = n * 0.5 + rng.uniform(-4, 4)
        if rng.random() < 0.6:
            items.append(("clicks", rng.choice(USERS), {"t": t, "page": f"/p{n}"}))
        else:
            items.append(("orders", rng.choice(USERS), {"t": t, "total": float(n)}))
    return items


def rows(path: Path) -> list[tuple[object, ...]]:
    """The handoff's rows, as Spark reads them, of both partitions (one a queue)."""
    return sorted(
        (r["stream_id"], r["event_time"].timestamp(), r["left_page"], r["right_total"])
        for partition in (0, 1)
        for r in handoff_rows(path, "conversions", partition)
    )


async def run(path: Path, kills: list[int]) -> list[tuple[object, ...]]:
    """Publish the workload with a worker running, killing it (SIGKILL) and starting another
    after each item index in ``kills``; then complete every stream and wait for the rows."""
    worker: subprocess.Popen[str] = helpers.start_worker(WORKER, path)
    client = provider(str(path))
    try:
        async with client.client() as producer:
            for i, (namespace, user, value) in enumerate(workload(35)):
                await producer.get_stream(StreamId(namespace, user)).on_next(value)
                if i in kills:
                    time.sleep(0.3)  # it takes some of them
                    worker.send_signal(signal.SIGKILL)
                    worker.wait()
                    worker = helpers.start_worker(WORKER, path)
            for namespace in ("clicks", "orders"):
                for user in USERS:
                    await producer.get_stream(StreamId(namespace, user)).on_completed()
        assert await wait_until_async(lambda: all_checkpointed(path), 60), "the worker did not finish"
        found = rows(path)
    finally:
        worker.terminate()
        worker.wait()
    return found


def all_checkpointed(path: Path) -> bool:
    """Every queue's checkpoint has reached its last record: everything is handed off."""
    with sqlite3.connect(path / "headrace.db") as conn:
        written = conn.execute("SELECT queue, MAX(seq) FROM queue_records GROUP BY queue").fetchall()
    return all(persisted_checkpoint(path, queue) == top for queue, top in written)


async def test_an_interval_join_killed_twice_gives_the_pairs_of_an_uninterrupted_run(tmp_path: Path) -> None:
    calm = await run(tmp_path / "calm", kills=[])
    killed = await run(tmp_path / "killed", kills=[150, 420])
    assert len(calm) > 300  # every click once: left join
    assert killed == calm
