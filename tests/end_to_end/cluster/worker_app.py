"""The application the cluster tests run with ``headrace worker --app tests.end_to_end.cluster.worker_app:app``.

An embedded store (``HEADRACE_TEST_STORE``) with 8 queues and short leases
(``HEADRACE_TEST_LEASE`` seconds). Into the directory ``HEADRACE_TEST_RECORDS`` each worker
process appends, one line per fact, flushed at once (so a SIGKILL loses nothing written):

- ``<pid>.deliveries``: ``value token`` for every event its implicit consumers get;
- ``<pid>.reads``: ``worker queue tenure begin end`` for every call its pulling agents make
  to their queue receivers (initialize, reads, acknowledgements, shutdown), so the tests can
  rebuild when each worker was touching each queue.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

from balancer import BalancerOptions
from streams import StreamId, StreamProvider
from streams.backends.embedded.adapter import EmbeddedAdapterFactory, EmbeddedQueueAdapter, EmbeddedQueueReceiver
from streams.backends.embedded.backend import EmbeddedBackend
from streams.core.batch import QueueMessage
from streams.core.ids import QueueId, SequenceToken

QUEUES = 8
NAMESPACE = "cluster"
T = TypeVar("T")


class RecordingReceiver:
    """A real embedded receiver that notes when each of its calls began and ended."""

    def __init__(self, inner: EmbeddedQueueReceiver, provider: StreamProvider, out: TextIO) -> None:
        self._inner = inner
        self._provider = provider
        self._out = out
        self._tenure = uuid.uuid4().hex[:12]

    async def _timed(self, call: Callable[[], Awaitable[T]]) -> T:
        begin = time.time()
        try:
            return await call()
        finally:
            worker, queue = self._provider.worker_name, self._inner.queue.number
            self._out.write(f"{worker} {queue} {self._tenure} {begin!r} {time.time()!r}\n")

    async def initialize(self) -> None:
        await self._timed(self._inner.initialize)

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        return await self._timed(lambda: self._inner.get_queue_messages(max_count))

    @property
    def caught_up(self) -> bool:
        return self._inner.caught_up

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        return await self._timed(lambda: self._inner.read_range(start_sequence, max_count))

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        await self._timed(lambda: self._inner.messages_delivered(tokens))

    async def shutdown(self) -> None:
        await self._timed(self._inner.shutdown)


class RecordingAdapter:
    """The real embedded adapter, handing out recording receivers."""

    def __init__(self, inner: EmbeddedQueueAdapter, provider: StreamProvider, out: TextIO) -> None:
        self._inner = inner
        self._provider = provider
        self._out = out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> RecordingReceiver:
        return RecordingReceiver(self._inner.create_receiver(queue, max_record_size), self._provider, self._out)


class RecordingFactory(EmbeddedAdapterFactory):
    provider: StreamProvider
    reads: TextIO

    async def create_adapter(self) -> RecordingAdapter:  # type: ignore[override]
        return RecordingAdapter(await super().create_adapter(), self.provider, self.reads)


def app() -> StreamProvider:
    store = os.environ["HEADRACE_TEST_STORE"]
    records = Path(os.environ["HEADRACE_TEST_RECORDS"])
    lease = float(os.environ["HEADRACE_TEST_LEASE"])
    factory = RecordingFactory(store, QUEUES)
    provider = StreamProvider(
        EmbeddedBackend(factory),
        pubsub=factory.create_pubsub_store(),
        dead_letters=factory.create_dead_letter_store(),
        balancer_options=BalancerOptions(lease, renew_period=lease / 4, refresh_period=lease / 8),
    )
    return recording(provider, factory, records)


def recording(provider: StreamProvider, factory: Any, records: Path) -> StreamProvider:
    """Make ``provider``'s worker record its reads (through ``factory``'s recording adapter)
    and every event delivered (value and token) under ``records``."""
    factory.provider = provider
    factory.reads = open(records / f"{os.getpid()}.reads", "a", buffering=1)
    deliveries = open(records / f"{os.getpid()}.deliveries", "a", buffering=1)

    @provider.implicit(NAMESPACE)
    class Recorder:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch: Any) -> None:
            deliveries.write("".join(f"{e.value} {e.token}\n" for e in batch))

    return provider
