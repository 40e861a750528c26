"""``headrace status``: what each consumer type emitted (windows' final results and the updates
before them) beside what event time did to its events, counted by a real worker on the
embedded store, and equal to the results its consumer was given."""

from __future__ import annotations

import json
import signal
from typing import Any

from tests.streams.cli.helpers import clean_env, headrace, json_of, poll_status, start_worker

CONFIG = """
[provider]
path = "store"
queues = 1

[agent]
shutdown_timeout = "1s"

[worker]
app = "tests.streams.cli.page_app:provider"
name = "w1"
status_interval = "200ms"
"""
TYPE = "tests.streams.cli.page_app.Updates"
T0 = 1_700_000_000.0  # the applications' window origin


def test_windows_emitted_and_early_results_per_consumer_type(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    results = tmp_path / "results.txt"
    # u1: [0, 10) five events (an update after the 2nd and the 4th), then 11 closes it and
    # opens [10, 20) with one; u2: [0, 10) two events (one update), then 25 closes it
    for stream, times in (("updates/u1", [1, 2, 3, 4, 5, 11]), ("updates/u2", [6, 7, 25])):
        lines = "".join(json.dumps({"t": T0 + t}) + "\n" for t in times)
        produced = headrace("produce", "--stream", stream, "--event-time", "t", cwd=tmp_path, stdin=lines)
        assert produced.returncode == 0, produced.stderr
    worker = start_worker(tmp_path, env=clean_env(RESULTS_OUT=str(results)))
    try:

        def counted(s: dict[str, Any]) -> bool:
            return any(t["consumer_type"] == TYPE and t["events"] == 9 for t in s["consumer_types"])

        status = poll_status(tmp_path, counted, timeout=60)
        table = headrace("status", cwd=tmp_path).stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    [updates] = [t for t in status["consumer_types"] if t["consumer_type"] == TYPE]
    assert updates == {
        "consumer_type": TYPE,
        "events": 9,
        "adjusted": 0,
        "dropped": 0,
        "dead_lettered": 0,
        "windows_emitted": 2,
        "early_results": 3,
        "joins_emitted": 0,
        "events_out": 9,  # every event was delivered to it
    }
    # the queue's row carries the same, with the type's activations (both streams still hold
    # an open window, or none: parked or ended, never lost)
    [queue] = status["queues"]
    fates = queue["agent"]["fates"][TYPE]
    assert (fates["windows_emitted"], fates["early_results"], fates["events"]) == (2, 3, 9)
    # what the consumer was given: two final results and three updates, in revision order
    given = sorted(results.read_text().splitlines())
    assert given == ["0 False 0 2", "0 False 0 2", "0 False 1 4", "0 True 1 2", "0 True 2 5"]
    # the table shows them too
    [row] = [line for line in table.splitlines() if line.strip().startswith(TYPE)]
    assert row.split()[1:] == ["9", "9", "0", "0", "0", "2", "3", "0"]


def test_a_type_without_updates_counts_no_early_results(tmp_path):
    """A consumer type without ``emit=Every`` emits no early results: its count stays 0."""
    (tmp_path / "headrace.toml").write_text(CONFIG.replace("page_app:provider", "window_app:provider"))
    results, broken = tmp_path / "windows.txt", tmp_path / "broken"
    lines = "".join(json.dumps({"t": T0 + t}) + "\n" for t in (1, 2, 15, 40))
    produced = headrace("produce", "--stream", "rooms/r1", "--event-time", "t", cwd=tmp_path, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    worker = start_worker(tmp_path, env=clean_env(WINDOWS_OUT=str(results), WINDOWS_BROKEN=str(broken)))
    try:
        name = "tests.streams.cli.window_app.Counts"
        status = poll_status(
            tmp_path, lambda s: any(t["consumer_type"] == name and t["events"] == 4 for t in s["consumer_types"]), 60
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    [counts] = [t for t in status["consumer_types"] if t["consumer_type"] == name]
    assert (counts["windows_emitted"], counts["early_results"]) == (2, 0)
    assert results.read_text() == "0 2\n10 1\n"
    assert json_of(headrace("status", "--json", cwd=tmp_path))["consumer_types"] == []  # the worker left
