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


async def test_the_timers_example_fires_after_30_minutes_of_event_time(tmp_path, capsys):
    """The "Timers and durable state" example, run by the harness: the timer the last window
    set fires once the watermark passes its end + 1800 s, with the carts its windows counted."""
    from streams.testing import Harness

    text = PAGE.read_text()
    code = re.search(r"## Timers and durable state\n.*?```python\n(.*?)```", text, re.S).group(1)
    namespace: dict[str, object] = {}
    exec(compile(code.replace('"data/"', repr(str(tmp_path))), "example", "exec"), namespace)
    async with Harness(namespace["provider"]) as harness:
        await harness.publish("sessions/s1", {"t": 10}, {"t": 20}, at=30)
        await harness.publish("sessions/s1", {"t": 400}, at=400)  # W 340: [0, 300) closes, timer at 2100
        await harness.advance_to(2100 + 60)  # late arrival: W = 2100, and [300, 600) closed at 600
        assert capsys.readouterr().out == ""  # ... which moved the timer to 600 + 1800
        await harness.advance_to(2400 + 60)  # W = 2400 on the silent stream: it fires
        await harness.advance_to(5000)
    assert capsys.readouterr().out.splitlines() == ["no activity for 30 minutes of event time; carts seen: 3"]
