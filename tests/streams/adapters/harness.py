"""Adapter harnesses: what the contract suite needs to drive one queue adapter.

A harness opens an adapter on fresh queues and offers the few operations the protocols do
not cover (reopening on the same data, writing foreign bytes, applying retention, letting
another process produce). Each adapter declares its capabilities in a :class:`HarnessSpec`;
a test that needs one runs only on the adapters that have it (``@pytest.mark.needs``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import pytest

from streams.adapters.protocols import QueueAdapter, QueueAdapterReceiver, QueueMapper
from streams.core.batch import BatchContainer, BatchKind, QueueMessage
from streams.core.ids import QueueId, StreamId


@dataclass(frozen=True)
class ProducerSpec:
    """How another process builds a producer on the same queues: an importable
    ``QueueAdapterFactory`` (``"package.module:Class"``) and its keyword arguments (JSON)."""

    factory: str
    kwargs: dict[str, Any]

    def create_factory(self) -> Any:
        module, _, name = self.factory.partition(":")
        return getattr(importlib.import_module(module), name)(**self.kwargs)


@dataclass
class AdapterHarness:
    """One open adapter under test, with its optional extra operations.

    - ``reopen()``: close the adapter and open a new one on the same durable data (durable).
    - ``write_foreign(queue, payload)``: put bytes on a queue as another program would.
    - ``retain(max_age=…, max_records_per_queue=…)``: apply a retention policy once (retention).
    - ``producer``: how a subprocess opens a producer on these queues (multiprocess).
    """

    spec: HarnessSpec
    adapter: QueueAdapter
    mapper: QueueMapper
    write_foreign: Callable[[QueueId, bytes], Awaitable[None]]
    reopen: Callable[[], Awaitable[QueueAdapter]] | None = None
    retain: Callable[..., Awaitable[None]] | None = None
    producer: ProducerSpec | None = None
    receivers: list[QueueAdapterReceiver] = field(default_factory=list)

    async def receiver(self, queue: QueueId) -> QueueAdapterReceiver:
        """An initialized receiver of ``queue`` on the current adapter."""
        receiver = self.adapter.create_receiver(queue)
        await receiver.initialize()
        self.receivers.append(receiver)
        return receiver

    def streams_on(self, queue: QueueId, count: int, namespace: str = "contract") -> list[StreamId]:
        """``count`` stream ids that the mapper puts on ``queue``."""
        found: list[StreamId] = []
        n = 0
        while len(found) < count:
            sid = StreamId(namespace, f"s{n}")
            if self.mapper.get_queue_for_stream(sid) == queue:
                found.append(sid)
            n += 1
        return found

    async def publish(
        self,
        stream_id: StreamId,
        values: Sequence[Any],
        kind: BatchKind = BatchKind.DATA,
        event_times: Sequence[float | None] | None = None,
    ) -> BatchContainer:
        """Enqueue one batch container on the stream's queue, as a producer does."""
        container = BatchContainer(stream_id, kind, time.time(), list(values), event_times)
        queue = self.mapper.get_queue_for_stream(stream_id)
        await self.adapter.queue_message_batch(queue, stream_id, container.encode())
        return container


HarnessOpener = Callable[[pytest.FixtureRequest, "HarnessSpec"], AbstractAsyncContextManager[AdapterHarness]]


@dataclass(frozen=True)
class HarnessSpec:
    """An adapter the contract suite runs against, and what it can do.

    ``rewindable``: its receivers implement ``read_range``; ``durable``: records and
    checkpoints survive closing and reopening; ``retention``: the harness can apply a
    retention policy; ``multiprocess``: another process can produce to it.
    """

    name: str
    open: HarnessOpener
    rewindable: bool = False
    durable: bool = False
    retention: bool = False
    multiprocess: bool = False

    def has(self, capability: str) -> bool:
        if capability not in ("rewindable", "durable", "retention", "multiprocess"):
            raise ValueError(f"unknown adapter capability {capability!r}")
        return bool(getattr(self, capability))


async def drain(receiver: QueueAdapterReceiver, batch: int = 100) -> list[QueueMessage]:
    """Everything the receiver has now, read ``batch`` at a time."""
    out: list[QueueMessage] = []
    while messages := await receiver.get_queue_messages(batch):
        out.extend(messages)
    return out


async def shutdown_all(harness: AdapterHarness) -> None:
    receivers, harness.receivers = harness.receivers, []
    for receiver in receivers:
        await receiver.shutdown()
