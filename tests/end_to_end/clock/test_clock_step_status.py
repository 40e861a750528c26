"""``headrace status`` shows a worker's wall-clock steps: a ``headrace worker`` under
libfaketime (its wall clock stepped +10 minutes and back through an offset file; its
monotonic clock true), on the embedded store and on Kafka, read by ``headrace status``
with the true clock: per worker, how many steps, the last one's size and when, in the
JSON and in the table."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from streams import StreamId, StreamProvider
from streams.runtime.backends import Backend
from tests.end_to_end.clock.test_clock_step import _libfaketime, faked  # noqa: F401 - the check, autouse
from tests.end_to_end.cluster.kafka_cluster_app import QUEUES, provider_for
from tests.streams.cli.helpers import clean_env, headrace, json_of

STORE_CONFIG = """
[provider]
path = "store"
queues = 2

[balancer]
lease_length = "10s"
renew_period = "1s"
refresh_period = "250ms"

[worker]
app = "tests.streams.cli.status_app:provider"
name = "w1"
status_interval = "200ms"
"""


def _until(backend: Backend, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The status as ``headrace status --json`` gives it, read in this process (a
    ``headrace status`` process a poll costs seconds), once ``holds`` (or 30 s on)."""
    deadline = time.monotonic() + 30
    while True:
        status = anyio.run(partial(backend.read_status, suspicion_timeout=30.0)).as_dict()
        if holds(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def _w1(status: dict[str, Any]) -> dict[str, Any]:
    return next((w for w in status["workers"] if w["name"] == "w1"), {"queues": [], "clock_steps": 0})


def _step_and_back(backend: Backend, offset_file: Path, log: Path, cwd: Path, *where: str) -> None:
    """Step the worker's clock +600 s, see its status show it, step it back, see that too;
    then ``headrace status`` (JSON and table) in ``cwd`` shows the same."""
    w1 = _w1(_until(backend, lambda s: bool(_w1(s)["queues"])))
    assert (w1["clock_steps"], w1["clock_step"], w1["clock_step_at"]) == (0, 0.0, None)

    before = time.time()
    offset_file.write_text("+600\n")
    w1 = _w1(_until(backend, lambda s: _w1(s)["clock_steps"] >= 1))
    assert w1["clock_steps"] == 1 and abs(w1["clock_step"] - 600) < 1.0, w1
    # When, by the worker's clock after the step: ten minutes ahead of the true time.
    assert before + 600 <= w1["clock_step_at"] <= time.time() + 601, (before, w1)
    # Its balancer says it in the log (it looks once a round: wait for that round).
    deadline = time.monotonic() + 30
    while "the wall clock stepped +600.0 s" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)

    offset_file.write_text("+0\n")
    w1 = _w1(_until(backend, lambda s: _w1(s)["clock_steps"] >= 2))
    assert w1["clock_steps"] == 2 and abs(w1["clock_step"] + 600) < 1.0, w1
    assert before <= w1["clock_step_at"] <= time.time(), (before, w1)

    status = json_of(headrace("status", *where, "--json", cwd=cwd))
    [shown] = [w for w in status["workers"] if w["name"] == "w1"]
    assert (shown["clock_steps"], shown["clock_step"], shown["clock_step_at"]) == (
        2,
        w1["clock_step"],
        w1["clock_step_at"],
    )
    table = headrace("status", *where, cwd=cwd)
    assert table.returncode == 0, table.stderr
    [line] = [line for line in table.stdout.splitlines() if line.lstrip().startswith("w1 ")]
    assert f"2, last {w1['clock_step']:+.1f} s at " in line and " ago)" in line, table.stdout
    assert "clock steps" in table.stdout


def _stepped_worker(tmp_path: Path, args: list[str], env: dict[str, str], backend: Backend, *where: str) -> None:
    """``headrace worker ARGS`` in ``tmp_path`` under libfaketime (``tmp_path/offset``),
    through :func:`_step_and_back` (``headrace status WHERE`` run in ``tmp_path/operator``);
    it stops cleanly, having lost no lease."""
    offset_file = tmp_path / "offset"
    offset_file.write_text("+0\n")
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", *args],
            cwd=tmp_path,
            env=clean_env(**env, **faked(offset_file)),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().startswith("headrace worker w1: running")
            _step_and_back(backend, offset_file, tmp_path / "worker.log", tmp_path / "operator", *where)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
    logged = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 0 and "lease lost" not in logged, logged
    # Its balancer said each step in the log, once.
    steps = [line for line in logged.splitlines() if "the wall clock stepped" in line]
    assert len(steps) == 2, logged
    assert "stepped +600.0 s" in steps[0] and "stepped -600.0 s" in steps[1], steps


def test_status_shows_a_stepped_worker_clock_on_the_embedded_store(tmp_path):
    (tmp_path / "headrace.toml").write_text(STORE_CONFIG)
    (tmp_path / "operator").mkdir()
    backend = StreamProvider.embedded(tmp_path / "store").backend
    _stepped_worker(tmp_path, [], {}, backend, "--path", str(tmp_path / "store"))


def test_status_shows_a_stepped_worker_clock_on_kafka(tmp_path, kafka_broker, kafka_topic):
    operator = tmp_path / "operator"
    operator.mkdir()
    (operator / "cluster.toml").write_text(
        f'[provider]\nadapter = "kafka"\nqueues = {QUEUES}\n\n[provider.kafka]\n'
        f'bootstrap_servers = "{kafka_broker}"\ntopic = "{kafka_topic}"\nidempotent = false\n'
    )

    async def publish() -> None:  # the topic, made by a client with the true clock
        async with provider_for(kafka_broker, kafka_topic).client() as client:
            await client.get_stream(StreamId("readings", "r")).on_next_batch([1])

    anyio.run(publish)
    env = {
        "HEADRACE_TEST_KAFKA": kafka_broker,
        "HEADRACE_TEST_TOPIC": kafka_topic,
        "HEADRACE_TEST_OUT": str(tmp_path / "got.txt"),
        "HEADRACE_WORKER__STATUS_INTERVAL": "200ms",
    }
    args = ["--app", "tests.end_to_end.cluster.kafka_cluster_app:app", "--name", "w1"]
    backend = provider_for(kafka_broker, kafka_topic).backend
    _stepped_worker(tmp_path, args, env, backend, "--config", "cluster.toml")
