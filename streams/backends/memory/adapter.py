"""Queues in this process: the memory adapter (for tests and one-process use) and the generator
adapter (generated test data).

The memory adapter: queues in this process, for tests and one-process use.

The generator adapter: test data made by the adapter itself (Orleans' GeneratorAdapterFactory).

Each queue's receiver invents batch containers for the streams that map to it, until it has
made ``events_per_stream`` events for each. Producers cannot write to it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streams.adapters.mapper import HashRingQueueMapper
from streams.adapters.protocols import ContainerQueueAdapter, StateKey, StateSource
from streams.core.batch import BatchContainer, BatchKind, QueueMessage
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, SequenceToken, StreamId


class _MemoryQueue:
    """One queue's unread records, each kept as ``(sequence_number, payload, enqueued_time)``.

    Plain tuples of atomic values, not :class:`QueueMessage`: the garbage collector stops
    tracking such tuples, so a backlog of many records adds nothing to every later
    collection (a QueueMessage holds a QueueId and stays tracked). The receiver makes the
    messages as it hands them out."""

    __slots__ = ("records", "next_sequence", "delivered", "states")

    def __init__(self) -> None:
        self.records: deque[tuple[int, bytes, float]] = deque()
        self.next_sequence = 0
        self.delivered = 0  # records acknowledged, for tests and status
        # The activation states saved with its acknowledgements (an adapter that keeps them).
        self.states: dict[StateKey, tuple[SequenceToken, bytes]] = {}


class MemoryQueueAdapter(ContainerQueueAdapter):
    """Queues held in memory; records are removed when read, like Orleans' memory streams.

    Not rewindable: history lives only in the pulling agents' caches.
    """

    name = "memory"
    is_rewindable = False

    def __init__(self, queues: int = 8, *, keep_states: bool = False) -> None:
        self.mapper = HashRingQueueMapper(queues)
        # Keyed by queue number: an int hashes in C, a QueueId through a Python method.
        self._queues = {q.number: _MemoryQueue() for q in self.mapper.get_all_queues()}
        # Save activations' states with each acknowledgement, for the next worker of this
        # process (streams.testing's restart); off: every worker starts from nothing.
        self._keep_states = keep_states

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
        q = self._queues[queue.number]
        q.records.append((q.next_sequence, payload, time.time()))
        q.next_sequence += 1

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> MemoryQueueReceiver:
        if self._keep_states:
            return StatefulMemoryQueueReceiver(queue, self._queues[queue.number])
        return MemoryQueueReceiver(queue, self._queues[queue.number])

    def saved_states(self, queue: QueueId) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The activation states saved with ``queue``'s acknowledgements (kept states only)."""
        return dict(self._queues[queue.number].states)

    def depth(self, queue: QueueId) -> int:
        """Records enqueued and not yet read."""
        return len(self._queues[queue.number].records)

    def delivered(self, queue: QueueId) -> int:
        return self._queues[queue.number].delivered

    async def close(self) -> None:
        return None


class MemoryQueueReceiver:
    def __init__(self, queue: QueueId, state: _MemoryQueue) -> None:
        self.queue = queue
        self._state = state
        self.caught_up = False  # the last read left the queue empty (the protocol's)

    async def initialize(self) -> None:
        return None

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        records, queue = self._state.records, self.queue
        n = min(max_count, len(records))
        out = [QueueMessage(queue, *records.popleft()) for _ in range(n)]
        self.caught_up = not records
        return out

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        self._state.delivered += len(tokens)

    async def shutdown(self) -> None:
        return None


class StatefulMemoryQueueReceiver(MemoryQueueReceiver):
    """A memory receiver that saves its activations' states with each acknowledgement (a
    :class:`~streams.adapters.protocols.StatefulReceiver`), as the embedded store saves them
    with its checkpoint: a worker started again in the same process restores them."""

    def __init__(self, queue: QueueId, state: _MemoryQueue) -> None:
        super().__init__(queue, state)
        self.state_source: StateSource | None = None

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        return dict(self._state.states)

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        self._save()  # as the embedded receiver persists a due checkpoint before it reads
        return await super().get_queue_messages(max_count)

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        await super().messages_delivered(tokens)
        self._save()

    async def shutdown(self) -> None:
        self._save()

    def _save(self) -> None:
        source = self.state_source
        if source is None or not source.pending():
            return
        upserts, deletes = source.collect()
        states = self._state.states
        for consumer, stream, sequence_number, event_index, state in upserts:
            states[(consumer, stream)] = (SequenceToken(sequence_number, event_index), state)
        for key in deletes:
            states.pop(key, None)
        source.written(True)


class MemoryAdapterFactory:
    def __init__(self, queues: int = 8, *, keep_states: bool = False) -> None:
        self._adapter = MemoryQueueAdapter(queues, keep_states=keep_states)

    async def create_adapter(self) -> MemoryQueueAdapter:
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper:
        return self._adapter.mapper


def _default_value(stream_id: StreamId, n: int) -> Any:
    return {"stream": stream_id.key, "n": n}


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate: ``streams`` stream ids ``namespace/0 … namespace/streams-1``, each
    with ``events_per_stream`` events numbered from 0, ``batch_size`` to a container."""

    namespace: str = "generated"
    streams: int = 16
    events_per_stream: int = 100
    batch_size: int = 10
    make_value: Callable[[StreamId, int], Any] = _default_value
    complete: bool = True  # end each stream with on_completed


class GeneratorQueueAdapter(ContainerQueueAdapter):
    name = "generator"
    is_rewindable = False

    def __init__(self, config: GeneratorConfig, queues: int = 8) -> None:
        if config.batch_size < 1 or config.streams < 0 or config.events_per_stream < 0:
            raise ConfigurationError("generator sizes must be positive")
        self.config = config
        self.mapper = HashRingQueueMapper(queues)
        self._streams: dict[QueueId, list[StreamId]] = {q: [] for q in self.mapper.get_all_queues()}
        for i in range(config.streams):
            sid = StreamId(config.namespace, str(i))
            self._streams[self.mapper.get_queue_for_stream(sid)].append(sid)

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
        raise ConfigurationError("the generator adapter makes its own data; producers cannot write to it")

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> GeneratorQueueReceiver:
        return GeneratorQueueReceiver(queue, self._streams[queue], self.config)

    async def close(self) -> None:
        return None


class GeneratorQueueReceiver:
    def __init__(self, queue: QueueId, streams: list[StreamId], config: GeneratorConfig) -> None:
        self.queue = queue
        self._config = config
        self._made = {sid: 0 for sid in streams}
        self._completed: set[StreamId] = set()
        self._sequence = 0
        self.delivered = 0
        self.caught_up = False  # the last read made everything there was to make

    def _next(self) -> BatchContainer | None:
        cfg = self._config
        # Round-robin over the streams that still have data, so streams interleave.
        for sid, made in self._made.items():
            if made < cfg.events_per_stream:
                n = min(cfg.batch_size, cfg.events_per_stream - made)
                self._made[sid] = made + n
                values = [cfg.make_value(sid, made + i) for i in range(n)]
                return BatchContainer(sid, BatchKind.DATA, time.time(), values)
        for sid in self._made:
            if cfg.complete and sid not in self._completed:
                self._completed.add(sid)
                return BatchContainer(sid, BatchKind.COMPLETED, time.time(), [])
        return None

    async def initialize(self) -> None:
        return None

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        out: list[QueueMessage] = []
        while len(out) < max_count:
            container = self._next()
            if container is None:
                break
            out.append(QueueMessage(self.queue, self._sequence, container.encode(), container.arrival_time))
            self._sequence += 1
        self.caught_up = len(out) < max_count
        return out

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        self.delivered += len(tokens)

    async def shutdown(self) -> None:
        return None


class GeneratorAdapterFactory:
    def __init__(self, config: GeneratorConfig | None = None, queues: int = 8) -> None:
        self._adapter = GeneratorQueueAdapter(config or GeneratorConfig(), queues)

    async def create_adapter(self) -> GeneratorQueueAdapter:
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper:
        return self._adapter.mapper
