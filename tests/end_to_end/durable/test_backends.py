"""The backends build what a provider runs on, and the provider asks them only: the default
balancer, pub-sub, dead letters and handoff sinks come from the backend; the package root
loads none of it until asked."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest

from balancer import BalancerOptions, LeaseBasedQueueBalancer
from spark_sink import Handoff
from streams import ConfigurationError, QueueId, StreamId, StreamProvider
from streams.backends.embedded.backend import EmbeddedBackend
from streams.backends.embedded.deadletters import EmbeddedDeadLetterStore
from streams.backends.embedded.pubsub import EmbeddedPubSubStore
from streams.backends.memory.backend import MemoryBackend
from streams.backends.memory.stores import MemoryPubSubStore
from streams.core.batch import BatchContainer, BatchKind
from streams.eventtime import EventTime, Tumbling
from streams.runtime.backends import open_handoff_sinks


class Hands:
    """A consumer type that hands its windows off to Spark."""

    event_time = EventTime(window=Tumbling(10))
    handoff = Handoff("counts", {"value": "bigint"})

    def __init__(self, stream_id: StreamId) -> None:
        pass


def test_a_memory_backend_has_no_balancer_and_refuses_a_handoff_naming_the_consumer() -> None:
    backend = MemoryBackend.open(queues=3)
    assert (backend.balances, backend.store, backend.queue_balancer(BalancerOptions())) == (False, None, None)
    assert backend.queue_mapper().get_all_queues() == [QueueId(0), QueueId(1), QueueId(2)]
    assert isinstance(StreamProvider(backend).pubsub, MemoryPubSubStore)
    with pytest.raises(ConfigurationError, match="balancer_options"):
        StreamProvider(backend, balancer_options=BalancerOptions())


async def test_a_handoff_on_memory_queues_is_refused_with_the_consumers_name() -> None:
    async with contextlib.AsyncExitStack() as stack:
        with pytest.raises(ConfigurationError, match=r"Hands hands off to Spark \('counts'\): that needs durable"):
            await open_handoff_sinks(MemoryBackend.open(), [Hands], stack)


async def test_the_embedded_backend_keeps_pubsub_dead_letters_and_handoff_in_its_store(tmp_path) -> None:
    backend = EmbeddedBackend.open(tmp_path, queues=2)
    provider = StreamProvider(backend)
    assert provider.store is backend.store and provider.factory is backend.factory
    assert isinstance(provider.pubsub, EmbeddedPubSubStore) and isinstance(
        provider.dead_letters, EmbeddedDeadLetterStore
    )
    async with contextlib.AsyncExitStack() as stack:
        sinks = await open_handoff_sinks(backend, [Hands, int], stack)
        assert list(sinks) == ["counts"]
        tables = await backend.store.read(
            lambda conn: {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        )
        assert "handoff_marks" in tables
    await backend.factory.close()


async def test_the_embedded_balancer_fences_the_receivers_made_after_it(tmp_path) -> None:
    backend = EmbeddedBackend.open(tmp_path, queues=1)
    adapter = await backend.factory.create_adapter()
    sid = StreamId("ns", "s")
    await adapter.queue_message_batch(QueueId(0), sid, BatchContainer(sid, BatchKind.DATA, 0.0, [1]).encode())
    unfenced = adapter.create_receiver(QueueId(0))
    await unfenced.initialize()
    assert len(await unfenced.get_queue_messages(10)) == 1
    balancer = backend.queue_balancer(BalancerOptions(lease_length=2.0, renew_period=0.5, refresh_period=0.25))
    assert isinstance(balancer, LeaseBasedQueueBalancer)
    fenced = adapter.create_receiver(QueueId(0))  # this worker holds no lease yet: reads nothing
    await fenced.initialize()
    assert await fenced.get_queue_messages(10) == []
    await backend.factory.close()


def test_importing_the_package_root_loads_no_provider_until_a_name_is_asked_for() -> None:
    code = (
        "import sys, streams\n"
        "print(sorted(m for m in ('streams.runtime.provider', 'agents', 'balancer', 'pyarrow') if m in sys.modules))\n"
        "from streams import StreamProvider\n"
        "print(StreamProvider.__module__, 'streams.runtime.provider' in sys.modules, 'pyarrow' in sys.modules)\n"
        "print(set(streams.__all__) <= set(dir(streams)))\n"
        "try:\n"
        "    streams.NoSuchName\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "[]",
        "streams.runtime.provider True False",
        "True",
        "module 'streams' has no attribute 'NoSuchName'",
    ]


# A fresh interpreter (this one has imported pandas long ago): it opens the worker's handoff
# sinks, then prints the modules the first write imported while its transaction held the store.
FIRST_WRITE = """
import contextlib, sys, anyio
from streams.backends.embedded.backend import EmbeddedBackend
from streams.eventtime.results import WindowResult
from streams.runtime.backends import open_handoff_sinks
from tests.end_to_end.durable.test_backends import Hands

async def main():
    backend = EmbeddedBackend.open(sys.argv[1], queues=1)
    async with contextlib.AsyncExitStack() as stack:
        sink = (await open_handoff_sinks(backend, [Hands], stack))["counts"]
        store, imported = backend.store, []
        write = store.write

        async def watched(fn):
            before = set(sys.modules)
            try:
                return await write(fn)
            finally:
                imported.extend(sorted(set(sys.modules) - before))

        store.write = watched
        written = await sink.write("meters/m", "Hands", 0, [WindowResult(None, 0.0, 10.0, 3, 12.0)])
    await backend.factory.close()
    print(written, imported)

anyio.run(main)
"""


def test_a_workers_first_handoff_write_imports_nothing_while_it_holds_the_store(tmp_path) -> None:
    """pyarrow imports pandas the first time it builds an array from Python values: seconds
    on a loaded machine, during which every read, checkpoint and lease renewal of the worker
    (and a producer's enqueue) waited for that write's transaction; a processing-time timer
    fired that much later. Opening the sinks pays for it, before any queue is read."""
    out = subprocess.run(
        [sys.executable, "-c", FIRST_WRITE, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == ["1 []"]
