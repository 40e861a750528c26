"""Fixtures of the Spark handoff tests: one Spark session for the whole run (a session
costs ~10 s to start), one Spark Connect server for the tests that read through it, raw
events, and the same windows as Spark computes them from the raw events."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.spark_sink.connect_server import start_connect_server
from tests.spark_sink.handoff_testkit import (
    BASE,
    WINDOW_SECONDS,
    Handoff,
    KafkaHandoff,
    RawEvent,
    WindowRow,
    collect_windows,
    open_handoff,
    spark_session,
)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Spark's Python workers must run this interpreter, where headrace is installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = spark_session("local[2]", "headrace-spark-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ``sc://`` address of a local Spark Connect server (its own JVM, beside the suite's
    session) whose Python workers run this interpreter; stopped at the end of the run."""
    server = start_connect_server(tmp_path_factory.mktemp("spark-connect"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def events() -> list[RawEvent]:
    rng = random.Random(6)
    span = 100 * WINDOW_SECONDS
    return [
        (
            (BASE + rng.randrange(span)) * 1_000_000 + rng.randrange(1_000_000),
            f"k{rng.randrange(5)}",
            float(rng.randrange(100)),
        )
        for _ in range(6000)
    ]


@pytest.fixture(scope="session")
def expected(spark: SparkSession, events: list[RawEvent]) -> list[WindowRow]:
    """The same windows computed by Spark itself over the raw events."""
    raw = spark.createDataFrame(events, "micros long, key string, value double").withColumn(
        "ts", F.timestamp_micros("micros")
    )
    windows = raw.groupBy(F.window("ts", f"{WINDOW_SECONDS} seconds"), "key").agg(
        F.count("*").alias("count"), F.sum("value").alias("total")
    )
    return collect_windows(windows, "window.start", "window.end")


def _handoff(path: Path, **log_options: int) -> Iterator[Handoff]:
    handoff = open_handoff(path, **log_options)
    yield handoff
    handoff.store.close()


@pytest.fixture
def handoff(tmp_path: Path) -> Iterator[Handoff]:
    """An embedded log as the runtime makes it: small appends stay inline in the index."""
    yield from _handoff(tmp_path / "store")


@pytest.fixture
def file_handoff(tmp_path: Path) -> Iterator[Handoff]:
    """An embedded log that writes every append as a segment file (as large appends are)."""
    yield from _handoff(tmp_path / "store", inline_bytes=0)


@pytest.fixture
def kafka_handoff(kafka_broker: str, kafka_topic: str) -> KafkaHandoff:
    return KafkaHandoff(kafka_broker, kafka_topic)


@pytest.fixture(params=["embedded", "kafka"])
def any_handoff(request: pytest.FixtureRequest) -> Handoff | KafkaHandoff:
    """The same window stream in either log: the tests that use it hold for both."""
    return request.getfixturevalue("handoff" if request.param == "embedded" else "kafka_handoff")
