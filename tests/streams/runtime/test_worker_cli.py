"""``headrace worker --metrics-port P --log-format json``: a real worker process serves its
metrics over loopback and writes JSON log lines naming itself and the queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio

from streams import StreamId, StreamProvider
from tests.streams.runtime.helpers import free_port, scrape, total
from tests.streams.runtime.worker_app import QUEUES

ROOT = Path(__file__).resolve().parents[3]


async def test_worker_serves_metrics_and_logs_json(tmp_path):
    store, port = tmp_path / "store", free_port()
    stderr = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streams.cli",
            "worker",
            "--app",
            "tests.streams.runtime.worker_app:make_provider",
            "--name",
            "w-cli",
            "--metrics-port",
            str(port),
            "--log-format",
            "json",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HEADRACE_TEST_STORE": str(store)},
        stdout=subprocess.PIPE,
        stderr=stderr.open("w"),
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().startswith("headrace worker w-cli: running"), stderr.read_text()
        sid = StreamId("sensors", "s-1")
        client = StreamProvider.embedded(store, queues=QUEUES)
        async with client.client():
            for n in range(3):
                await client.get_stream(sid).on_next_batch([n, n + 1])
            adapter = await client.factory.create_adapter()
            await adapter.queue_message_batch(client.mapper.get_queue_for_stream(sid), sid, b"\x00junk")
        with anyio.fail_after(20):
            while True:
                samples = await anyio.to_thread.run_sync(scrape, port)
                if total(samples, "headrace_queue_records_read_total") == 4:
                    break
                await anyio.sleep(0.1)
        assert total(samples, "headrace_agents_running", worker="w-cli") == QUEUES
        assert total(samples, "headrace_batches_delivered_total", worker="w-cli") == 3
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, stderr.read_text()
    entries = [json.loads(line) for line in stderr.read_text().splitlines()]
    queue = client.mapper.get_queue_for_stream(sid).number
    agent = next(e for e in entries if "do not decode" in e["msg"])
    assert (agent["logger"], agent["level"], agent["worker"], agent["queue"], agent["stream"]) == (
        "headrace.agent",
        "warning",
        "w-cli",
        queue,
        None,
    )
    assert all(e["worker"] == "w-cli" for e in entries)
