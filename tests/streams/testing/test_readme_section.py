"""The "Testing your consumers" examples of docs/guide.md are tests/streams/testing/test_readme_example.py
and test_readme_restart_example.py, verbatim; the README shows the restart example's consumer."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_guide_shows_the_example_that_runs_verbatim():
    guide = (ROOT / "docs" / "guide.md").read_text()
    shown = re.search(r"## Testing your consumers\n.*?```python\n(.*?)```", guide, re.S)
    assert shown is not None, "the guide has no 'Testing your consumers' example"
    assert shown.group(1) == (ROOT / "tests/streams/testing/test_readme_example.py").read_text()


def test_the_guide_shows_the_restart_example_that_runs_verbatim():
    readme = (ROOT / "README.md").read_text()
    guide = (ROOT / "docs" / "guide.md").read_text()
    example = (ROOT / "tests/streams/testing/test_readme_restart_example.py").read_text()
    testing = guide[guide.index("## Testing your consumers") :]
    assert f"```python\n{example}```" in testing
    # The first screen of the consumer docs shows its consumer, as the file has it.
    survives = re.search(r"### What survives a restart\n.*?```python\n(.*?)```", readme, re.S)
    assert survives is not None, "the README has no 'What survives a restart' section"
    assert survives.group(1) in example
