"""``headrace status``: events in and out per second per queue (from the rows running workers
write), lag in events as well as records (read from the store), and the consumers furthest
behind on each queue."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.streams.cli.helpers import headrace, json_of, poll_status, start_worker

CONFIG = """
[provider]
path = "store"
queues = 1

[balancer]
lease_length = "4s"
renew_period = "1s"
refresh_period = "500ms"

[agent]
shutdown_timeout = "1s"

[worker]
app = "tests.streams.cli.rates_app:provider"
name = "w1"
status_interval = "200ms"
"""


def produce(cwd: Path, stream: str, batches: int, per_batch: int) -> None:
    lines = "".join(f'{{"n": {i}}}\n' for i in range(batches * per_batch))
    result = headrace("produce", "--stream", stream, "--batch-size", per_batch, cwd=cwd, stdin=lines)
    assert result.returncode == 0, result.stderr


def test_lag_in_events_without_a_worker(tmp_path):
    produced = headrace(
        "produce",
        "--path",
        "store",
        "--queues",
        "1",
        "--stream",
        "a/b",
        "--batch-size",
        "5",
        cwd=tmp_path,
        stdin="".join(f"{i}\n" for i in range(12)),
    )  # 3 records: 5, 5 and 2 events
    assert produced.returncode == 0, produced.stderr
    [queue] = json_of(headrace("status", "--path", "store", "--json", cwd=tmp_path))["queues"]
    assert (queue["checkpoint_lag"], queue["lag_events"], queue["lag_events_more"]) == (3, 12, False)
    table = headrace("status", "--path", "store", cwd=tmp_path).stdout
    assert "lag events" in table


def test_rates_lag_in_events_and_the_slowest_consumer(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    produce(tmp_path, "stuck/s1", batches=1, per_batch=3)  # record 0: its consumer never finishes it
    worker = start_worker(tmp_path)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "headrace worker w1: running, reading queues [0] of 1\n"
        produce(tmp_path, "readings/r1", batches=4, per_batch=10)  # records 1-4, 40 events

        def read_all(s: dict[str, Any]) -> bool:
            agent = s["queues"][0]["agent"]
            return bool(agent) and agent["events_in"] == 43 and agent["events_out"] == 40

        status = poll_status(tmp_path, read_all)
        [queue] = status["queues"]
        agent = queue["agent"]
        assert (agent["events_in"], agent["events_out"]) == (43, 40), (tmp_path / "worker.log").read_text()
        # The stuck consumer holds the checkpoint at record 0: all five records, 43 events, are behind it.
        assert (queue["checkpoint_lag"], queue["lag_events"]) == (5, 43)
        assert agent["slowest"] == [
            {
                "stream": "stuck/s1",
                "subscription": "implicit:tests.streams.cli.rates_app.Stuck",
                "next_sequence": 0,
                "behind": 5,
            }
        ]
        assert agent["events_in_per_s"] is not None and agent["events_in_per_s"] >= 0
        # per consumer type, the events delivered to it: the plain Counting's 40, none yet to Stuck,
        # which holds the checkpoint as the consumer furthest behind
        counting, stuck = (f"tests.streams.cli.rates_app.{name}" for name in ("Counting", "Stuck"))
        assert {t["consumer_type"]: t["events_out"] for t in status["consumer_types"]} == {counting: 40, stuck: 0}
        assert agent["checkpoint_holder"] == {
            "sequence": 0,
            "stream": "stuck/s1",
            "consumer_type": None,
            "subscription": "implicit:tests.streams.cli.rates_app.Stuck",
            "input": None,
            "why": "behind",
        }

        def idle(s: dict[str, Any]) -> bool:  # nothing new for an interval: both rates are 0
            a = s["queues"][0]["agent"]
            return bool(a) and a["events_in_per_s"] == 0.0 and a["events_out_per_s"] == 0.0

        assert idle(poll_status(tmp_path, idle))
        table = headrace("status", cwd=tmp_path).stdout
        assert "slowest consumers" in table and "implicit:tests.streams.cli.rates_app.Stuck" in table
        assert "in/s" in table and "out/s" in table
        [row] = [line for line in table.splitlines() if line.strip().startswith(counting)]
        assert row.split()[1] == "40"  # events out
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)


def test_rates_are_the_change_over_the_interval_and_none_after_a_restart():
    from agents.counters import LatencyHistogram
    from streams.adapters.status import AgentStatus
    from streams.runtime.snapshot import EventTimeTotals, QueueSnapshot
    from streams.runtime.status import agent_status

    def queue(read: int, delivered: int) -> QueueSnapshot:
        return QueueSnapshot(
            0,
            read,
            0,
            0,
            LatencyHistogram().snapshot(),
            0,
            10,
            False,
            1,
            1,
            0,
            0,
            0,
            EventTimeTotals(),
            events_read=read,
            events_delivered=delivered,
        )

    first = agent_status("w1", queue(10, 4), taken_at=100.0, interval=1.0)
    assert (first.events_in_per_s, first.events_out_per_s) == (None, None)
    second = agent_status("w1", queue(40, 34), taken_at=102.0, interval=1.0, before=first)
    assert (second.events_in_per_s, second.events_out_per_s) == (15.0, 15.0)
    restarted = agent_status("w1", queue(5, 5), taken_at=103.0, interval=1.0, before=second)
    assert (restarted.events_in_per_s, restarted.events_out_per_s) == (None, None)
    # consumers that closed took their counts out of the sum: no rate rather than a negative one
    closed = agent_status("w1", queue(50, 20), taken_at=104.0, interval=1.0, before=second)
    assert (closed.events_in_per_s, closed.events_out_per_s) == (None, None)
    assert AgentStatus.from_row(second.as_row()) == second
