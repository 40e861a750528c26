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
from tests.kafka_tls import Certificates, SecuredCluster

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


@pytest.fixture(scope="session")
def secured_kafka(kafka_broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    """The session broker behind TLS (tests.kafka_tls): certificates made for this run, a
    terminator with a Tansu proxy behind it for server-only and for mutual TLS, and one
    whose certificate names another host."""
    cluster = SecuredCluster(kafka_broker, Certificates.make(tmp_path_factory.mktemp("tls"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()
