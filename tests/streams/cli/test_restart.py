"""A worker stopped hard (SIGKILL) and restarted under its own name, on the embedded store:
``headrace status`` calls the dead one stale, and the restart takes its leases back at once
instead of being refused for the suspicion timeout and then waiting for the leases to expire.
Workers gone long ago are left out of ``status`` unless ``--all``."""

from __future__ import annotations

import signal
import sqlite3
import time

from tests.streams.cli.helpers import headrace, json_of, start_worker

# Leases of 60 s and a suspicion timeout of 30 s: without the takeover, the restart below
# would be refused for 30 s and then read no queue until the old leases expired.
CONFIG = """
[provider]
path = "store"
queues = 2

[balancer]
lease_length = "60s"
renew_period = "5s"
refresh_period = "500ms"

[worker]
app = "tests.streams.cli.status_app:provider"
name = "w1"
status_interval = "200ms"
"""


def test_a_worker_restarted_after_sigkill_takes_its_leases_back_at_once(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    first = start_worker(tmp_path)
    assert first.stdout is not None
    assert first.stdout.readline() == "headrace worker w1: running, reading queues [0, 1] of 2\n"
    [before] = json_of(headrace("status", "--json", cwd=tmp_path))["workers"]
    assert (before["state"], before["queues"]) == ("live", [0, 1])
    assert before["instance"].split("/")[1] == str(first.pid)

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    status = json_of(headrace("status", "--json", cwd=tmp_path))
    [dead] = status["workers"]
    assert (dead["state"], dead["queues"], dead["instance"]) == ("stale", [0, 1], before["instance"])
    assert [q["epoch"] for q in status["queues"]] == [1, 1]
    table = headrace("status", cwd=tmp_path).stdout
    assert "w1       stale" in table and "0 live workers" in table

    second = start_worker(tmp_path)
    try:
        assert second.stdout is not None
        assert second.stdout.readline() == "headrace worker w1: running, reading queues [0, 1] of 2\n", (
            tmp_path / "worker.log"
        ).read_text()
        status = json_of(headrace("status", "--json", cwd=tmp_path))
        [now] = status["workers"]
        assert (now["state"], now["queues"]) == ("live", [0, 1])
        assert now["instance"].split("/")[1] == str(second.pid)
        assert [(q["owner"], q["epoch"]) for q in status["queues"]] == [
            ("w1", 2),
            ("w1", 2),
        ]  # the old tenure is fenced
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    assert second.returncode == 0, (tmp_path / "worker.log").read_text()


def test_workers_gone_long_ago_are_left_out_unless_all(tmp_path):
    produced = headrace("produce", "--path", "store", "--queues", "2", "--stream", "a/b", cwd=tmp_path, stdin="1\n")
    assert produced.returncode == 0, produced.stderr
    now = time.time()
    with sqlite3.connect(tmp_path / "store" / "headrace.db") as conn:  # the table a worker makes when it joins
        conn.execute(
            "CREATE TABLE IF NOT EXISTS membership_workers(worker TEXT PRIMARY KEY, incarnation TEXT NOT NULL,"
            " joined_at REAL NOT NULL, last_heartbeat REAL NOT NULL, left_at REAL)"
        )
        conn.executemany(
            "INSERT INTO membership_workers VALUES (?, ?, ?, ?, ?)",
            [
                ("w-left-long-ago", "elsewhere/1/a", now - 7200, now - 3700, now - 3600),
                ("w-silent-long-ago", "elsewhere/2/b", now - 7200, now - 3600, None),
                ("w-left-lately", "elsewhere/3/c", now - 100, now - 20, now - 10),
            ],
        )
    status = json_of(headrace("status", "--path", "store", "--json", cwd=tmp_path))
    assert [w["name"] for w in status["workers"]] == ["w-left-lately"] and status["workers_not_shown"] == 2
    table = headrace("status", "--path", "store", cwd=tmp_path).stdout
    assert "2 workers gone for longer than 300 s not shown (--all shows them)" in table
    assert "w-left-long-ago" not in table
    everyone = json_of(headrace("status", "--path", "store", "--json", "--all", cwd=tmp_path))
    assert [(w["name"], w["state"]) for w in everyone["workers"]] == [
        ("w-left-lately", "left"),
        ("w-left-long-ago", "left"),
        ("w-silent-long-ago", "suspected"),
    ]
    assert everyone["workers_not_shown"] == 0
