"""Fixtures shared by the whole suite: one Kafka-protocol broker per run (tests/kafka_fixtures.py).

Tests that use Spark or the broker are marked by the fixtures they take, so that
``pytest -m "not spark and not kafka"`` runs the rest without either."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.kafka_fixtures"]

_MARKED_BY = {"spark": "spark", "kafka_broker": "kafka"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            marker = _MARKED_BY.get(fixture)
            if marker is not None:
                item.add_marker(marker)
