"""A poison record on the embedded store, through a real ``headrace worker``: the constructor
of its stream's consumer raises. The record is one ``activation_failed`` letter however often
the worker is killed and restarted, and the worker and the other streams go on."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.streams.cli.helpers import clean_env, headrace, start_worker

CONFIG = """
[provider]
path = "store"
queues = 1

[agent]
max_event_delivery_time = "300ms"
delivery_retry_backoff = "20ms"

[worker]
app = "tests.streams.cli.poison_app:provider"
name = "w1"
"""


def _produce(cwd: Path, stream: str, value: int) -> None:
    produced = headrace("produce", "--stream", stream, cwd=cwd, stdin=f"{value}\n")
    assert produced.returncode == 0, produced.stderr


def _letters(cwd: Path) -> list[dict]:
    listed = headrace("dlq", "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def _wait_for(what, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (found := what()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_a_poison_record_restarted_three_times_is_one_letter_and_a_running_worker(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    out = tmp_path / "out.txt"
    out.touch()
    env = clean_env(POISON_OUT=str(out))
    _produce(tmp_path, "orders/poison", 666)
    for attempt in range(4):  # the first run, then three restarts after a kill
        _produce(tmp_path, "orders/good", attempt)
        worker = start_worker(tmp_path, env=env)
        assert worker.stdout is not None
        assert worker.stdout.readline() == "headrace worker w1: running, reading queues [0] of 1\n"
        assert _wait_for(lambda: f"good {attempt}\n" in out.read_text()), (tmp_path / "worker.log").read_text()
        letters = _wait_for(lambda: _letters(tmp_path))
        assert [(x["reason"], x["value"]) for x in letters] == [("activation_failed", 666)]  # one, every run
        assert worker.poll() is None  # alive
        if attempt < 3:
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
    try:
        _produce(tmp_path, "orders/poison", 667)  # the stream's next record tries again, and fails again
        letters = _wait_for(lambda: len(_letters(tmp_path)) == 2 and _letters(tmp_path))
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    assert [(x["reason"], x["stream"], x["value"]) for x in letters] == [
        ("activation_failed", "orders/poison", 666),
        ("activation_failed", "orders/poison", 667),
    ]
    assert "ValueError: no customer for poison" in letters[0]["detail"]
    # every good record once, in order, across the kills (at least once: a kill may replay one)
    lines = out.read_text().splitlines()
    assert list(dict.fromkeys(lines)) == [f"good {n}" for n in range(4)]
