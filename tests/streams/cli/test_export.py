"""``headrace export``: a namespace's recent events from a real embedded store as
the CSV ``headrace simulate`` reads, replayed by ``simulate --sweep``; and the mistakes."""

from __future__ import annotations

import csv
import json
import time

import pytest

from tests.streams.cli.helpers import headrace, one_error_line


def _produce(tmp_path, stream: str, times: list[int], t0: int) -> None:
    lines = "".join(json.dumps({"ts": t0 + t, "n": t}) + "\n" for t in times)
    result = headrace(
        "produce", "--path", "store", "--queues", "2", "--create", "--stream", stream,
        "--event-time", "ts", "--batch-size", "2", cwd=tmp_path, stdin=lines,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _rows(path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_export_then_simulate_sweeps_the_exported_sample(tmp_path):
    t0 = int(time.time()) - 100
    before = time.time()
    _produce(tmp_path, "tolls/b1", [0, 3, 1, 12], t0)  # the 1 is 2 s out of order
    _produce(tmp_path, "tolls/b2", [5, 25], t0)
    _produce(tmp_path, "other/x", [7], t0)  # another namespace: not exported
    after = time.time()

    result = headrace(
        "export", "--path", "store", "--stream", "tolls", "--since", "1h", "--value-by", "n", "s.csv", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(tmp_path / "s.csv")
    assert list(rows[0]) == ["arrival_time", "event_time", "key", "value"]
    # Every event of the namespace, each once, with its key, time and value, in arrival order.
    got = sorted((r["key"], float(r["event_time"]), float(r["value"])) for r in rows)
    expected = sorted([("b1", t0 + t, float(t)) for t in (0, 3, 1, 12)] + [("b2", t0 + t, float(t)) for t in (5, 25)])
    assert got == expected
    arrivals = [float(r["arrival_time"]) for r in rows]
    assert arrivals == sorted(arrivals) and before <= arrivals[0] and arrivals[-1] <= after
    assert [r["key"] for r in rows] == ["b1"] * 4 + ["b2"] * 2  # b1 was published first
    assert result.stdout.startswith("headrace export: 6 events of tolls that arrived from ")
    assert result.stdout.splitlines()[0].endswith("written to s.csv")

    # One stream of it, the newest event only (--limit).
    one = headrace(
        "export", "--path", "store", "--stream", "tolls/b1", "--since", "1h", "--limit", "1", "b1.csv", cwd=tmp_path
    )
    assert one.returncode == 0, one.stderr
    [row] = _rows(tmp_path / "b1.csv")
    assert (row["key"], float(row["event_time"]), row["value"]) == ("b1", t0 + 12, "")  # no --value-by, not a number

    # The sample replays: the events, each once, under each swept tolerance (a watermark per key).
    swept = headrace(
        "simulate", "--sweep", "out_of_order=0s,5s", "--window", "tumbling:10s", "--substreams", "s.csv", cwd=tmp_path
    )
    assert swept.returncode == 0, swept.stderr
    header, zero, five = swept.stdout.splitlines()[:3]
    assert header.split()[:5] == ["out_of_order", "events", "adjusted", "dropped", "dead_lettered"]
    # With 0 s the 1 (below the newest, 3, of b1) is adjusted; with 5 s nothing is.
    assert zero.split()[:5] == ["0s", "6", "1", "0", "0"]
    assert five.split()[:5] == ["5s", "6", "0", "0", "0"]
    lines = headrace("simulate", "--out-of-order", "0s", "--substreams", "s.csv", cwd=tmp_path)
    assert lines.returncode == 0, lines.stderr
    events = [json.loads(line) for line in lines.stdout.splitlines() if '"type": "event"' in line]
    assert [(e["key"], e["event_time"], e["status"]) for e in events] == [
        (r["key"], float(r["event_time"]), "adjusted" if float(r["event_time"]) == t0 + 1 else "kept") for r in rows
    ]


def test_export_reads_the_time_a_consumer_reads(tmp_path):
    t0 = int(time.time()) - 50
    _produce(tmp_path, "tolls/b1", [0, 1], t0)
    # --timestamp-by reads the value's field (here: ms), as OrderingPolicy(timestamp_by=...) does.
    result = headrace(
        "export", "--path", "store", "--stream", "tolls", "--since", "1h", "--timestamp-by", "n", "--unit", "ms",
        "ms.csv", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [float(r["event_time"]) for r in _rows(tmp_path / "ms.csv")] == [0.0, 0.001]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--since", "soon"], "--since: 'soon' is not a duration (like 250ms, 5s, 2m, 1h or seconds)"),
        (["--since", "0s"], "--since takes a duration above 0, like 1h or 30m, not '0s'"),
        (["--since", "1h", "--limit", "0"], "--limit takes a whole number >= 1, not 0"),
        (
            ["--stream", "nope", "--since", "1h"],
            "no events of namespace 'nope' are retained (namespaces with events: tolls)",
        ),
        (["--since", "1ms"], "no events of tolls arrived in the last 1ms (a longer --since reaches older ones)"),
        (
            ["--stream", "tolls/b9", "--since", "1h"],
            "no events of tolls/b9 arrived in the last 1h (a longer --since reaches older ones)",
        ),
    ],
)
def test_mistakes_are_one_line_and_write_nothing(tmp_path, args, error):
    _produce(tmp_path, "tolls/b1", [0], int(time.time()))
    argv = ["export", "--path", "store", *(["--stream", "tolls"] if "--stream" not in args else []), *args, "out.csv"]
    assert one_error_line(headrace(*argv, cwd=tmp_path), "export") == error
    assert not (tmp_path / "out.csv").exists()


def test_no_store_is_one_line(tmp_path):
    error = one_error_line(
        headrace("export", "--path", "nowhere", "--stream", "a", "--since", "1h", "x.csv", cwd=tmp_path), "export"
    )
    assert error.startswith(f"no headrace store at '{tmp_path / 'nowhere'}'")


EXPORT_APP = """
from streams import StreamProvider
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

provider = StreamProvider.embedded("store", queues=2)


@provider.implicit("clicks")
class Sessions:
    event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(60), Count())

    def __init__(self, stream_id):
        pass

    def on_window(self, result):
        pass
{more}
"""


def test_export_with_the_app_reads_the_time_its_consumers_read(tmp_path):
    (tmp_path / "shop.py").write_text(EXPORT_APP.format(more=""))
    t0 = int(time.time()) - 600  # well before their arrival: the arrival time would be wrong
    lines = "".join(json.dumps({"t": t0 + i, "page": "/"}) + "\n" for i in (0, 2, 1))
    produced = headrace("produce", "--app", "shop:provider", "--stream", "clicks/ann", cwd=tmp_path, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    result = headrace("export", "--app", "shop:provider", "--stream", "clicks", "--since", "1h", "c.csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [float(r["event_time"]) - t0 for r in _rows(tmp_path / "c.csv")] == [0.0, 2.0, 1.0]
    assert result.stdout.splitlines()[1] == (
        "headrace export: event times from Sessions's timestamp_by 't'; an @provider.implicit consumer type has "
        "one activation per stream, each with its own watermark: replay it with `headrace simulate --substreams c.csv`"
    )
    # The sample replays as the worker ran it: one watermark for ann, the 1 is out of order by 1 s.
    swept = headrace("simulate", "--sweep", "out_of_order=0s,1s", "--substreams", "c.csv", cwd=tmp_path)
    assert [line.split()[:3] for line in swept.stdout.splitlines()[1:3]] == [["0s", "3", "1"], ["1s", "3", "0"]]


def test_consumer_types_reading_times_differently_are_one_line(tmp_path):
    other = """
@provider.implicit("clicks")
class Pages:
    event_time = EventTime(OrderingPolicy(timestamp_by="ts", unit="ms"), Tumbling(60), Count())

    def __init__(self, stream_id):
        pass

    def on_window(self, result):
        pass
"""
    (tmp_path / "shop.py").write_text(EXPORT_APP.format(more=other))
    result = headrace("export", "--app", "shop:provider", "--stream", "clicks", "--since", "1h", "c.csv", cwd=tmp_path)
    assert one_error_line(result, "export") == (
        "the consumer types of 'clicks' read event times differently (Sessions: 't' in s; Pages: 'ts' in ms): "
        "say which with --timestamp-by (and --unit)"
    )
