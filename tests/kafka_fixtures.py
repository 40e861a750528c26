"""Pytest fixtures for a real Kafka-protocol broker (register with
``pytest_plugins = ["tests.kafka_fixtures"]``).

``kafka_broker`` is one Tansu broker for the whole run (shared by pytest-xdist's workers), on a
free loopback port;
tests keep out of each other's way by using their own topic names (``kafka_topic``).
:func:`json_provider` reads a topic of JSON records on it, :func:`delete_topic` deletes one.
``SHORT_SESSION`` is the group timing of workers that join a consumer group there.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from balancer import BalancerOptions
from streams import StreamProvider
from tests.kafka_broker import TansuBroker
from tests.kafka_tls import Certificates, SecuredCluster

_topic_numbers = itertools.count()

# Tansu holds each JoinGroup for half the group's session timeout (the worker's default, 10 s,
# has every start and rebalance wait 5 s); a 3 s session, a heartbeat a second, waits 1.5 s.
SHORT_SESSION = BalancerOptions(3.0, renew_period=1.0, refresh_period=0.5)


@contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON state at ``path``, read and written back under an exclusive lock."""
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        yield state
        path.write_text(json.dumps(state))


@contextmanager
def shared_broker(path: Path) -> Iterator[str]:
    """One broker for every pytest-xdist worker of a run: the first to ask starts it and
    stops it once no other worker uses it (waiting for them at its own teardown; a worker
    that died no longer counts); the rest take its address from ``path``. Tests keep apart
    by topic name, which carries the worker's pid."""
    with _locked(path) as state:
        broker = None if state else TansuBroker().__enter__()
        if broker is not None:
            state.update(bootstrap=broker.bootstrap, users=[])
        state["users"].append(os.getpid())
        bootstrap = str(state["bootstrap"])
    try:
        yield bootstrap
    finally:
        with _locked(path) as state:
            state["users"].remove(os.getpid())
        while broker is not None:
            with _locked(path) as state:
                state["users"] = [pid for pid in state["users"] if _alive(pid)]
                if not state["users"]:
                    broker.__exit__(None, None, None)
                    state.clear()
                    broker = None
                    continue
            time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``"127.0.0.1:PORT"`` of a Tansu broker that lives for the test session, one for the
    whole run however many pytest-xdist workers share it (:func:`shared_broker`). The local
    state stores its workers left in the default ``state_dir`` (of this session's topics) go
    with it: a later session's broker, empty, must not meet them under a reused name."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        with TansuBroker() as broker:
            yield broker.bootstrap
    else:
        with shared_broker(tmp_path_factory.getbasetemp().parent / "kafka-broker.json") as bootstrap:
            yield bootstrap
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


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions, as an operator's admin client does."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` from the cluster, as an operator's admin client does."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
