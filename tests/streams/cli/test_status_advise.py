"""``headrace status`` shows the lateness and disorder a live worker observed, and
``status --advise`` the tolerances they call for, checked against a brute-force computation
over the same events (read back by ``headrace export``)."""

from __future__ import annotations

import csv
import json
import math
import signal
import time
from typing import Any

from streams.eventtime.lateness import LARGEST, RELATIVE_ERROR, SMALLEST
from tests.streams.cli.helpers import clean_env, headrace, one_error_line, poll_status, start_worker

CONFIG = """
[provider]
path = "store"
queues = 2

[agent]
lateness_sample_every = 1

[balancer]
lease_length = "4s"
renew_period = "1s"
refresh_period = "500ms"

[time]
out_of_order = "2s"

[worker]
app = "tests.streams.cli.status_app:provider"
name = "w1"
status_interval = "200ms"
"""

TYPE = "tests.streams.cli.status_app.InTimestampOrder"
GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)


def _exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def _covers(advised: float, truth: float) -> bool:
    """The advice is the exact quantile's bucket's upper bound: at or above it, within a bucket."""
    truth = max(truth, 0.0)
    return truth - 1e-9 <= advised <= truth * GAMMA + SMALLEST


def test_status_shows_observed_times_and_advice_matches_brute_force(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    assert one_error_line(headrace("status", "--advise", cwd=tmp_path), "status").startswith(
        "no headrace store at"
    )  # no store yet
    t0 = int(time.time()) - 300
    # Two streams (each its own watermark); every seventh event 3-9 s below the newest.
    for key in ("r1", "r2"):
        times = [t0 + i - (3 + i % 7 if i % 7 == 6 else 0) for i in range(60)]
        lines = "".join(json.dumps({"n": i, "ts": t}) + "\n" for i, t in enumerate(times))
        produced = headrace(
            "produce",
            "--stream",
            f"readings/{key}",
            "--event-time",
            "ts",
            "--batch-size",
            "5",
            cwd=tmp_path,
            stdin=lines,
        )
        assert produced.returncode == 0, produced.stderr

    worker = start_worker(tmp_path, env=clean_env())
    try:

        def settled(s: dict[str, Any]) -> bool:
            seen = [a["observed"].get(TYPE, {}).get("samples", 0) for a in _agents(s)]
            return sum(seen) == 120

        status = poll_status(tmp_path, settled)
        assert settled(status), status
        [from_json] = [a["observed"][TYPE] for a in _agents(status) if TYPE in a["observed"]]
        assert set(from_json["quantiles"]) == {"lateness", "disorder"}
        assert set(from_json["quantiles"]["lateness"]) == {"p50", "p99", "p99.9"}
        table = headrace("status", cwd=tmp_path).stdout
        assert "lateness and disorder, last hour (1 event in 1 sampled)" in table
        observed = table.split("lateness and disorder, last hour")[1]
        [row] = [line.split() for line in observed.splitlines() if TYPE in line]
        # queue, type, sampled, lateness p50 p99 p99.9, disorder p50 p99 p99.9 (each "N unit"), substreams
        assert row[1:3] == [TYPE, "120"] and len(row) == 3 + 6 * 2 + 1 and row[-1] == "-"
        advised = headrace("status", "--advise", "--json", cwd=tmp_path)
        assert advised.returncode == 0, advised.stderr
        advice = json.loads(advised.stdout)[TYPE]
        text = headrace("status", "--advise", cwd=tmp_path).stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()

    # The same events, with the arrival times the queue gave them, brute force.
    exported = headrace("export", "--stream", "readings", "--since", "1h", "sample.csv", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    with (tmp_path / "sample.csv").open(newline="") as f:
        rows = [(float(r["arrival_time"]), float(r["event_time"]), r["key"]) for r in csv.DictReader(f)]
    assert len(rows) == 120
    newest: dict[str, float] = {}
    lateness, disorder = [], []
    for arrival, t, key in rows:  # each stream in arrival order: its own lane
        lateness.append(arrival - t)
        disorder.append(max(0.0, newest.get(key, -math.inf) - t))
        newest[key] = max(newest.get(key, -math.inf), t)

    assert advice["sampled"] == 120 and advice["every"] == 1
    for share, name in ((0.99, "99%"), (0.999, "99.9%")):
        setting = advice[name]
        assert _covers(setting["out_of_order"], _exact(disorder, share)), (name, setting, sorted(disorder)[-3:])
        assert _covers(setting["late_arrival"], _exact(lateness, share))
        median = _exact(lateness, 0.5)
        expected_delay = min(setting["out_of_order"] + median, setting["late_arrival"])
        assert abs(setting["finalization_delay"] - expected_delay) <= RELATIVE_ERROR * expected_delay + 2 * SMALLEST
        assert setting["within_out_of_order"] >= share and setting["within_late_arrival"] >= share
    for which, values in (("lateness", lateness), ("disorder", disorder)):
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            truth = _exact(values, q)
            assert abs(advice[which][label] - truth) <= RELATIVE_ERROR * truth + SMALLEST
            assert from_json["quantiles"][which][label] == advice[which][label]  # status --json: the same
    # What the policy in force (out_of_order 2 s, adjust) did: every event more than 2 s below
    # its stream's newest was adjusted, nothing dropped.
    current = advice["current"]
    assert (current["out_of_order"], current["late_arrival"]) == (2.0, None)
    assert (current["events"], current["adjusted"], current["dropped"]) == (120, sum(d > 2 for d in disorder), 0)
    assert current["adjusted"] > 0
    assert f"{TYPE}: tolerances from 120 sampled events of the last hour (1 in 1)" in text
    assert "in force" in text and "keeps 99%" in text and "keeps 99.9%" in text
    assert f"{current['adjusted']} of 120" in text
    # 120 samples say little of the tails: the advice says so, in the table and the JSON
    warning = (
        "only 120 sampled events, too few for the tails (keeps 99% about 1,000, keeps 99.9% about 10,000 "
        "needed): these settings are guesses; wait for more events"
    )
    assert f"\nwarning: {warning}\n" in text and advice["warning"] == warning


def _agents(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [q["agent"] for q in status["queues"] if q["agent"]] + status["agents"]


def test_advise_with_nothing_observed_is_one_line(tmp_path):
    produced = headrace("produce", "--path", "store", "--create", "--stream", "a/b", cwd=tmp_path, stdin="1\n")
    assert produced.returncode == 0, produced.stderr
    error = one_error_line(headrace("status", "--path", "store", "--advise", cwd=tmp_path), "status")
    assert error.startswith("nothing to advise from: no running worker has reported")


def _advice(sampled: int, every: int) -> Any:
    from streams.cli.advice import ConsumerTypeFates, Setting, TypeAdvice

    setting = Setting(0.001, None, 0.5, 0.99, math.nan)
    return TypeAdvice(
        "app.Sessions",
        sampled,
        every,
        {},
        {},
        setting,
        ConsumerTypeFates("app.Sessions", 0, 0, 0, 0),
        {"99%": setting, "99.9%": setting},
    )


def test_few_samples_are_a_warning_that_says_how_many_and_what_to_do():
    # The case: 15 sampled events at the default 1 in 256
    assert _advice(15, 256).warning == (
        "only 15 sampled events, too few for the tails (keeps 99% about 1,000, keeps 99.9% about 10,000 needed): "
        "these settings are guesses; sample more with [agent] lateness_sample_every = 1 (now 1 in 256), "
        "or wait for more events"
    )
    assert "keeps 99.9% about 10,000" in _advice(5_000, 1).warning and "keeps 99% " not in _advice(5_000, 1).warning
    assert _advice(10_000, 1).warning is None and _advice(10_000, 1).as_dict()["warning"] is None


def test_lateness_beyond_the_sketch_shows_as_a_bound_not_a_measurement(tmp_path):
    """Events three years late are beyond the sketch's largest bucket (LARGEST): the table
    says "over", the JSON keeps the cap as a number."""
    (tmp_path / "headrace.toml").write_text(CONFIG)
    t0 = int(time.time()) - 3 * 365 * 86400
    lines = "".join(json.dumps({"n": i, "ts": t0 + i}) + "\n" for i in range(20))
    produced = headrace("produce", "--stream", "readings/old", "--event-time", "ts", cwd=tmp_path, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    worker = start_worker(tmp_path, env=clean_env())
    try:
        status = poll_status(
            tmp_path, lambda s: sum(a["observed"].get(TYPE, {}).get("samples", 0) for a in _agents(s)) == 20
        )
        [seen] = [a["observed"][TYPE] for a in _agents(status) if TYPE in a["observed"]]
        table = headrace("status", cwd=tmp_path).stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert seen["samples"] == 20 and seen["quantiles"]["lateness"] == {"p50": LARGEST, "p99": LARGEST, "p99.9": LARGEST}
    [row] = [line for line in table.split("lateness and disorder, last hour")[1].splitlines() if TYPE in line]
    assert row.count("over 1,000,000 s") == 3, row  # lateness p50, p99, p99.9
    assert row.count(" 1,000,000 s") == 3, row  # none without its "over"
