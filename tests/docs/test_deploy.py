"""docs/deploy.md: its systemd unit passes ``systemd-analyze verify``, and its image's entry
point, run as a plain process with the same arguments, runs a worker that is ready, leaves on
SIGTERM and exits 0."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.streams.cli.helpers import clean_env
from tests.streams.runtime.helpers import free_port
from tests.streams.runtime.test_health import probe

PAGE = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def block(lang: str) -> str:
    [found] = re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), re.S)
    return found


def test_the_systemd_unit_verifies(tmp_path):
    # Every machine of this project's kind has systemd (Debian's image); its absence is a
    # machine that cannot check the page, a failure to see, not a test to skip.
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing: apt-get install systemd"
    unit = block("ini")
    assert "ExecStart=/opt/headrace/venv/bin/headrace worker " in unit and "KillSignal=SIGTERM" in unit
    # the venv's own headrace where the page installs it: verify checks the program exists
    unit = unit.replace("/opt/headrace/venv/bin/headrace", str(Path(sys.executable).parent / "headrace"))
    (tmp_path / "headrace-worker@1.service").write_text(unit)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "headrace-worker@1.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


def test_the_images_entry_point_runs_a_worker_that_leaves_on_sigterm(tmp_path):
    dockerfile = block("dockerfile")
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M).group(1))
    args = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    assert entry == ["headrace", "worker"] and "9464" in args
    port = free_port()
    args = [str(port) if a == "9464" else a for a in args]
    (tmp_path / "headrace.toml").write_text('[worker]\napp = "tests.streams.runtime.worker_app:make_provider"\n')
    command = [str(Path(sys.executable).parent / entry[0]), *entry[1:], *args]
    env = clean_env(HEADRACE_TEST_STORE=str(tmp_path / "store"))
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().endswith("running, reading queues [0, 1] of 2\n"), shlex.join(command)
        assert probe(port, "/readyz") == (200, "ready: reading queues [0, 1]")
        assert probe(port, "/livez") == (200, "live")
        worker.send_signal(signal.SIGTERM)  # what `docker stop` and Kubernetes send PID 1
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    assert "leaving; handing back 2 queues" in (tmp_path / "worker.log").read_text()
