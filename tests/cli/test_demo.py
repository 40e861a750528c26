from __future__ import annotations

import subprocess
import sys


def headrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_demo_reconciles_what_it_generated():
    result = headrace("demo", "--streams", "30", "--events", "120", "--queues", "4")
    assert result.returncode == 0, result.stderr
    assert "generated 3,600 readings, delivered 3,600, streams completed 30" in result.stdout
    assert "reconciled: every generated reading was delivered exactly once" in result.stdout


def test_demo_bad_option_is_one_line_and_exit_2():
    result = headrace("demo", "--streams", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "headrace demo: error: --streams, --events and --queues must be positive"
    ]
    assert "Traceback" not in result.stderr


def test_no_command_prints_help_and_exit_2():
    result = headrace()
    assert result.returncode == 2
    assert "usage: headrace" in result.stdout


def test_unknown_option_is_one_line():
    result = headrace("demo", "--nope")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "headrace: error: unrecognized arguments: --nope (see --help)"
    ]
