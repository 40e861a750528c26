"""Pytest fixtures for a real Kafka-protocol broker (register with
``pytest_plugins = ["tests.kafka_fixtures"]``).

``kafka_broker`` is one Tansu broker for the whole session, on a free loopback port;
tests keep out of each other's way by using their own topic names (``kafka_topic``).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator

import pytest

from tests.kafka_broker import TansuBroker

_topic_numbers = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """``"127.0.0.1:PORT"`` of a Tansu broker that lives for the test session."""
    with TansuBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test in this session uses (the topic does not exist yet)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80]
    return f"t{os.getpid()}-{next(_topic_numbers)}-{name}"
