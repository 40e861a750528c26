"""``headrace simulate`` through the real entry point, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.streams.eventtime.helpers import DATA

HEADRACE = Path(sys.executable).with_name("headrace")  # the installed console script


def simulate(*args: str, script: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(HEADRACE)] if script else [sys.executable, "-m", "streams.cli"]
    return subprocess.run([*command, "simulate", *map(str, args)], capture_output=True, text=True, timeout=120)


def lines(result: subprocess.CompletedProcess[str]) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def write(tmp_path: Path, text: str, name: str = "sample.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_asa_policy_table_through_the_console_script():
    out = lines(
        simulate("--out-of-order", "5s", "--late-arrival", "15s", DATA / "asa_ordering_policy.csv", script=True)
    )
    events = [o for o in out if o["type"] == "event"]
    assert [e["timestamp"][11:19] for e in events] == [
        "00:10:25",
        "00:10:30",
        "00:10:42",
        "00:10:38",
        "00:10:37",
    ]
    assert events[0] == {
        "type": "event",
        "index": 0,
        "key": None,
        "event_time": "2024-05-01T00:10:00Z",
        "arrival_time": "2024-05-01T00:10:40Z",
        "timestamp": "2024-05-01T00:10:25Z",
        "status": "adjusted",
        "reason": "late_arrival",
    }
    marks = [o for o in out if o["type"] == "watermark"]
    assert marks[0] == {
        "type": "watermark",
        "arrival_time": "2024-05-01T00:10:40Z",
        "substream": None,
        "watermark": "2024-05-01T00:10:25Z",
    }


def test_idle_timeout_table_ticks_count_in_the_index():
    out = lines(simulate("--window", "tumbling:3m", "--idle-timeout", "1m", DATA / "atlas_idle_timeout.csv"))
    assert [o["index"] for o in out if o["type"] == "event"] == [0, 4, 5, 9]
    assert [
        (w["start"][11:16], w["events"], w["closed_at"][11:16], w["final"]) for w in out if w["type"] == "window"
    ] == [
        ("12:00", [0, 4], "12:05", False),
        ("12:03", [5], "12:07", False),
    ]


def test_numbers_in_numbers_out_keys_substreams_and_flush(tmp_path):
    sample = write(tmp_path, "arrival_time,event_time,key,value\n0,0,a,1\n1,1,b,2\n2,11,a,3\n3,,,\n4,2,b,4\n")
    out = lines(simulate("--substreams", "--window", "tumbling:10", "--action", "accept", "--flush", sample))
    windows = [o for o in out if o["type"] == "window"]
    assert windows == [
        {
            "type": "window",
            "key": "a",
            "start": 0,
            "end": 10,
            "count": 1,
            "events": [0],
            "closed_at": 2,
            "final": False,
        },
        {
            "type": "window",
            "key": "b",
            "start": 0,
            "end": 10,
            "count": 2,
            "events": [1, 4],
            "closed_at": None,
            "final": True,
        },
        {
            "type": "window",
            "key": "a",
            "start": 10,
            "end": 20,
            "count": 1,
            "events": [2],
            "closed_at": None,
            "final": True,
        },
    ]
    assert {o["substream"] for o in out if o["type"] == "watermark"} == {"a", "b"}


def test_drop_reports_reasons_and_hopping_windows(tmp_path):
    sample = write(tmp_path, "arrival_time,event_time\n0,0\n0.5,7.5\n1,0.25\n")
    out = lines(simulate("--action", "drop", "--window", "hopping:5:2500ms", "--flush", sample))
    assert [(o["status"], o["reason"]) for o in out if o["type"] == "event"] == [
        ("kept", None),
        ("kept", None),
        ("dropped", "out_of_order"),
    ]
    assert [(w["start"], w["end"], w["events"]) for w in out if w["type"] == "window"] == [
        (-2.5, 2.5, [0]),
        (0, 5, [0]),
        (5, 10, [1]),
        (7.5, 12.5, [1]),
    ]


def test_plot_writes_a_png_and_still_prints_the_lines(tmp_path):
    png = tmp_path / "asa.png"
    result = simulate(
        "--early-arrival",
        "5m",
        "--late-arrival",
        "5m",
        "--out-of-order",
        "2m",
        "--window",
        "tumbling:5m",
        "--group-by-key",
        "--flush",
        "--plot",
        png,
        DATA / "asa_watermarks.csv",
    )
    assert len(lines(result)) > 12
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_sweep_prints_a_table_per_value():
    result = simulate("--sweep", "out_of_order=0s,1m,2m", "--late-arrival", "5m", DATA / "asa_watermarks.csv")
    assert result.returncode == 0, result.stderr
    table = [line.split() for line in result.stdout.splitlines()]
    assert table[0] == [
        "out_of_order",
        "events",
        "adjusted",
        "dropped",
        "dead_lettered",
        "windows",
        "mean_delay_s",
    ]
    assert [(row[0], row[2], row[3], row[4]) for row in table[1:]] == [
        ("0s", "6", "0", "0"),
        ("1m", "5", "0", "0"),
        ("2m", "4", "0", "0"),
    ]
    delays = [float(row[6]) for row in table[1:]]
    assert delays == sorted(delays)  # more tolerance, later results


@pytest.mark.parametrize(
    ("args", "csv_text", "message"),
    [
        (
            [],
            "arrival_time,event_time\n1,2\nx,3\n",
            "line 3 (row 1), arrival_time: 'x' is neither a number of seconds nor an ISO-8601 time",
        ),
        ([], "arrival_time,event_time,device\n1,2,a\n", "unknown column 'device'"),
        (
            [],
            "arrival_time,event_time\n1,2\n2024-05-01T00:00:00Z,3\n",
            "breaks the form of the earlier times",
        ),
        ([], "arrival_time,event_time\n5,2\n4,3\n", "line 3 (row 1): arrival_time 4 goes backwards"),
        ([], "arrival_time,event_time\n1,2,3\n", "line 2 (row 0): 3 fields for 2 columns"),
        ([], "event_time\n1\n", "the header has no arrival_time column"),
        ([], "", "is empty"),
        (
            ["--out-of-order=-5s"],
            "arrival_time,event_time\n",
            "--out-of-order: a duration cannot be negative: '-5s'",
        ),
        (
            ["--late-arrival", "-5s"],
            "arrival_time,event_time\n",
            "--late-arrival: expected one argument (a duration",
        ),
        (["--late-arrival", "soon"], "arrival_time,event_time\n", "--late-arrival: 'soon' is not a duration"),
        (
            ["--window", "rolling:5"],
            "arrival_time,event_time\n",
            "--window takes tumbling:SIZE, hopping:SIZE:HOP, session:GAP or sliding:SPAN",
        ),
        (["--window", "tumbling:0s"], "arrival_time,event_time\n", "must be more than 0"),
        (
            ["--action", "ignore"],
            "arrival_time,event_time\n",
            "--action takes adjust, drop or accept, not 'ignore'",
        ),
        (
            ["--idle-timeout", "1m"],
            "arrival_time,event_time\n",
            "--allowed-lateness and --idle-timeout need --window",
        ),
        (["--sweep", "delay=1s"], "arrival_time,event_time\n", "--sweep takes NAME=V1,V2,…"),
        (["--plot", "out.jpg"], "arrival_time,event_time\n", "--plot takes a .png file name"),
    ],
)
def test_mistakes_get_one_line_and_exit_2(tmp_path, args, csv_text, message):
    result = simulate(*args, write(tmp_path, csv_text))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("headrace simulate: error: ")
    assert message in line
    assert result.stdout == ""


def test_an_option_without_its_value_is_one_line(tmp_path):
    result = simulate(write(tmp_path, "arrival_time,event_time\n"), "--window")
    assert (result.returncode, result.stderr.splitlines()) == (
        2,
        ["headrace simulate: error: argument --window: expected one argument (see --help)"],
    )


def test_a_missing_file_is_named(tmp_path):
    result = simulate(tmp_path / "nope.csv")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"headrace simulate: error: cannot read {tmp_path / 'nope.csv'}: No such file or directory"
    ]


def test_dedup_drops_a_retried_value_within_the_horizon_and_says_so(tmp_path):
    sample = write(
        tmp_path,
        "arrival_time,event_time,key,value\n1,1,a,p1\n2,2,a,p2\n3,1,a,p1\n30,30,a,x\n31,2,b,p2\n40,40,a,p1\n",
    )
    result = simulate("--out-of-order", "60s", "--dedup-within", "30s", "--window", "tumbling:100s", "--flush", sample)
    out = lines(result)
    events = {o["index"]: (o["status"], o["reason"]) for o in out if o["type"] == "event"}
    # W = -inf until t=40 passes the delay: p1 at 40 is still within 1 + 30 > W = -20.
    assert events == {
        0: ("kept", None),
        1: ("kept", None),
        2: ("dropped", "duplicate"),
        3: ("kept", None),
        4: ("dropped", "duplicate"),
        5: ("dropped", "duplicate"),
    }
    (window,) = [o for o in out if o["type"] == "window"]
    assert window["events"] == [0, 1, 3]
    assert "3 dropped (3 duplicate)" in result.stderr
    assert "--dedup-within" in simulate("--help").stdout
    bad = simulate("--dedup-within", "0s", sample)
    assert bad.returncode != 0 and "--dedup-within takes a duration > 0" in bad.stderr


def test_a_window_of_events_from_the_command_line(tmp_path):
    sample = write(tmp_path, "arrival_time,event_time,key,value\n1,1,a,\n2,5,a,\n3,2,a,\n4,9,a,\n5,8,a,\n")
    out = lines(simulate("--out-of-order", "10s", "--window", "tumbling:2ev", "--flush", sample))
    windows = [(w["start"], w["end"], w["events"], w["closed_at"], w["final"]) for w in out if w["type"] == "window"]
    assert windows == [(1, 5, [0, 1], 2, False), (2, 9, [2, 3], 4, False), (8, 8, [4], None, True)]
    bad = simulate("--window", "tumbling:2ev", "--allowed-lateness", "5s", sample)
    assert bad.returncode != 0 and "allowed_lateness and idle_timeout apply to windows of time" in bad.stderr
