"""docs/architecture.md's list of the files one event crosses is the list a traced run gives."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def documented_path() -> list[str]:
    """The numbered files of the page's section "The event's path", in order."""
    text = PAGE.read_text()
    section = text.split("## The event's path", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, flags=re.MULTILINE)


def traced_path() -> tuple[list[str], dict[str, int]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs.event_path"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    traced = json.loads(done.stdout)
    return traced["files"], traced["entries"]


def test_the_page_lists_the_files_a_traced_event_crosses_in_the_order_first_entered() -> None:
    files, entries = traced_path()
    documented = documented_path()
    assert len(documented) == len(set(documented)), "a file is listed twice"
    missing = [f for f in files if f not in documented]
    gone = [f for f in documented if f not in files]
    assert not missing and not gone, f"entered but not listed: {missing}; listed but not entered: {gone}"
    assert documented == files  # and in the order first entered
    # The page gives the count in words and the traced count agrees with it.
    assert f"**{len(files)} files**" in PAGE.read_text()
    assert all(entries[f] >= 1 for f in files)


def test_the_documented_list_is_read_from_the_page() -> None:
    # The parser finds numbered entries only inside the section (a guard for the test above).
    documented = documented_path()
    assert documented[0] == "streams/runtime/stream.py"
    assert all(name.endswith(".py") and (ROOT / name).is_file() for name in documented)
