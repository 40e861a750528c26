"""docs/walkthrough.md runs as written: its module, its commands (the `headrace` script, a
worker in the background) and its Spark snippet, whose output is the table the page shows,
in this process and in a fresh one. Every command runs as in a fresh shell: the `headrace`
command on PATH but not the venv, and no PYSPARK_PYTHON or PYTHONPATH."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "walkthrough.md"


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w*)\n(.*?)```", text, re.S)


def test_the_walkthrough_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    blocks = _blocks(PAGE.read_text())
    assert [lang for lang, _ in blocks] == ["python", "sh", "json", "sh", "sh", "python", ""]
    (app, worker_cmd, data, produce_cmd, status_cmd, spark_code, shown) = (code for _, code in blocks)
    (tmp_path / "tolls_app.py").write_text(app)
    (tmp_path / "tolls.jsonl").write_text(data)
    # A fresh shell: headrace installed as a tool (its `headrace` command on PATH, as pipx
    # does), but not its venv (the first python3 on PATH has no headrace), and no
    # PYSPARK_PYTHON, PYTHONPATH or HEADRACE_* variables.
    venv_bin = str(Path(sys.executable).parent)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "headrace").symlink_to(Path(venv_bin) / "headrace")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "HEADRACE_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env["PATH"] = os.pathsep.join(
        [str(tools), *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)]
    )
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            shlex.split(worker_cmd), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=log, text=True
        )
    try:
        assert worker.stdout is not None
        assert re.fullmatch(r"headrace worker \S+: running, reading queues \[0, 1\] of 2\n", worker.stdout.readline())
        produced = subprocess.run(shlex.split(produce_cmd), cwd=tmp_path, env=env, capture_output=True, text=True)
        assert produced.returncode == 0, produced.stderr
        assert "published 8 events to 2 streams of tolls (by plaza) in 2 batches" in produced.stdout
        monkeypatch.chdir(tmp_path)  # the snippet runs "from the same directory"
        deadline = time.monotonic() + 30
        while True:  # the worker hands the windows off as it reads them: wait for all three
            namespace: dict[str, object] = {}
            exec(spark_code, namespace)
            printed = capsys.readouterr().out.strip()  # show() ends with a blank line
            if printed == shown.strip() or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert printed == shown.strip()
        # Step 5 again as a user runs it: a new Python with headrace (the venv's, by its path)
        # in the fresh shell. Spark's workers would start the first python3 on PATH, which
        # has no headrace, unless register() points a local Spark at this interpreter.
        step5 = subprocess.run(
            [sys.executable, "-c", spark_code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert step5.returncode == 0, step5.stderr[-3000:]
        assert step5.stdout.strip() == shown.strip()
        status = subprocess.run(shlex.split(status_cmd), cwd=tmp_path, env=env, capture_output=True, text=True)
        assert status.returncode == 0, status.stderr
        assert "booth-totals" in status.stdout and "BoothTotals" in (tmp_path / "worker.log").read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
