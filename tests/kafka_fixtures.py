"""Pytest fixtures for a real Kafka-protocol broker (register with
``pytest_plugins = ["tests.kafka_fixtures"]``).

``kafka_broker`` is one Tansu broker for the whole session, on a free loopback port;
tests keep out of each other's way by using their own topic names (``kafka_topic``).
:func:`json_provider` reads a topic of JSON records on it, :func:`delete_topic` deletes one.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from streams import StreamProvider
from tests.kafka_broker import TansuBroker
from tests.kafka_tls import Certificates, SecuredCluster

_topic_numbers = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """``"127.0.0.1:PORT"`` of a Tansu broker that lives for the test session. The local
    state stores its workers left in the default ``state_dir`` (of this session's topics) go
    with it: a later session's broker, empty, must not meet them under a reused name."""
    with TansuBroker() as broker:
        yield broker.bootstrap
    default = Path(tempfile.gettempdir()) / "headrace-state"
    for left in default.glob(f"*.state.t{os.getpid()}-*"):
        shutil.rmtree(left, ignore_errors=True)


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


def json_provider(
    bootstrap: str,
    topic: str,
    *,
    queues: int,
    namespace: str,
    kafka: Mapping[str, object] | None = None,
    **options: Any,
) -> StreamProvider:
    """A provider reading ``topic``'s JSON records, one event each, as ``namespace``'s streams,
    on the test broker: no idempotent producer and no group membership (Tansu has neither);
    ``kafka`` adds Kafka settings, ``options`` the provider's own."""
    return StreamProvider.kafka(
        bootstrap,
        topic,
        queues=queues,
        records="json",
        namespace=namespace,
        kafka={"idempotent": False, "group_membership": False, **(kafka or {})},
        **options,
    )


async def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` from the cluster, as an operator's admin client does."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
