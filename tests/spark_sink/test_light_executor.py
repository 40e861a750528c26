"""A Spark executor that reads the handoff log imports the reading side only: the DataSource,
the log, its SQLite store and ``streams.core``; no agent, balancer, cache, provider, queue adapter or Kafka
client (aiokafka loads only when a Kafka log is read). Importing the DataSource loads no backend at
all: the options find the backend's storage when it is opened, without ``importlib.metadata``
(which scans every installed package, in each of Spark's Python processes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, python_env
from tests.spark_sink.handoff_testkit import STREAM, Handoff, window_results

pytestmark = pytest.mark.spark  # the subprocess imports pyspark

# What the process lists: every module of headrace's packages, and aiokafka's, it has loaded,
# and importlib.metadata if it has.
LOADED = """
import json, sys
ours = ("agents", "balancer", "cache", "streams", "spark_sink", "aiokafka")
listed = [m for m in sys.modules if m.partition(".")[0] in ours or m == "importlib.metadata"]
print(json.dumps(sorted(listed)))
"""


def run_listing(script: str) -> tuple[list[str], list[str]]:
    """What ``script`` printed, and the modules of ours (and aiokafka's) loaded after it ran."""
    done = subprocess.run(
        [sys.executable, "-c", script + LOADED], cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    *printed, modules = done.stdout.splitlines()
    loaded: list[str] = json.loads(modules)
    return printed, loaded


def beyond_reading_side(modules: list[str], *reading: str) -> list[str]:
    """``modules`` outside the reading side: spark_sink, the floor ``streams.core`` (and the
    modules named in ``reading``)."""
    allowed = ("spark_sink", "streams.core", *reading)
    root = ("streams", "streams.backends")  # package roots: nothing loads with them
    return [m for m in modules if m not in root and not any(m == p or m.startswith(f"{p}.") for p in allowed)]


def test_importing_the_datasource_loads_no_runtime_and_no_kafka_client():
    _, modules = run_listing("import spark_sink.datasource\n")
    assert "spark_sink.datasource" in modules
    assert beyond_reading_side(modules) == []  # no backend, agents, balancer, cache, runtime, adapters, aiokafka


def test_reading_an_embedded_log_as_an_executor_does_loads_no_runtime(handoff: Handoff, events):
    handoff.append_windows(window_results(events))
    expected = sum(handoff.writer.end_offsets().values())
    # The executor's path: a pickled reader arrives, opens the storage and reads its splits.
    script = f"""
import pickle
from spark_sink.datasource import HeadraceBatchReader
from spark_sink.options import ReadOptions
from pyspark.sql.types import StructType
options = ReadOptions.parse({{"path": {str(handoff.path)!r}, "stream": {STREAM!r}}})
schema = StructType.fromJson(options.open_storage().schema({STREAM!r}).spark_json())
reader = pickle.loads(pickle.dumps(HeadraceBatchReader(options, schema)))
print(sum(batch.num_rows for p in reader.partitions() for batch in reader.read(p)))
"""
    (rows,), modules = run_listing(script)
    assert int(rows) == expected > 0
    embedded_log = (
        "streams.backends.embedded",
        "streams.backends.embedded.handoff_log",
        "streams.backends.embedded.store",
    )
    assert beyond_reading_side(modules, *embedded_log) == []


def test_aiokafka_loads_only_when_a_kafka_log_is_opened():
    options = "from spark_sink.options import ReadOptions\n" + (
        "options = ReadOptions.parse({'kafka.bootstrap.servers': 'localhost:1', 'stream': 's'})\n"
    )
    _, parsed = run_listing(options)
    _, opened = run_listing(options + "storage = options.open_storage()\n")  # connects on first use
    assert not [m for m in parsed if m.startswith("aiokafka")]
    assert "aiokafka" in opened and "streams.backends.kafka.handoff_storage" in opened
    kafka_log = [f"streams.backends.kafka{m}" for m in ("", ".handoff_storage", ".handoff_log", ".handoff_records")]
    clients = ("streams.backends.kafka.clients", "streams.backends.kafka.settings", "aiokafka")
    assert beyond_reading_side(opened, *kafka_log, *clients) == []  # the Kafka log and client pieces only
