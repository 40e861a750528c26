"""``headrace worker`` checks what it can before joining the cluster: a bad or busy metrics
address is one line and exit code 2, and the store shows no lease and no member taken; the
metrics bind address is ``--metrics-host`` (or ``metrics_host`` in ``[worker]``)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import busy_port
from tests.streams.cli.helpers import clean_env, headrace, one_error_line
from tests.streams.runtime.helpers import free_port, scrape, total

APP = "tests.streams.runtime.worker_app:make_provider"


def taken(store: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """(leases with an owner, members) the store holds: nothing when no database was made."""
    db = store / "headrace.db"
    if not db.exists():
        return [], []
    with sqlite3.connect(db) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        leases = (
            conn.execute("SELECT queue, owner FROM lease_queues WHERE owner IS NOT NULL").fetchall()
            if "lease_queues" in tables
            else []
        )
        members = (
            conn.execute("SELECT worker FROM membership_workers").fetchall() if "membership_workers" in tables else []
        )
    return leases, members


def worker(tmp_path: Path, *args: object) -> subprocess.CompletedProcess[str]:
    return headrace(
        "worker",
        "--app",
        APP,
        "--name",
        "w1",
        *args,
        cwd=tmp_path,
        env=clean_env(HEADRACE_TEST_STORE=str(tmp_path / "store")),
    )


def test_a_port_out_of_range_is_refused_before_anything(tmp_path):
    error = one_error_line(worker(tmp_path, "--metrics-port", "99999"), "worker")
    assert error == "argument --metrics-port: a TCP port number is 0 to 65535, not '99999' (see --help)"
    assert not (tmp_path / "store").exists()
    (tmp_path / "headrace.toml").write_text("[worker]\nmetrics_port = 70000\n")
    error = one_error_line(worker(tmp_path), "worker")
    assert error == "headrace.toml: worker.metrics_port: must be a TCP port number (0 to 65535), not 70000"
    assert taken(tmp_path / "store") == ([], [])


def test_a_port_in_use_is_refused_with_no_lease_taken(tmp_path):
    with busy_port() as port:
        error = one_error_line(worker(tmp_path, "--metrics-port", port), "worker")
    assert error == f"cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    assert taken(tmp_path / "store") == ([], [])


def test_an_unknown_metrics_host_is_refused_with_no_lease_taken(tmp_path):
    error = one_error_line(worker(tmp_path, "--metrics-port", "0", "--metrics-host", "no-such-host.invalid"), "worker")
    assert error.startswith("cannot serve metrics on no-such-host.invalid:0: ")
    assert taken(tmp_path / "store") == ([], [])


@pytest.mark.parametrize("where", ["option", "config"])
def test_metrics_bind_the_host_given(tmp_path, where):
    """127.0.0.2 is loopback too, but another address: the endpoint is there and not on 127.0.0.1."""
    port = free_port()
    args: list[str] = ["--metrics-port", str(port)]
    if where == "option":
        args += ["--metrics-host", "127.0.0.2"]
    else:
        (tmp_path / "headrace.toml").write_text('[worker]\nmetrics_host = "127.0.0.2"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker", "--app", APP, "--name", "w1", *args],
        cwd=tmp_path,
        env=clean_env(HEADRACE_TEST_STORE=str(tmp_path / "store")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("headrace worker w1: running")
        samples = scrape(port, host="127.0.0.2")
        assert total(samples, "headrace_agents_running", worker="w1") == 2
        with pytest.raises(OSError):
            scrape(port)  # 127.0.0.1: nothing listens there
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
