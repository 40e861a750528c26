"""``headrace status`` on a store with no worker, and on one with a live worker that reports
its agents; the worker leaves on SIGTERM and its status rows go with it."""

from __future__ import annotations

import io
import json
import signal
import time
from typing import Any

from tests.streams.cli.helpers import clean_env, headrace, json_of, one_error_line, poll_status, start_worker

CONFIG = """
[provider]
path = "store"
queues = 2

[balancer]
lease_length = "4s"
renew_period = "1s"
refresh_period = "500ms"

[time]
out_of_order = "0s"
action = "drop"

[worker]
app = "tests.streams.cli.status_app:provider"
name = "w1"
status_interval = "200ms"
"""


def test_status_of_a_store_without_workers(tmp_path):
    produced = headrace(
        "produce",
        "--path",
        "store",
        "--queues",
        "3",
        "--stream",
        "a/b",
        "--batch-size",
        "1",
        cwd=tmp_path,
        stdin="1\n2\n",
    )
    assert produced.returncode == 0, produced.stderr
    status = json_of(headrace("status", "--path", "store", "--json", cwd=tmp_path))
    assert status["queue_count"] == 3 and status["workers"] == [] and status["dead_letters"] == []
    [queue] = [q for q in status["queues"] if q["next_sequence"]]
    assert (queue["retained"], queue["checkpoint"], queue["checkpoint_lag"], queue["owner"]) == (2, None, 2, None)
    table = headrace("status", "--path", "store", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith(f"headrace store {tmp_path / 'store'}: 3 queues, 0 live workers at ")
    assert "workers: none has joined" in table.stdout and "dead letters: none" in table.stdout
    assert "cache and watermarks: no running worker has reported them" in table.stdout

    error = one_error_line(headrace("status", "--path", "stroe", cwd=tmp_path), "status")
    assert (
        error
        == f"no headrace store at '{tmp_path / 'stroe'}' (no headrace.db there): give the directory your workers and producers use"
    )
    assert not (tmp_path / "stroe").exists()  # reading never creates a store


def test_a_live_worker_reports_its_agents_and_leaves(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    t0 = int(time.time()) - 20
    # the third event is out of order: the policy (action = "drop") dead-letters it
    lines = "".join(f'{{"n": {d}, "ts": {t0 + d}}}\n' for d in (1, 2, 0, 3))
    produced = headrace(
        "produce", "--stream", "readings/r1", "--event-time", "ts", "--batch-size", "1", cwd=tmp_path, stdin=lines
    )
    assert produced.returncode == 0, produced.stderr

    env = clean_env()
    worker = start_worker(tmp_path, env=env)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "headrace worker w1: running, reading queues [0, 1] of 2\n"

        def settled(s: dict[str, Any]) -> bool:
            return any(
                q["agent"] and q["agent"]["watermark_min"] and q["checkpoint_lag"] == 0 for q in s["queues"]
            ) and bool(s["dead_letters"])

        status = poll_status(tmp_path, settled)
        [w1] = status["workers"]
        assert (w1["name"], w1["state"], w1["queues"]) == ("w1", "live", [0, 1])
        [queue] = [q for q in status["queues"] if q["next_sequence"]]
        assert (
            queue["owner"],
            queue["epoch"],
            queue["next_sequence"],
            queue["checkpoint"],
            queue["checkpoint_lag"],
        ) == ("w1", 1, 4, 3, 0)
        agent = queue["agent"]
        assert (agent["worker"], agent["cache_max"], agent["streams"], agent["read_messages"]) == ("w1", 4096, 1, 4)
        assert agent["watermark_min"] == t0 + 3  # out_of_order = 0s: the highest event time seen
        assert agent["watermark_delay"] >= 0 and agent["under_pressure"] is False
        assert status["dead_letters"] == [{"reason": "out_of_order", "count": 1, "replayed": 0}]

        table = headrace("status", cwd=tmp_path).stdout
        assert "w1       live" in table and "4/4,096" in table and "out_of_order   1       0" in table

        listed = headrace("dlq", "list", "--json", cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        [letter] = [json.loads(line) for line in listed.stdout.splitlines()]
        assert (letter["reason"], letter["stream"], letter["value"], letter["event_time"]) == (
            "out_of_order",
            "readings/r1",
            {"n": 0, "ts": t0},
            t0,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    assert out == "headrace worker w1: left\n"

    status = json_of(headrace("status", "--json", cwd=tmp_path))
    assert [(w["name"], w["state"], w["queues"]) for w in status["workers"]] == [("w1", "left", [])]
    assert all(q["agent"] is None and q["owner"] is None for q in status["queues"]) and status["agents"] == []


def test_a_long_watermark_delay_says_why():
    from rich.console import Console

    from streams.adapters.status import AgentStatus, ClusterStatus, QueueStatus
    from streams.cli.status import render

    def queue(number: int, delay: float) -> QueueStatus:
        agent = AgentStatus("w1", number, 0, 4096, False, 3, 10, 0, 1_700_000_000.0, delay, 0.0, 5.0)
        return QueueStatus(number, "w1", 1, None, 0, 10, 10, 9, 0, agent)

    def shown(*queues: QueueStatus) -> str:
        out = Console(width=400, record=True, file=io.StringIO())
        render(ClusterStatus("store", 1_795_789_332.0, 10.0, len(queues), queues=list(queues)), out)
        return out.export_text()

    text = shown(queue(0, 2.5), queue(1, 95_789_332.0))
    assert "2.5 s" in text and "95,789,332 s (3.0 years)" in text
    assert (
        "\ndelay 95,789,332 s (3.0 years) on queue 1: the lowest watermark is that far behind the clock, because the "
        "events' times are that old (a replay of old data: windows still close by event time) or a stream has had "
        "no event since (late_arrival or idle_timeout move a silent one)\n"
    ) in text
    assert "the lowest watermark is that far behind" not in shown(queue(0, 2.5))


def test_the_workers_table_shows_each_workers_clock_steps_once_one_stepped():
    from rich.console import Console

    from streams.adapters.status import ClusterStatus, WorkerStatus
    from streams.cli.status import render

    now = 1_795_789_332.0

    def shown(*workers: WorkerStatus) -> list[str]:
        out = Console(width=400, record=True, file=io.StringIO())
        render(ClusterStatus("store", now, 10.0, 2, workers=list(workers)), out)
        return [line.rstrip() for line in out.export_text().splitlines()]

    steady = WorkerStatus("w1", "live", now - 60, now - 1, None, [0], "h/1/1")
    lines = shown(steady)
    assert not any("clock steps" in line for line in lines)  # no column while no clock stepped
    stepped = WorkerStatus(
        "w2", "live", now - 60, now - 1, None, [1], "h/2/1", clock_steps=3, clock_step=-600.25, clock_step_at=now - 42
    )
    lines = shown(steady, stepped)
    [head] = [line for line in lines if "worker" in line and "state" in line]
    assert head.split()[-2:] == ["clock", "steps"]
    [w1] = [line for line in lines if line.lstrip().startswith("w1 ")]
    [w2] = [line for line in lines if line.lstrip().startswith("w2 ")]
    assert w1.endswith(" -")
    assert w2.endswith("3, last -600.2 s at 2026-11-27T14:21:30Z (42.0 s ago)"), w2
