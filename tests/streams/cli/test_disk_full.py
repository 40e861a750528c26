"""The store's disk full, for real: a 3 MB tmpfs (mounting it needs root, as the tests run
here; without, the test fails rather than skips), filled by a file. Producers get a
StoreError per publish that cannot be written, nothing acknowledged is lost, publishing
resumes when space returns; a worker stopped while the disk is full says in one line that
it could not write its last checkpoint and exits 74."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from streams import StreamId, StreamProvider
from streams.core.errors import StoreError
from tests.streams.cli.helpers import clean_env, start_worker

CONFIG = """
[provider]
path = "disk/store"
queues = 2

[worker]
app = "tests.streams.cli.poison_app:provider"
name = "w1"
status_interval = "1s"
"""
ACKNOWLEDGED = 5_000


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], capture_output=True)
    assert mounted.returncode == 0, f"cannot mount a 3 MB tmpfs: {mounted.stderr.decode()}"
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; returns the file to delete to give them back."""
    filler = disk / f"filler-{len(list(disk.glob('filler-*')))}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:  # ENOSPC: full
        pass
    finally:
        os.close(fd)
    return filler


async def _publish(store: Path, disk: Path) -> tuple[int, list[str], int]:
    """Publish batches of 50 until ``ACKNOWLEDGED`` events are acknowledged, filling the
    disk after the first thousand and giving the space back after 20 refused batches:
    (events acknowledged, what the refusals were, the first event acknowledged again)."""
    refusals: list[str] = []
    acknowledged, resumed, filler = 0, -1, None
    provider = StreamProvider.embedded(store, queues=2)
    async with provider.client():
        n = 0
        while acknowledged < ACKNOWLEDGED:
            if acknowledged == 1_000 and filler is None:
                filler = _fill(disk)
            batch = list(range(n, n + 50))
            try:
                await provider.get_stream(StreamId("orders", f"k{n % 7}")).on_next_batch(batch)
                acknowledged += len(batch)
                if refusals and resumed < 0:
                    resumed = n
            except StoreError as exc:
                refusals.append(type(exc).__name__)
                if len(refusals) == 20 and filler is not None:
                    filler.unlink()  # space returns
            n += len(batch)
    return acknowledged, refusals, resumed


def test_a_full_disk_refuses_each_publish_loses_nothing_and_a_stopped_worker_says_why(tmp_path, small_disk):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    out = tmp_path / "delivered.txt"
    out.touch()
    env = clean_env(POISON_OUT=str(out))
    worker = start_worker(tmp_path, env=env)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "headrace worker w1: running, reading queues [0, 1] of 2\n"
        acknowledged, refusals, resumed = anyio.run(_publish, small_disk / "store", small_disk)
        assert acknowledged == ACKNOWLEDGED
        assert refusals == ["StoreError"] * 20 and resumed > 0  # one clear error per publish, then on again
        deadline = time.monotonic() + 60
        while len(out.read_text().splitlines()) < ACKNOWLEDGED and time.monotonic() < deadline:
            time.sleep(0.2)
        delivered = {int(line.split()[1]) for line in out.read_text().splitlines()}
        # every acknowledged event delivered (those refused were never acknowledged)
        assert len(delivered) == ACKNOWLEDGED
        assert worker.poll() is None

        _fill(small_disk)  # full again, and the worker told to stop
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    log = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 74, log
    last = log.strip().splitlines()[-1]
    assert last.startswith("headrace worker w1: stopped without writing its last checkpoint: the embedded store")
    assert last.endswith("its queues replay from the last checkpoint written (exit code 74)")
    assert "ExceptionGroup" not in log and "Traceback" not in log
