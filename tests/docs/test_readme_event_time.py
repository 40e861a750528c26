"""The README's event-time example runs as written and prints what the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_event_time_example_runs_as_written(tmp_path):
    text = README.read_text()
    code = re.search(r"## Event time\n.*?```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "event_time.py").write_text(code)
    result = subprocess.run(
        [sys.executable, str(tmp_path / "event_time.py")], capture_output=True, text=True, timeout=60, cwd=README.parent
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert printed == [
        "north B1 1699999980.0 1700000040.0 4.0",
        "north B2 1699999980.0 1700000040.0 4.5",
        "north B1 1700000040.0 1700000100.0 4.0",
    ]
    flat = " ".join(text.split())
    assert [line for line in printed if f"`{line}`" not in flat] == []  # the README quotes each
