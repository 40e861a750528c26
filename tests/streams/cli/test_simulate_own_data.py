"""``headrace simulate`` on the user's own JSON lines or CSV."""

from __future__ import annotations

import json

from tests.streams.cli.helpers import headrace, one_error_line

READINGS = (
    '{"ts": 0, "sensor": "a", "temp": 20.5}\n'
    '{"ts": 30, "sensor": "b", "temp": 19.0}\n'
    '{"ts": 70, "sensor": "a", "temp": 21.0}\n'
    '{"ts": 50, "sensor": "a", "temp": 22.0}\n'  # 20 s below the newest time: out of order
    '{"ts": 130, "sensor": "b", "temp": 18.0}\n'
)


def _windows(stdout: str) -> list[tuple[object, ...]]:
    objects = [json.loads(line) for line in stdout.splitlines()]
    return [(o["key"], o["start"], o["count"], o["sum"]) for o in objects if o["type"] == "window"]


def test_json_lines_by_field_with_windows_summed_and_a_summary_line(tmp_path):
    (tmp_path / "readings.jsonl").write_text(READINGS)
    result = headrace(
        "simulate",
        "--timestamp-by", "ts", "--key-by", "sensor", "--value-by", "temp",
        "--window", "tumbling:1m", "--group-by-key", "--out-of-order", "5s", "--flush",
        "readings.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # in file order: the 50 arrives after the 70 (watermark 65) and is adjusted to 65; results
    # are final after 70 (a at 0), 40 (b at 30), 60 and 60 s (the 70 and the 50, at 130)
    assert _windows(result.stdout) == [
        ("a", 0, 1, 20.5),
        ("b", 0, 1, 19.0),
        ("a", 60, 2, 43.0),
        ("b", 120, 1, 18.0),
    ]
    assert result.stderr.splitlines()[-1] == (
        "headrace simulate: 5 events: 4 kept, 1 adjusted, 0 dropped, 0 dead-lettered; 4 windows; mean delay 57.500 s"
    )


def test_csv_with_an_arrival_column_and_a_plot_that_says_where_it_went(tmp_path):
    (tmp_path / "tolls.csv").write_text("arrived,time,booth,toll\n10,5,B1,2\n12,11,B1,3\n40,2,B1,4\n")
    result = headrace(
        "simulate", "--timestamp-by", "time", "--arrival-by", "arrived", "--value-by", "toll",
        "--late-arrival", "30s", "--action", "drop", "--window", "tumbling:20s", "--flush", "--plot", "tolls.png",
        "tolls.csv",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _windows(result.stdout) == [(None, 0, 2, 5.0)]  # the third arrived 38 s late: dropped
    assert result.stderr.splitlines() == [
        "headrace simulate: 3 events: 2 kept, 0 adjusted, 1 dropped, 0 dead-lettered; 1 windows; mean delay -",
        f"headrace simulate: plot written to {tmp_path / 'tolls.png'}",
    ]
    assert (tmp_path / "tolls.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mistakes_in_the_user_s_data_are_one_line(tmp_path):
    (tmp_path / "back.csv").write_text("arrived,time\n10,5\n9,6\n")
    args = ("simulate", "--timestamp-by", "time", "--arrival-by", "arrived", "back.csv")
    assert one_error_line(headrace(*args, cwd=tmp_path), "simulate") == (
        "back.csv, line 3: arrival 'arrived' goes backwards (arrival times never decrease)"
    )
    (tmp_path / "r.jsonl").write_text('{"ts": 1}\n{"t": 2}\n')
    assert one_error_line(headrace("simulate", "--timestamp-by", "ts", "r.jsonl", cwd=tmp_path), "simulate") == (
        "r.jsonl, line 2: no field 'ts' (--timestamp-by)"
    )
    assert one_error_line(headrace("simulate", "--value-by", "v", "r.jsonl", cwd=tmp_path), "simulate") == (
        "--arrival-by, --key-by and --value-by read your own data: give --timestamp-by FIELD too"
    )
