"""The README's quickstart runs as written and prints what the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_quickstart_runs_as_written(tmp_path):
    text = README.read_text()
    code = re.search(r"## Quickstart\n+```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60,
        cwd=README.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "average of 1: 21.50",
        "average of 3: 22.00",
        "[21.5, 22.0, 22.5] ['0:0', '1:0', '1:1']",
    ]
