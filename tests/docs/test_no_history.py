"""Every tracked text file speaks of the product as it is: no working session, issue number or
aim of the development (that history is in git and CHANGELOG.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\bsession \d+|\bissue #?\d+|\baim \d", re.IGNORECASE)
EXEMPT = {"CHANGELOG.md"}


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split("\0") if name and name not in EXEMPT]


def history_lines(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the work tree
        for number, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                found.append(
                    f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}: {line.strip()[:120]}"
                )
    return found


def test_no_tracked_file_speaks_of_sessions_issues_or_aims() -> None:
    files = tracked_text_files()
    assert len(files) > 300  # the walk found the repository
    assert history_lines(files) == []


def test_the_check_finds_each_kind_of_history(tmp_path: Path) -> None:
    # What the test above rests on: each form is caught, with its file and line.
    sample = tmp_path / "notes.md"
    sample.write_text(  # split, so that this file does not match itself
        "\n".join(
            [
                "fine",
                "as in Session" + " 14",
                "fixed in issue" + " #36",
                "Issue" + " 12's",
                "the aim" + " 1.7x",
                "sessions are windows",
            ]
        )
    )
    found = history_lines([sample])
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in found] == ["2", "3", "4", "5"]
