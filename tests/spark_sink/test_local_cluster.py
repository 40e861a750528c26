"""The DataSource on a Spark cluster of two executor JVMs (``local-cluster[2,1,1024]``), the
path a real cluster takes: executors start their own Python workers, which import
``spark_sink`` and read the handoff log's splits. A batch read and a streaming read each
return exactly the rows handed off.

The reads run in a subprocess (``cluster_reader.py``) with its own SparkSession: the suite's
session is ``local[2]``, and a JVM holds one SparkContext."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, python_env
from tests.spark_sink.handoff_testkit import STREAM, Handoff, window_results

pytestmark = pytest.mark.spark

READER = Path(__file__).with_name("cluster_reader.py")


@pytest.mark.timeout(480)  # three JVMs start: 2 min measured on 2 cores at load 10, more when busier
def test_two_executor_jvms_read_the_handoff_log_in_batch_and_streaming(handoff: Handoff, events, tmp_path):
    handed = window_results(events)
    handoff.append_windows(handed)
    done = subprocess.run(
        [sys.executable, str(READER), str(handoff.path), STREAM, str(tmp_path / "checkpoint")],
        cwd=ROOT,
        env=python_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    read = json.loads(done.stdout.splitlines()[-1])
    expected = sorted(list(row) for row in handed)
    assert read["executors"] == 2
    assert read["batch"] == expected  # each row once, none missing or changed
    assert read["stream"] == expected
    assert len(read["batches"]) > 1 and sum(read["batches"]) == len(handed)  # offsets carried across batches
