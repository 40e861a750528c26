"""The adapters the contract suite runs against.

To add an adapter, write one opener (an async context manager yielding an
:class:`AdapterHarness`) and add a :class:`HarnessSpec` for it to ``HARNESSES`` below; every
contract test whose ``@pytest.mark.needs(...)`` capabilities it declares then runs on it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio

from streams.adapters.protocols import QueueAdapter
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from streams.backends.embedded.store import EmbeddedStore
from streams.backends.kafka.adapter import KafkaAdapterFactory
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.memory.adapter import MemoryAdapterFactory
from streams.core.ids import QueueId, StreamId
from tests.kafka_broker import produce_raw
from tests.streams.adapters.harness import AdapterHarness, HarnessSpec, ProducerSpec, shutdown_all

QUEUES = 4


@asynccontextmanager
async def memory_harness(request: pytest.FixtureRequest, spec: HarnessSpec) -> AsyncIterator[AdapterHarness]:
    factory = MemoryAdapterFactory(queues=QUEUES)
    adapter = await factory.create_adapter()

    async def write_foreign(queue: QueueId, payload: bytes) -> None:
        # Memory queues have no outside writer: the adapter itself takes any bytes.
        await adapter.queue_message_batch(queue, StreamId("foreign", "writer"), payload)

    yield AdapterHarness(spec, adapter, factory.get_queue_mapper(), write_foreign)
    await adapter.close()


@asynccontextmanager
async def embedded_harness(request: pytest.FixtureRequest, spec: HarnessSpec) -> AsyncIterator[AdapterHarness]:
    path = request.getfixturevalue("tmp_path") / "store"
    factories = [EmbeddedAdapterFactory(path, QUEUES)]
    adapter = await factories[0].create_adapter()

    async def reopen() -> QueueAdapter:
        await factories[-1].close()
        factories.append(EmbeddedAdapterFactory(path, QUEUES))
        embedded.adapter = await factories[-1].create_adapter()
        return embedded.adapter

    async def retain(max_age: float | None = None, max_records_per_queue: int | None = None) -> None:
        current = await factories[-1].create_adapter()
        await current.apply_retention(RetentionPolicy(max_age=max_age, max_records_per_queue=max_records_per_queue))

    async def write_foreign(queue: QueueId, payload: bytes) -> None:
        # Another program writing the table with its own connection, not through headrace.
        conn = sqlite3.connect(path / EmbeddedStore.FILE_NAME, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            (seq,) = conn.execute("SELECT next_seq FROM queue_heads WHERE queue = ?", (queue.number,)).fetchone()
            conn.execute(
                "INSERT INTO queue_records(queue, seq, stream, payload, enqueued)"
                " VALUES (?, ?, 'foreign/writer', ?, ?)",
                (queue.number, seq, payload, time.time()),
            )
            conn.execute("UPDATE queue_heads SET next_seq = ? WHERE queue = ?", (seq + 1, queue.number))
            conn.execute("COMMIT")
        finally:
            conn.close()

    embedded = AdapterHarness(
        spec,
        adapter,
        factories[0].get_queue_mapper(),
        write_foreign,
        reopen=reopen,
        retain=retain,
        producer=ProducerSpec(
            "streams.backends.embedded.adapter:EmbeddedAdapterFactory",
            {"path": str(path), "queues": QUEUES},
        ),
    )
    yield embedded
    await factories[-1].close()


def kafka_factory(**settings: Any) -> KafkaAdapterFactory:
    """The adapter factory of ``settings`` (KafkaSettings fields, as JSON carries them to
    the producer process)."""
    return KafkaAdapterFactory(KafkaSettings(**settings))


@asynccontextmanager
async def kafka_harness(request: pytest.FixtureRequest, spec: HarnessSpec) -> AsyncIterator[AdapterHarness]:
    # A topic of its own on the session's Tansu broker; Tansu's memory storage has no
    # producer ids, hence no idempotent producer.
    bootstrap: str = request.getfixturevalue("kafka_broker")
    topic: str = request.getfixturevalue("kafka_topic")
    settings = {"bootstrap_servers": bootstrap, "topic": topic, "queues": QUEUES, "idempotent": False}
    factories = [kafka_factory(**settings)]
    adapter = await factories[0].create_adapter()

    async def reopen() -> QueueAdapter:
        await factories[-1].close()
        factories.append(kafka_factory(**settings))
        opened.adapter = await factories[-1].create_adapter()
        return opened.adapter

    async def write_foreign(queue: QueueId, payload: bytes) -> None:
        await produce_raw(bootstrap, topic, queue.number, payload)

    opened = AdapterHarness(
        spec,
        adapter,
        factories[0].get_queue_mapper(),
        write_foreign,
        reopen=reopen,
        producer=ProducerSpec("tests.streams.adapters.conftest:kafka_factory", settings),
    )
    yield opened
    await factories[-1].close()


HARNESSES: list[HarnessSpec] = [
    HarnessSpec("memory", memory_harness),
    HarnessSpec(
        "embedded",
        embedded_harness,
        rewindable=True,
        durable=True,
        retention=True,
        multiprocess=True,
    ),
    # Kafka's retention is the broker's (by age and size, read or not): no "retention" here.
    HarnessSpec("kafka", kafka_harness, rewindable=True, durable=True, multiprocess=True),
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(*capabilities): run only on the adapters declaring these capabilities "
        "(rewindable, durable, retention, multiprocess)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_spec" not in metafunc.fixturenames:
        return
    needs = [c for m in metafunc.definition.iter_markers("needs") for c in m.args]
    specs = [s for s in HARNESSES if all(s.has(c) for c in needs)]
    metafunc.parametrize("harness_spec", specs, ids=[s.name for s in specs])


# Same event loop as the tests (function scope), whatever the fixture default is.
@pytest_asyncio.fixture(loop_scope="function")
async def harness(request: pytest.FixtureRequest, harness_spec: HarnessSpec) -> AsyncIterator[AdapterHarness]:
    async with harness_spec.open(request, harness_spec) as opened:
        try:
            yield opened
        finally:
            await shutdown_all(opened)
