"""``docs/event-time.md``: its examples run as written and print what the page shows."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from streams.testing import Harness

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


JOIN_T0 = 1_700_000_000.0


def join_example(tmp_path: Path, monkeypatch, late_arrival: bool = True) -> type:  # type: ignore[no-untyped-def]
    """The page's interval-join class, as written (or without its ``late_arrival``), run from
    a module in ``tmp_path`` (its store directory is made there, if at all)."""
    block = next(code for lang, code in blocks() if lang == "python" and "IntervalJoin(" in code)
    if not late_arrival:
        assert ", late_arrival=60)" in block
        block = block.replace(", late_arrival=60)", ")")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block, str(PAGE), "exec"), namespace)
    return namespace["provider"]  # type: ignore[return-value]


async def clicks_of_a_user_who_stops_ordering(provider) -> tuple[list[tuple], Harness]:  # type: ignore[no-untyped-def]
    """Ann clicks and orders; Bob clicks twice and never orders; then ten minutes pass with
    nothing arriving. The rows handed off (user, click time, page, order total), sorted."""
    harness = Harness(provider, start=JOIN_T0)
    async with harness:
        await harness.publish("clicks/ann", {"t": JOIN_T0, "page": "/shoes"}, at=JOIN_T0 + 1)
        await harness.publish("clicks/bob", {"t": JOIN_T0 + 10, "page": "/hats"}, at=JOIN_T0 + 11)
        await harness.publish("clicks/bob", {"t": JOIN_T0 + 20, "page": "/socks"}, at=JOIN_T0 + 21)
        await harness.publish("orders/ann", {"t": JOIN_T0 + 30, "total": 80.0}, at=JOIN_T0 + 31)
        await harness.publish("clicks/ann", {"t": JOIN_T0 + 40, "page": "/"}, at=JOIN_T0 + 41)
        for _ in range(4):  # nothing arrives for 20 minutes; the worker ticks every 5 min
            await harness.advance(300)
        rows = sorted(
            (r["stream_id"], r["event_time"].timestamp() - JOIN_T0, r["left_page"], r["right_total"])
            for r in harness.handed_off("conversions")
        )
    return rows, harness


async def test_the_join_example_emits_every_click_of_a_user_who_stops_ordering(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    rows, _ = await clicks_of_a_user_who_stops_ordering(join_example(tmp_path, monkeypatch))
    assert rows == [
        ("clicks/ann", 0.0, "/shoes", 80.0),
        ("clicks/ann", 40.0, "/", None),  # its 10 minutes passed with no order
        ("clicks/bob", 10.0, "/hats", None),
        ("clicks/bob", 20.0, "/socks", None),
    ]
    assert not [r for r in caplog.records if "holds the merged watermark back" in r.getMessage()]
    assert not (tmp_path / "shop-store").exists()  # importing the app (the harness runs it) made no store


async def test_without_late_arrival_the_held_clicks_are_one_line_saying_what_to_do(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    rows, _ = await clicks_of_a_user_who_stops_ordering(join_example(tmp_path, monkeypatch, late_arrival=False))
    assert rows == []  # every click waits for an order that never comes
    bob = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("clicks/bob") and r.levelno >= logging.INFO
    ]
    assert bob == [  # one line for the user who stopped ordering, at the next step after 5 s
        "clicks/bob: input 'orders' holds the merged watermark back at -inf for 10 s "
        "(inputs: clicks=2023-11-14T22:13:35Z, orders=-inf); what it holds waits: set late_arrival= "
        "on the policy (a silent input then follows the clock), or advance_time on the input's stream"
    ]


def run_example(tmp_path: Path, marker: str) -> tuple[str, str]:
    """What the page's Python example containing ``marker`` prints, and what the page says."""
    found = blocks()
    i = next(i for i, (lang, code) in enumerate(found) if lang == "python" and marker in code)
    script = tmp_path / "example.py"
    script.write_text(found[i][1])
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout, found[i + 1][1]


def test_the_early_results_example_prints_what_the_page_shows(tmp_path):
    printed, shown = run_example(tmp_path, "emit=Every(events=2)")
    assert printed == shown


def test_the_exact_time_example_prints_what_the_page_shows(tmp_path):
    printed, shown = run_example(tmp_path, "Tumbling(0.1)")
    assert printed == shown
    assert "(0.3, 0.4, 1)" in printed and "0.30000000000000004" not in printed
