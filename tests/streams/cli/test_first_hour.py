"""The first hour of a new user: what each command now says and does."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams import StreamProvider
from streams.backends.embedded.queue_tables import stored_queue_count
from streams.cli import SUBCOMMANDS
from tests.streams.cli.helpers import headrace, json_of, one_error_line, published, start_worker

APP = """
from streams import StreamProvider

provider = StreamProvider.embedded("app-store", queues=1)
number = 3


@provider.implicit("tolls")
class Tolls:
    def __init__(self, stream_id): ...

    def on_next(self, batch): ...
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


# -- 1: a --path with no store is refused; an existing store's queue count is the default -----


def test_produce_refuses_a_path_with_no_store_unless_asked_to_create_one(tmp_path):
    error = one_error_line(
        headrace("produce", "--path", "stroe", "--stream", "a/b", cwd=tmp_path, stdin="1\n"), "produce"
    )
    assert error == (
        f"no headrace store at '{tmp_path / 'stroe'}': no worker reads it; give the directory your workers use "
        "(or --app), or --create to make a new store there (--queues N: 8 by default)"
    )
    assert not (tmp_path / "stroe").exists()
    made = headrace("produce", "--path", "store", "--create", "--stream", "a/b", cwd=tmp_path, stdin="1\n")
    assert made.returncode == 0, made.stderr
    assert stored_queue_count(tmp_path / "store") == 8
    again = headrace("produce", "--path", "store", "--stream", "a/b", cwd=tmp_path, stdin="2\n")  # exists now
    assert again.returncode == 0, again.stderr
    assert [values for _, values, _ in published(tmp_path / "store")] == [[1], [2]]


def test_producing_through_the_app_before_its_first_worker_keeps_its_queue_count(app_dir):
    produced = headrace("produce", "--app", "app:provider", "--stream", "tolls/b1", cwd=app_dir, stdin='{"n": 1}\n')
    assert produced.returncode == 0, produced.stderr
    assert stored_queue_count(app_dir / "app-store") == 1  # the app's, not 8: its worker starts
    # and the Python API takes an existing store's count by default
    assert len(StreamProvider.embedded(app_dir / "app-store").mapper.get_all_queues()) == 1
    assert len(StreamProvider.embedded(app_dir / "new").mapper.get_all_queues()) == 8
    error = one_error_line(
        headrace("produce", "--app", "app:provider", "--create", "--stream", "a/b", cwd=app_dir, stdin="1\n"), "produce"
    )
    assert error == "--app publishes to the application's own store and queues: drop --create and --queues"


# -- 2: plainly not CSV ---------------------------------------------------------------------------


def test_csv_refuses_json_lines(tmp_path):
    (tmp_path / "orders.jsonl").write_text('{"qty": 2}\n{"qty": 3}\n')
    args = ("produce", "--path", "store", "--create", "--stream", "a/b", "--format", "csv", "orders.jsonl")
    assert one_error_line(headrace(*args, cwd=tmp_path), "produce") == (
        "orders.jsonl, line 1: this is JSON, not a CSV header: the input reads as JSON lines (--format jsonl); "
        "published 0 events from the lines before it, nothing from this line on"
    )
    (tmp_path / "two.jsonl").write_text('{"a": 1, "b": 2}\n')
    args = ("produce", "--path", "store", "--create", "--stream", "a/b", "--format", "csv", "two.jsonl")
    assert "this is JSON, not a CSV header" in one_error_line(headrace(*args, cwd=tmp_path), "produce")


# -- 3: a stream per key in one run ----------------------------------------------------------------


def test_key_field_publishes_a_stream_per_key(tmp_path):
    lines = (
        '{"booth": "B1", "toll": 1}\n{"booth": "B2", "toll": 2}\n{"booth": "B1", "toll": 3}\n{"booth": 7, "toll": 4}\n'
    )
    result = headrace(
        "produce", "--path", "store", "--create", "--stream", "tolls", "--key-field", "booth", cwd=tmp_path, stdin=lines
    )
    assert result.returncode == 0, result.stderr
    assert "published 4 events to 3 streams of tolls (by booth) in 3 batches (" in result.stdout
    by_stream = {}
    for stream, values, _ in published(tmp_path / "store"):
        by_stream.setdefault(stream, []).extend(v["toll"] for v in values)
    assert by_stream == {"tolls/B1": [1, 3], "tolls/B2": [2], "tolls/7": [4]}


@pytest.mark.parametrize(
    ("stream", "stdin", "error"),
    [
        ("tolls/x", "{}\n", "with --key-field, --stream is the namespace (e.g. tolls), not 'tolls/x'"),
        (
            "tolls",
            '{"booth": "B1"}\n{"toll": 1}\n',
            "stdin, line 2: no key: field 'booth' is missing, empty or not a single value; "
            "published 1 event from the lines before it, nothing from this line on",
        ),
        (
            "tolls",
            "[1]\n",
            "stdin, line 1: --key-field booth needs an object with that field, not a list; "
            "published 0 events from the lines before it, nothing from this line on",
        ),
    ],
)
def test_key_field_mistakes_are_one_line(tmp_path, stream, stdin, error):
    args = ("produce", "--path", "store", "--create", "--stream", stream, "--key-field", "booth")
    assert one_error_line(headrace(*args, cwd=tmp_path, stdin=stdin), "produce") == error


# -- 4: --app where --path was needed ----------------------------------------------------------------


def test_status_dlq_and_produce_find_the_store_through_the_app(app_dir):
    assert (
        headrace("produce", "--app", "app:provider", "--stream", "tolls/b1", cwd=app_dir, stdin="1\n").returncode == 0
    )
    status = json_of(headrace("status", "--app", "app:provider", "--json", cwd=app_dir))
    assert [q["queue"] for q in status["queues"]] == [0]
    listed = headrace("dlq", "list", "--app", "app:provider", cwd=app_dir)
    assert listed.returncode == 0, listed.stderr
    error = one_error_line(headrace("status", "--app", "app:provider", "--path", "x", cwd=app_dir), "status")
    assert error == "give --app or --path, not both: the application's provider names its store"
    (app_dir / "mem.py").write_text("from streams import StreamProvider\nprovider = StreamProvider.memory()\n")
    error = one_error_line(headrace("dlq", "list", "--app", "mem:provider", cwd=app_dir), "dlq")
    assert error == (
        "mem:provider keeps its dead letters in this process's memory (MemoryDeadLetterStore): "
        "nothing outside it can list them"
    )
    error = one_error_line(
        headrace("produce", "--app", "mem:provider", "--stream", "a/b", cwd=app_dir, stdin="1\n"), "produce"
    )
    assert error == "--app mem:provider is on memory queues: events published there vanish when this command ends"


# -- 8: help in plain text, tables without trailing spaces, did-you-mean, articles --------------------


@pytest.mark.parametrize("command", [[c] for c in SUBCOMMANDS] + [["dlq", "replay"], ["dlq", "list"]])
def test_help_is_plain_text(tmp_path, command):
    result = headrace(*command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "``" not in result.stdout
    assert not re.search(r":(class|func|meth|mod|data|attr):`", result.stdout)


def test_status_lines_end_at_their_last_character(tmp_path):
    assert (
        headrace("produce", "--path", "store", "--queues", "2", "--stream", "a/b", cwd=tmp_path, stdin="1\n").returncode
        == 0
    )
    out = headrace("status", "--path", "store", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "queue" in out.stdout
    assert [line for line in out.stdout.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("app:provder", "module 'app' has no attribute 'provder' (did you mean 'provider'?)"),
        ("app:number", "app:number is an int, not a StreamProvider"),
        ("app.py:provider", "--app takes a module, not a file: --app app:provider (drop .py; dots for folders)"),
        (
            "src/shop/app.py:provider",
            "--app takes a module, not a file: --app src.shop.app:provider (drop .py; dots for folders)",
        ),
    ],
)
def test_a_mistaken_app_says_what_it_is(app_dir, spec, error):
    assert one_error_line(headrace("worker", "--app", spec, cwd=app_dir), "worker") == error
    assert one_error_line(headrace("status", "--app", spec, cwd=app_dir), "status") == error


# -- 5: a worker says what it runs -------------------------------------------------------------------


def _worker_log(cwd: Path, spec: str) -> str:
    log_path = cwd / "worker.log"
    with open(log_path, "w") as log:
        worker = start_worker(cwd, "--app", spec, "--name", "w1", "--metrics-port", "0", log=log)
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().startswith("headrace worker w1: running, reading queues [0] of 1")
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0
    return log_path.read_text()


def test_a_worker_names_its_app_store_consumer_types_and_metrics_url(app_dir):
    log = _worker_log(app_dir, "app:provider")
    assert f"w1: app app:provider: embedded queues (1), store {app_dir / 'app-store'}" in log
    assert "w1: consumer types: tolls: Tolls" in log
    assert re.search(r"metrics at http://127\.0\.0\.1:\d+/metrics", log)
    assert "no consumer types" not in log


def test_a_worker_with_no_consumer_types_warns(app_dir):
    (app_dir / "bare.py").write_text(
        'from streams import StreamProvider\nprovider = StreamProvider.embedded("s", queues=1)\n'
    )
    log = _worker_log(app_dir, "bare:provider")
    [warning] = [line for line in log.splitlines() if "no consumer types are registered" in line]
    assert "warning" in warning.lower()
    assert "register them with @provider.implicit(...) in the module --app imports" in warning


# -- 6: what event time did, per consumer type, in status ----------------------------------------------

TIMED_APP = """
from streams import StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

provider = StreamProvider.embedded("timed-store", queues=1)


@provider.implicit("tolls")
class Totals:
    event_time = EventTime(OrderingPolicy(timestamp_by="t", out_of_order=5, action="adjust"), Tumbling(60), Count())

    def __init__(self, stream_id): ...

    def on_window(self, result): ...


@provider.implicit("tolls")
class Strict:
    event_time = EventTime(OrderingPolicy(timestamp_by="t", action="drop"), Tumbling(60), Count())

    def __init__(self, stream_id): ...

    def on_window(self, result): ...
"""


def test_status_shows_adjusted_dropped_and_dead_lettered_per_consumer_type(tmp_path):
    (tmp_path / "timed_app.py").write_text(TIMED_APP)
    (tmp_path / "headrace.toml").write_text('[worker]\nstatus_interval = "200ms"\n')
    # 100, 130, then 110 and 120 below the watermark (out of order), then a time that is none
    lines = '{"t": 100}\n{"t": 130}\n{"t": 110}\n{"t": 120}\n{"t": "soon"}\n'
    assert (
        headrace("produce", "--app", "timed_app:provider", "--stream", "tolls/b1", cwd=tmp_path, stdin=lines).returncode
        == 0
    )
    with open(tmp_path / "worker.log", "w") as log:
        worker = start_worker(tmp_path, "--app", "timed_app:provider", "--name", "w1", log=log)
    try:
        assert worker.stdout is not None
        worker.stdout.readline()
        status = _poll_status(tmp_path, lambda s: sum(t["events"] for t in s["consumer_types"]) == 10)
        assert status["consumer_types"] == [
            {
                "consumer_type": "timed_app.Strict",
                "events": 5,
                "adjusted": 0,
                "dropped": 2,
                "dead_lettered": 1,
                "windows_emitted": 1,
                "early_results": 0,
                "joins_emitted": 0,
                "events_out": 5,
            },
            {
                "consumer_type": "timed_app.Totals",
                "events": 5,
                "adjusted": 2,
                "dropped": 0,
                "dead_lettered": 1,
                "windows_emitted": 1,
                "early_results": 0,
                "joins_emitted": 0,
                "events_out": 5,
            },
        ]  # [60, 120) closed by 130 (less 5 s out of order for Totals)
        table = headrace("status", "--app", "timed_app:provider", cwd=tmp_path).stdout
        assert re.search(r"timed_app\.Totals\s+5\s+5\s+2\s+0\s+1\s+1\s+0\s+0\n", table), table
        assert re.search(r"timed_app\.Strict\s+5\s+5\s+0\s+2\s+1\s+1\s+0\s+0\n", table), table
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0


def _poll_status(cwd: Path, until: Callable[[Any], bool], timeout: float = 20.0) -> Any:
    """``headrace status --app timed_app:provider --json`` until ``until(status)`` or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        status = json_of(headrace("status", "--app", "timed_app:provider", "--json", cwd=cwd))
        if until(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.2)
