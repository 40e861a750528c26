"""The status page in a real browser: headless Chromium opens the page a running worker serves
and reads it as a person would. The worker has a finished backlog (its numbers hold still),
a stalled consumer, a dead letter and a Spark handoff stream; the page's numbers must be those of
``headrace status --json`` (and ``--advise --json``, ``dlq list --json``) at the same moment,
the stalled queue must show as behind, the dead letter with the command that replays it,
nothing may reach the browser's console as an error, and the screenshot must show a page.
One browser session for the suite."""

from __future__ import annotations

import io
import json
import math
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.browser import Browser, chromium_missing
from tests.streams.cli.helpers import clean_env, headrace, json_of, poll_status, start_worker
from tests.streams.cli.test_status import CONFIG as STATUS_CONFIG
from tests.streams.runtime.helpers import free_port


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """The suite installs it (.ci/run); a machine without it fails here, saying so."""
    missing = chromium_missing()
    if missing is not None:
        pytest.fail(f"the status page's browser test needs Chromium: {missing}")


# test_status's store and policy, with this test's application, a status every second and
# every event's lateness sampled (for the quantiles and the advice)
CONFIG = STATUS_CONFIG.replace("status_app", "page_app").replace('"200ms"', '"1s"') + (
    '\n[agent]\nshutdown_timeout = "1s"\nlateness_sample_every = 1\n'
)

READ_CELLS = "Object.fromEntries([...document.querySelectorAll('[data-k]')].map(e => [e.dataset.k, e.dataset.v]))"
TYPE = "tests.streams.cli.status_app.InTimestampOrder"
UPDATES = "tests.streams.cli.page_app.Updates"
FATES = (
    *("active", "parked", "events_out", "events", "windows_emitted", "early_results", "joins_emitted"),
    *("adjusted", "dropped", "dead_lettered"),
)
T0 = 1_700_000_000.0  # the origin of page_app's windows


def expected_cells(status: dict[str, Any], advice: dict[str, Any]) -> dict[str, object]:
    """What the page's cells must hold (their ``data-k`` and raw value), from the CLI's JSON."""
    cells: dict[str, object] = {}
    for w in status["workers"]:
        cells[f"w.{w['name']}.state"] = w["state"]
        cells[f"w.{w['name']}.queues"] = w["queues"]
    agents = [q["agent"] for q in status["queues"] if q["agent"]] + status["agents"]
    for q in status["queues"]:
        k, a = f"q{q['queue']}", q["agent"] or {}
        for name in ("checkpoint", "checkpoint_lag", "lag_events"):
            cells[f"{k}.{name}"] = q[name]
        names = ("events_in_per_s", "events_out_per_s", "read_messages", "cache_size", "under_pressure")
        for name in (*names, "checkpoint_holder"):
            cells[f"{k}.{name}"] = a.get(name)
        if q["agent"]:
            for name in ("watermark_min", "watermark_delay", "held_by"):
                cells[f"{k}.{name}"] = a[name]
            for lag in a["slowest"]:
                cells[f"{k}.behind.{lag['stream']}"] = lag["behind"]
            for name, mark in a["input_watermarks"].items():
                cells[f"i{q['queue']}.{name}.watermark"] = mark
    totals: dict[str, dict[str, int]] = {}
    for a in agents:
        for name, fates in a["fates"].items():
            for fate, n in fates.items():
                totals.setdefault(name, {})[fate] = totals.get(name, {}).get(fate, 0) + n
        for name, seen in a["observed"].items():
            for which in ("lateness", "disorder"):
                for p, v in seen["quantiles"][which].items():
                    cells[f"o{a['queue']}.{name}.{which}.{p}"] = v
    for name, t in totals.items():
        for fate in FATES:
            cells[f"t.{name}.{fate}"] = t.get(fate, 0)
    for d in status["dead_letters"]:
        cells[f"dl.{d['reason']}.count"] = d["count"]
        cells[f"dl.{d['reason']}.replayed"] = d["replayed"]
    for h in status["handoff"]:
        cells[f"h.{h['stream']}.appended"] = sum(h["end_offsets"].values())
        for name in ("committed_offsets", "behind", "committed_at"):
            cells[f"h.{h['stream']}.{name.removesuffix('_offsets')}"] = h[name]
        cells[f"h.{h['stream']}.retained"] = h["retained"]
    for name, a in advice.items():
        settings = [("in force", a["current"])] + [(f"keeps {k}", v) for k, v in a.items() if k.endswith("%")]
        for label, setting in settings:
            cells[f"a.{name}.{label}.out_of_order"] = setting["out_of_order"]
            cells[f"a.{name}.{label}.late_arrival"] = setting["late_arrival"]
    return cells


def same(page: str | None, expected: object) -> bool:
    """A cell's raw text (as the page's script wrote it) against the CLI's value."""
    if page is None:
        return False
    if expected is None:
        return page == ""
    if isinstance(expected, bool):
        return page == str(expected).lower()
    if isinstance(expected, int | float):
        return page != "" and math.isclose(float(page), float(expected), rel_tol=0, abs_tol=1e-9)
    if isinstance(expected, list | dict):
        return page == json.dumps(expected, separators=(",", ":"))
    return page == str(expected)


def cli_now(cwd: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``headrace status --json`` and ``--advise --json``, now."""
    return json_of(headrace("status", "--json", cwd=cwd)), json_of(headrace("status", "--advise", "--json", cwd=cwd))


def produce_backlog(cwd: Path) -> None:
    """Readings in event time (one out of order: dropped, a dead letter), a window's updates,
    five events handed off to Spark, and last, one record of the stuck stream (one record
    behind, whatever queue it shares)."""
    t0 = int(time.time()) - 20
    lines = "".join(f'{{"n": {d}, "ts": {t0 + d}}}\n' for d in (1, 2, 0, 3))  # the third: out of order, dropped
    # [0, 10) of updates/u1: five events, an update after the 2nd and the 4th; 11 closes it
    updates = "".join(f'{{"ts": {T0 + t}}}\n' for t in (1, 2, 3, 4, 5, 11))
    handed = "".join(f'{{"n": {n}, "ts": {T0 + n}}}\n' for n in range(5))  # in order: each handed off at once
    for stream, text, extra in (
        ("readings/r1", lines, ["--event-time", "ts"]),
        ("updates/u1", updates, ["--event-time", "ts"]),
        ("handed/h1", handed, ["--event-time", "ts"]),
        ("stuck/s1", '{"x": 1}\n', []),
    ):
        produced = headrace("produce", "--stream", stream, *extra, "--batch-size", "1", cwd=cwd, stdin=text)
        assert produced.returncode == 0, produced.stderr


def settled(s: dict[str, Any]) -> bool:
    """The backlog done, the stuck consumer behind, rates at 0."""
    agents = [q["agent"] for q in s["queues"]]
    return (
        all(a and a["events_in_per_s"] == 0.0 and a["events_out_per_s"] == 0.0 for a in agents)
        and any(a and a["slowest"] for a in agents)
        and any(a and a["watermark_min"] for a in agents)
        and bool(s["dead_letters"])
        and any(t["consumer_type"] == UPDATES and t["events"] == 6 for t in s["consumer_types"])
        and [sum(h["end_offsets"].values()) for h in s["handoff"]] == [5]
    )


def page_and_cli(browser: Browser, cwd: Path) -> tuple[dict[str, str], float, dict[str, Any], dict[str, object]]:
    """The page's cells and its status' taken_at, the CLI's status and the cells expected from
    it, at the same moment: the CLI, a poll of the page that read the status after it (its
    taken_at is later), the CLI again; the numbers held still meanwhile when both CLI reads agree."""
    moved = []
    for _ in range(10):
        before, advice_before = cli_now(cwd)
        browser.wait_for(f"Number(document.body.dataset.takenAt) > {before['taken_at']!r}", timeout=30)
        cells, page_taken_at = browser.evaluate(f"[{READ_CELLS}, Number(document.body.dataset.takenAt)]")
        after, advice_after = cli_now(cwd)
        expected, earlier = expected_cells(after, advice_after), expected_cells(before, advice_before)
        if earlier == expected:
            return cells, page_taken_at, after, expected
        moved.append({k: (earlier.get(k), v) for k, v in expected.items() if earlier.get(k) != v})
    pytest.fail(f"the status never held still around a poll of the page: {moved}")


def dead_letter_and_its_replay(browser: Browser, cells: dict[str, str], cwd: Path) -> None:
    """The dead letter on the page, and its replay shown on a later poll."""
    # The dead letter, listed with its stream, position and the command that replays it.
    [letter] = [json.loads(line) for line in headrace("dlq", "list", "--json", cwd=cwd).stdout.splitlines()]
    assert (cells[f"l.{letter['id']}.reason"], cells[f"l.{letter['id']}.stream"]) == (
        "out_of_order",
        "readings/r1",
    )
    text = browser.evaluate("document.getElementById('letters').innerText")
    command = f"headrace dlq replay --path {cwd / 'store'} {letter['id']}"
    assert command in text and f"queue {letter['queue']} seq {letter['sequence_number']}" in text

    # Live: the command run, the page shows the replay on a later poll, without a reload.
    replayed = headrace(*command.split()[1:], cwd=cwd)
    assert replayed.returncode == 0, replayed.stderr
    browser.wait_for("document.querySelector('[data-k=\"dl.out_of_order.replayed\"]').dataset.v === '1'")
    assert browser.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_the_page_of_a_running_worker_in_chromium(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    produce_backlog(tmp_path)
    port = free_port()
    worker = start_worker(tmp_path, "--metrics-port", port, env=clean_env())
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "headrace worker w1: running, reading queues [0, 1] of 2\n"

        status = poll_status(tmp_path, settled, timeout=60)
        assert settled(status), (status, (tmp_path / "worker.log").read_text())
        [stuck] = [q["queue"] for q in status["queues"] if q["agent"]["slowest"]]

        with Browser() as browser:
            browser.open(f"http://127.0.0.1:{port}/")
            browser.wait_for(
                "Number(document.body.dataset.polls || 0) >= 1 && !!document.querySelector('[data-k^=\"l.\"]')"
            )
            # dead letters by reason over the last hour, as the worker kept them (not only since the page opened)
            plotted = browser.wait_for(
                "document.querySelector('#letters-plot polyline') && document.getElementById('letters-plot').innerText"
            )
            assert "by reason, last hour" in plotted and "out_of_order" in plotted
            cells, page_taken_at, after, expected = page_and_cli(browser, tmp_path)
            wrong = {k: (cells.get(k), v) for k, v in expected.items() if not same(cells.get(k), v)}
            assert wrong == {}
            assert (
                len(expected) >= 30
                and any(k.startswith("o") for k in expected)
                and any(k.startswith("a.") for k in expected)
            )
            # Lag in seconds grows with the clock: the page's and the CLI's are the age of the same
            # oldest record, each at its own reading (0 where no record is behind).
            for q in after["queues"]:
                shown = float(cells[f"q{q['queue']}.lag_seconds"])
                if q["checkpoint_lag"]:
                    assert math.isclose(shown - page_taken_at, q["lag_seconds"] - after["taken_at"], abs_tol=1e-3)
                else:
                    assert shown == q["lag_seconds"] == 0
            assert after["queues"][stuck]["lag_seconds"] > 0

            # The stalled consumer: its queue shows as behind, the consumer holding its checkpoint named.
            assert cells[f"q{stuck}.state"] == "stalled" and cells[f"q{1 - stuck}.state"] == "ok"
            assert cells[f"q{stuck}.behind.stuck/s1"] == "1"
            holder = json.loads(cells[f"q{stuck}.checkpoint_holder"])
            assert (holder["stream"], holder["subscription"], holder["why"]) == (
                "stuck/s1",
                "implicit:tests.streams.cli.rates_app.Stuck",
                "behind",
            )
            shown = browser.evaluate(f"document.querySelector('[data-k=\"q{stuck}.checkpoint_holder\"]').innerText")
            assert shown == f"implicit:tests.streams.cli.rates_app.Stuck on stuck/s1 at {holder['sequence']}: behind"
            row = browser.evaluate(f"document.querySelector('[data-k=\"q{stuck}.state\"]').parentElement.className")
            assert row == "behind"
            assert cells[f"t.{TYPE}.active"] == "1" and cells[f"t.{TYPE}.dropped"] == "1"
            # events delivered per type: the four readings, none yet to the plain stuck consumer
            assert (cells[f"t.{TYPE}.events_out"], cells["t.tests.streams.cli.rates_app.Stuck.events_out"]) == (
                "4",
                "0",
            )
            # What a consumer type emitted: the window's final result and the two updates before it.
            assert (cells[f"t.{UPDATES}.windows_emitted"], cells[f"t.{UPDATES}.early_results"]) == ("1", "2")

            # the Spark handoff stream: five rows appended, none committed by a Spark query yet
            handed = [cells[f"h.page_handoff.{k}"] for k in ("appended", "committed", "behind", "retained")]
            assert handed == ["5", "", "", "5"]

            dead_letter_and_its_replay(browser, cells, tmp_path)

            png = browser.screenshot()
            assert browser.errors() == []
            assert browser.evaluate("document.body.dataset.errors || ''") == ""
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.width >= 1000 and image.height >= 800
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, badges and plots, not one flat colour
