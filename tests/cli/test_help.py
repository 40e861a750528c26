"""Every command this part adds has ``--help`` with examples; the worker reads its settings
from the configuration's ``[worker]`` section."""

from __future__ import annotations

import pytest

from .helpers import headrace, one_error_line


@pytest.mark.parametrize("command", [["produce"], ["status"], ["dlq"], ["dlq", "replay"]])
def test_help_has_examples(tmp_path, command):
    result = headrace(*command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: headrace {' '.join(command)}")
    assert "\nexamples:\n  headrace " in result.stdout


def test_the_worker_reads_the_worker_section_and_refuses_unknown_keys(tmp_path):
    (tmp_path / "flat.toml").write_text('app = "tests.cli.status_app:provider"\n')
    error = one_error_line(headrace("worker", "--config", "flat.toml", cwd=tmp_path), "worker")
    assert error == "flat.toml: unknown key 'app' (did you mean 'worker.app'?)"
    (tmp_path / "headrace.toml").write_text('[worker]\nname = "w1"\n')  # found without --config
    error = one_error_line(headrace("worker", cwd=tmp_path), "worker")
    assert error == "say which provider to run: --app module:attribute (or app = ... in [worker] of the config)"
