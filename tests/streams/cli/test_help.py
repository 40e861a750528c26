"""Every command this part adds has ``--help`` with examples; the worker reads its settings
from the configuration's ``[worker]`` section."""

from __future__ import annotations

import pytest

from tests.streams.cli.helpers import headrace, one_error_line


@pytest.mark.parametrize("command", [["produce"], ["status"], ["dlq"], ["dlq", "replay"]])
def test_help_has_examples(tmp_path, command):
    result = headrace(*command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: headrace {' '.join(command)}")
    assert "\nexamples:\n  headrace " in result.stdout


def test_the_worker_reads_the_worker_section_and_refuses_unknown_keys(tmp_path):
    (tmp_path / "flat.toml").write_text('app = "tests.streams.cli.status_app:provider"\n')
    error = one_error_line(headrace("worker", "--config", "flat.toml", cwd=tmp_path), "worker")
    assert error == "flat.toml: unknown key 'app' (did you mean 'worker.app'?)"
    (tmp_path / "headrace.toml").write_text('[worker]\nname = "w1"\n')  # found without --config
    error = one_error_line(headrace("worker", cwd=tmp_path), "worker")
    assert error == "say which provider to run: --app module:attribute (or app = ... in [worker] of the config)"


def test_version_prints_the_package_version(tmp_path):
    from importlib.metadata import version

    result = headrace("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"headrace {version('headrace')}\n"


@pytest.mark.parametrize(
    "command",
    [
        ["worker"],
        ["status"],
        ["dlq", "list"],
        ["dlq", "replay"],
        ["demo"],
        ["simulate", "x.csv"],
        ["produce", "--stream", "a/b"],
    ],
)
def test_a_subcommand_usage_error_names_the_subcommand(tmp_path, command):
    result = headrace(*command, "--bogus", cwd=tmp_path)
    name = " ".join(c for c in command if not c.startswith("-") and c not in ("x.csv", "a/b"))
    assert one_error_line(result, name) == "unrecognized arguments: --bogus (see --help)"


def test_a_subcommand_bad_value_names_the_subcommand(tmp_path):
    result = headrace("worker", "--metrics-port", "x", cwd=tmp_path)
    assert (
        one_error_line(result, "worker")
        == "argument --metrics-port: a TCP port number is 0 to 65535, not 'x' (see --help)"
    )
