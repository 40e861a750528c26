"""What holds a queue's checkpoint, named by ``headrace status`` (JSON and table) and the
status page's JSON: a running worker's event-time activation whose imported input's event
in force holds it, named with its consumer type, stream and input."""

from __future__ import annotations

import json
import signal
import urllib.request

from tests.streams.cli.helpers import clean_env, headrace, poll_status, start_worker
from tests.streams.runtime.helpers import free_port

CONFIG = """
[provider]
path = "store"

[worker]
app = "tests.streams.cli.holder_app:provider"
name = "w1"
status_interval = "200ms"
"""
T0 = 1_700_000_000.0
TYPE = "tests.streams.cli.holder_app.PricedTolls"


def holder_of(status: dict) -> dict | None:
    [queue] = status["queues"]
    return queue["agent"] and queue["agent"]["checkpoint_holder"]


def test_status_names_the_activation_and_input_holding_the_checkpoint(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    port = free_port()
    worker = start_worker(tmp_path, "--metrics-port", port, env=clean_env())
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "headrace worker w1: running, reading queues [0] of 1\n"
        # a price, then two tolls after it: the tolls are priced, the price stays in force
        for stream, text in (
            ("prices/a", f'{{"t": {T0 + 1}, "price": 2.5}}\n'),
            ("tolls/a", f'{{"t": {T0 + 5}}}\n{{"t": {T0 + 6}}}\n'),
        ):
            produced = headrace("produce", "--stream", stream, "--batch-size", "1", cwd=tmp_path, stdin=text)
            assert produced.returncode == 0, produced.stderr

        # until the price in force holds the checkpoint (the tolls after it priced)
        status = poll_status(tmp_path, lambda s: (holder_of(s) or {}).get("input") == "prices")
        holder = holder_of(status)
        assert holder == {
            "sequence": 0,  # the price, the first record of the queue
            "stream": "tolls/a",
            "consumer_type": TYPE,
            "subscription": None,
            "input": "prices",
            "why": "its input's event in force",
        }, (status, (tmp_path / "worker.log").read_text())
        [queue] = status["queues"]
        # the checkpoint stops below it: the price and the tolls after it are not acknowledged
        assert (queue["checkpoint"], queue["next_sequence"]) == (None, 3), queue

        table = headrace("status", cwd=tmp_path)
        assert table.returncode == 0, table.stderr
        assert "checkpoint held by" in table.stdout
        assert "input prices" in table.stdout.replace("\n", " ")

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=10) as response:
            page = json.load(response)
        assert page["queues"][0]["agent"]["checkpoint_holder"] == holder
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0
