"""Fixtures shared by the whole suite: one Kafka-protocol broker per run (tests/kafka_fixtures.py).

Tests that use Spark or the broker are marked by the fixtures they take, so that
``pytest -m "not spark and not kafka"`` runs the rest without either. They are also one
pytest-xdist group: ``make test`` runs the suite on two processes (``-n 2 --dist loadgroup``),
and the group keeps them in one, so a run starts one Spark session and one broker."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.helpers import QUICK_JVM_OPTIONS

pytest_plugins = ["tests.kafka_fixtures"]

# Every Spark driver the suite starts (its session, the Connect server, the demo's, the
# walkthrough's fresh Python) is a short-lived JVM: spark-submit adds SPARK_SUBMIT_OPTS to its options.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [QUICK_JVM_OPTIONS, os.environ.get("SPARK_SUBMIT_OPTS")]))

_MARKED_BY = {"spark": "spark", "spark_connect": "spark", "kafka_broker": "kafka"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that use Spark or the broker, and group them for pytest-xdist: the
    Spark tests on one worker (one Spark session a run), the other broker tests on one worker
    (the broker itself is shared by all: tests.kafka_fixtures.shared_broker)."""
    for item in items:
        markers = {_MARKED_BY[f] for f in getattr(item, "fixturenames", ()) if f in _MARKED_BY}
        for marker in sorted(markers):
            item.add_marker(marker)
        if markers:
            item.add_marker(pytest.mark.xdist_group("spark" if "spark" in markers else "broker"))


@pytest.fixture(autouse=True)
def _no_worker_left_running() -> Iterator[None]:
    """A test that fails before it stops its ``headrace worker`` leaves no process behind."""
    yield
    durable = sys.modules.get("tests.end_to_end.durable.test_durable_state")
    if durable is not None:
        durable.kill_left_running()
