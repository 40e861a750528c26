"""Fixtures shared by the whole suite: one Kafka-protocol broker per run (tests/kafka_fixtures.py).

Tests that use Spark or the broker are marked by the fixtures they take, so that
``pytest -m "not spark and not kafka"`` runs the rest without either. They are also one
pytest-xdist group: ``make test`` runs the suite on two processes (``-n 2 --dist loadgroup``),
and the group keeps them in one, so a run starts one Spark session and one broker."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.kafka_fixtures"]

_MARKED_BY = {"spark": "spark", "spark_connect": "spark", "kafka_broker": "kafka"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            marker = _MARKED_BY.get(fixture)
            if marker is not None:
                item.add_marker(marker)
                item.add_marker(pytest.mark.xdist_group("spark_and_broker"))


@pytest.fixture(autouse=True)
def _no_worker_left_running() -> Iterator[None]:
    """A test that fails before it stops its ``headrace worker`` leaves no process behind."""
    yield
    durable = sys.modules.get("tests.end_to_end.durable.test_durable_state")
    if durable is not None:
        durable.kill_left_running()
