"""Running ``headrace`` as a user does: a subprocess through its real entry point, in a
directory of the test's own, with no ``HEADRACE_*`` variables but those a test gives."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def clean_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADRACE_")}
    env["PYTHONPATH"] = str(ROOT)  # the test application (tests.streams.cli.status_app) imports from here
    env.update(variables)
    return env


def headrace(
    *args: Any, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *map(str, args)],
        cwd=cwd,
        env=env or clean_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def headrace_running(
    *args: Any, cwd: Path, env: dict[str, str] | None = None, stderr: Any = subprocess.PIPE
) -> subprocess.Popen[str]:
    """``headrace ARGS`` started in ``cwd`` and left running (a server, a worker): its stdout
    a pipe (the lines it prints for a person), its stderr ``stderr``."""
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli", *map(str, args)],
        cwd=cwd,
        env=env or clean_env(),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def start_worker(cwd: Path, *args: Any, env: dict[str, str] | None = None, log: Any = None) -> subprocess.Popen[str]:
    """``headrace worker ARGS`` running in ``cwd``: its stdout a pipe (the lines it prints for
    a person), its log lines appended to ``log`` (default ``cwd/worker.log``)."""
    stderr = log if log is not None else open(cwd / "worker.log", "a")
    return headrace_running("worker", *args, cwd=cwd, env=env, stderr=stderr)


def running_worker(
    cwd: Path, *args: Any, log: Path, env: dict[str, str] | None = None, name: str = r"\S+"
) -> subprocess.Popen[str]:
    """``headrace worker ARGS`` started in ``cwd``, its log lines in the file ``log``, once it
    has said that it runs (as worker ``name``, a regular expression)."""
    process = start_worker(cwd, *args, env=env, log=open(log, "w"))
    assert process.stdout is not None
    line = process.stdout.readline()
    assert re.match(f"headrace worker {name}: running", line), (line, log.read_text())
    return process


def one_error_line(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The single error line of a failed command (exit code 2, no traceback), without its prefix."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    prefix = f"headrace {command}: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def poll_status(cwd: Path, until: Any, timeout: float = 20.0) -> Any:
    """``headrace status --json`` in ``cwd`` until ``until(status)`` holds or ``timeout``
    seconds pass; the last status either way (the caller asserts on it)."""
    deadline = time.monotonic() + timeout
    while True:
        status = json_of(headrace("status", "--json", cwd=cwd))
        if until(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def published(store: Path) -> list[tuple[str, list[Any], list[float | None] | None]]:
    """Every batch container in the store's queues: (stream, values, event times), in queue
    and sequence order (none while the store has no queues)."""
    from streams.core.batch import BatchContainer

    with sqlite3.connect(store / "headrace.db") as conn:
        made = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'queue_records'").fetchone()
        rows = conn.execute("SELECT stream, payload FROM queue_records ORDER BY queue, seq").fetchall() if made else []
    result = []
    for stream, payload in rows:
        container = BatchContainer.decode(payload)
        times = None if container.event_times is None else list(container.event_times)
        result.append((stream, list(container.values), times))
    return result
