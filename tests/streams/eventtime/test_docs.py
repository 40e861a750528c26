"""``docs/event-time.md``: its examples run as written and print what the page shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[3] / "docs" / "event-time.md"
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(PAGE.read_text())


def test_python_example_prints_what_the_page_shows(tmp_path):
    found = blocks()
    i = next(i for i, (lang, _) in enumerate(found) if lang == "python")
    script = tmp_path / "example.py"
    script.write_text(found[i][1])
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == found[i + 1][1]


def test_simulate_examples_print_what_the_page_shows(tmp_path):
    found = blocks()
    shell = [i for i, (lang, _) in enumerate(found) if lang == "sh"]
    assert len(shell) == 2
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for i in shell:  # in page order: the first writes sample.csv, the second reuses it
        result = subprocess.run(
            ["bash", "-euc", found[i][1]], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == found[i + 1][1]
