"""The DataSource through Spark Connect: a client process with no JVM registers it with
``spark_sink.register`` on a ``remote(...)`` session, and the server (a local Spark Connect
server from the pyspark wheel, whose Python workers have headrace) reads the handoff log in
batch and as streams; the rows equal the suite's classic session's read of the same log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, python_env
from tests.spark_sink.handoff_testkit import STREAM, Handoff, collect_windows, window_results

CLIENT = Path(__file__).with_name("connect_client.py")

# The first of these tests may start the suite's session and the Connect server (each a JVM;
# 2-3 min together on a loaded 2-core machine), and a client's first read starts the server's
# Python workers.
pytestmark = pytest.mark.timeout(600)


def connect_client(url: str, scenario: str, handoff: Handoff, workdir: Path) -> dict[str, Any]:
    """``connect_client.py``'s result for ``scenario`` (see there), rows as tuples."""
    done = subprocess.run(
        [sys.executable, str(CLIENT), url, scenario, str(handoff.path), str(workdir)],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return {k: [tuple(row) for row in v] if k in {"batch", "available_now", "stream"} else v for k, v in result.items()}


def classic_read(spark, handoff: Handoff) -> list[tuple[Any, ...]]:
    df = spark.read.format("headrace").options(**handoff.options()).option("stream", STREAM).load()
    return collect_windows(df)


def test_a_connect_client_reads_in_batch_and_available_now_what_the_classic_session_reads(
    spark, spark_connect, handoff, events, tmp_path
):
    handed = window_results(events)
    handoff.append_windows(handed)
    read = connect_client(spark_connect, "read", handoff, tmp_path)
    classic = classic_read(spark, handoff)
    assert classic == sorted(handed)
    assert read["jvm"] is False  # a thin client: the server planned and read
    assert read["batch"] == classic
    assert read["available_now"] == classic


def test_a_connect_processing_time_query_stopped_and_restarted_delivers_each_window_once(
    spark, spark_connect, handoff, events, tmp_path
):
    handed = window_results(events)
    third = len(handed) // 3
    handoff.append_windows(handed[:third])
    (tmp_path / "later.json").write_text(json.dumps([handed[third : 2 * third], handed[2 * third :]]))
    read = connect_client(spark_connect, "restart", handoff, tmp_path)
    classic = classic_read(spark, handoff)
    assert classic == sorted(handed)
    assert read["stream"] == classic  # nothing lost or repeated across the stop
    assert read["batches"] >= len(handed) / 100  # maxRecordsPerTrigger=100 held over Connect


def test_a_connect_client_gets_the_datasource_error_naming_the_streams(spark_connect, handoff, events, tmp_path):
    handoff.append_windows(window_results(events)[:10])
    read = connect_client(spark_connect, "unknown", handoff, tmp_path)
    assert read["error"] == "AnalysisException"
    assert "no handoff stream 'no-such-stream'" in read["message"]
    assert f"declared streams: {STREAM}" in read["message"]
