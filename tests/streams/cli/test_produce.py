"""``headrace produce``: JSON lines and CSV into a real embedded store, and its mistakes."""

from __future__ import annotations

import pytest

from streams.cli.produce import BadLine, parse_records
from tests.streams.cli.helpers import headrace, one_error_line, published


def test_json_lines_from_a_file_in_batches_with_event_times(tmp_path):
    (tmp_path / "in.jsonl").write_text(
        '{"n": 1, "ts": "2024-05-01T12:07:00Z"}\n'
        '{"n": 2, "ts": 1714565230.5}\n'
        "\n"
        '{"n": 3, "ts": "2024-05-01T14:07:10+02:00"}\n'
        '{"n": 4, "ts": "1714565240"}\n'
        '{"n": 5, "ts": "2024-05-01T12:07:25"}\n'
    )
    result = headrace(
        "produce",
        "--path",
        "store",
        "--create",
        "--stream",
        "sensors/s-1",
        "--event-time",
        "ts",
        "--batch-size",
        "2",
        "in.jsonl",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("headrace produce: published 5 events to sensors/s-1 in 3 batches (")
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    batches = published(tmp_path / "store")
    assert [stream for stream, _, _ in batches] == ["sensors/s-1"] * 3
    assert [[v["n"] for v in values] for _, values, _ in batches] == [[1, 2], [3, 4], [5]]
    assert [t for _, _, times in batches for t in times] == [
        1714565220.0,
        1714565230.5,
        1714565230.0,
        1714565240.0,
        1714565245.0,
    ]


def test_csv_rows_from_stdin_with_numbers_detected_or_kept_as_strings(tmp_path):
    csv_text = 'booth,toll,note\nB1,4.5,\nB2,7,late\n\nB3,-1e2,"a, b"\n'
    result = headrace(
        "produce",
        "--path",
        "store",
        "--create",
        "--stream",
        "tolls/t",
        "--format",
        "csv",
        "-",
        cwd=tmp_path,
        stdin=csv_text,
    )
    assert result.returncode == 0, result.stderr
    assert "published 3 events to tolls/t in 1 batch (" in result.stdout
    result = headrace(
        "produce",
        "--path",
        "store",
        "--stream",
        "tolls/t",
        "--format",
        "csv",
        "--strings",
        cwd=tmp_path,
        stdin=csv_text,
    )
    assert result.returncode == 0, result.stderr
    [(_, typed, no_times), (_, strings, _)] = published(tmp_path / "store")
    assert typed == [
        {"booth": "B1", "toll": 4.5, "note": None},
        {"booth": "B2", "toll": 7, "note": "late"},
        {"booth": "B3", "toll": -100.0, "note": "a, b"},
    ]
    assert no_times is None  # without --event-time an event's time is its arrival time
    assert strings[0] == {"booth": "B1", "toll": "4.5", "note": ""}


def test_a_bad_line_stops_after_publishing_everything_before_it(tmp_path):
    lines = "".join(f'{{"n": {i}}}\n' for i in range(5)) + '{"n": 5,\n' + '{"n": 6}\n'
    (tmp_path / "in.jsonl").write_text(lines)
    result = headrace(
        "produce", "--path", "store", "--create", "--stream", "a/b", "--batch-size", "2", "in.jsonl", cwd=tmp_path
    )
    assert one_error_line(result, "produce") == (
        "in.jsonl, line 6: not valid JSON: Expecting property name enclosed in double quotes (column 9); "
        "published 5 events from the lines before it, nothing from this line on"
    )
    assert [v["n"] for _, values, _ in published(tmp_path / "store") for v in values] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--stream", "nokey"], "a stream id reads 'namespace/key', not 'nokey'"),
        (
            ["--stream", "a/b", "--format", "xml"],
            "argument --format: invalid choice: 'xml' (choose from jsonl, csv) (see --help)",
        ),
        (["--stream", "a/b", "missing.jsonl"], "cannot read missing.jsonl: No such file or directory"),
    ],
)
def test_mistakes_are_one_line(tmp_path, args, error):
    result = headrace("produce", "--path", "store", *args, cwd=tmp_path, stdin="")
    assert one_error_line(result, "produce").replace("'jsonl', 'csv'", "jsonl, csv") == error
    assert not (tmp_path / "store").exists()  # a mistake makes no store


@pytest.mark.parametrize(
    ("fmt", "text", "line", "problem"),
    [
        ("jsonl", '{"ts": 1}\n{"t": 2}\n', 2, "no event time: field 'ts' is missing or empty"),
        (
            "jsonl",
            '{"ts": "yesterday"}\n',
            1,
            "field 'ts': 'yesterday' is neither a number of seconds nor an ISO-8601 time",
        ),
        ("jsonl", '{"ts": true}\n', 1, "field 'ts' is not a time (seconds or ISO-8601): True"),
        ("jsonl", "[1, 2]\n", 1, "--event-time ts needs an object with that field, not a list"),
        ("csv", "ts,b\n1,2\n1,2,3\n", 3, "3 fields for 2 columns"),
        ("csv", "ts,ts\n1,2\n", 1, "the header needs a distinct, non-empty name for every column"),
    ],
)
def test_the_first_unreadable_line_is_named(fmt, text, line, problem):
    with pytest.raises(BadLine) as caught:
        list(parse_records(text.splitlines(keepends=True), fmt, "ts"))
    assert (caught.value.line, caught.value.problem) == (line, problem)


def test_a_store_path_that_is_a_file_or_has_other_queues_is_refused(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    error = one_error_line(
        headrace("produce", "--path", "file", "--create", "--stream", "a/b", cwd=tmp_path, stdin="1\n"), "produce"
    )
    assert error == f"the embedded store path '{tmp_path / 'file'}' is a file; give a directory"
    assert (
        headrace("produce", "--path", "store", "--queues", "4", "--stream", "a/b", cwd=tmp_path, stdin="1\n").returncode
        == 0
    )
    error = one_error_line(
        headrace("produce", "--path", "store", "--queues", "8", "--stream", "a/b", cwd=tmp_path, stdin="2\n"), "produce"
    )
    assert error.startswith("provider.queues: 8 queues disagree with the store at") and error.endswith(
        "set 4 or leave it out"
    )
    (tmp_path / "memory.toml").write_text('[provider]\nadapter = "memory"\n')
    error = one_error_line(
        headrace("produce", "--config", "memory.toml", "--stream", "a/b", cwd=tmp_path, stdin="1\n"), "produce"
    )
    assert error.startswith("provider.adapter is 'memory': events published there vanish")
    assert [values for _, values, _ in published(tmp_path / "store")] == [[1]]
