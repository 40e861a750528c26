"""The memory adapter: queues in this process, for tests and one-process use."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

from streams.adapters.mapper import HashRingQueueMapper
from streams.adapters.protocols import ContainerQueueAdapter
from streams.core.batch import QueueMessage
from streams.core.ids import QueueId, SequenceToken, StreamId


class _MemoryQueue:
    """One queue's unread records, each kept as ``(sequence_number, payload, enqueued_time)``.

    Plain tuples of atomic values, not :class:`QueueMessage`: the garbage collector stops
    tracking such tuples, so a backlog of many records adds nothing to every later
    collection (a QueueMessage holds a QueueId and stays tracked). The receiver makes the
    messages as it hands them out."""

    __slots__ = ("records", "next_sequence", "delivered")

    def __init__(self) -> None:
        self.records: deque[tuple[int, bytes, float]] = deque()
        self.next_sequence = 0
        self.delivered = 0  # records acknowledged, for tests and status


class MemoryQueueAdapter(ContainerQueueAdapter):
    """Queues held in memory; records are removed when read, like Orleans' memory streams.

    Not rewindable: history lives only in the pulling agents' caches.
    """

    name = "memory"
    is_rewindable = False

    def __init__(self, queues: int = 8) -> None:
        self.mapper = HashRingQueueMapper(queues)
        # Keyed by queue number: an int hashes in C, a QueueId through a Python method.
        self._queues = {q.number: _MemoryQueue() for q in self.mapper.get_all_queues()}

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
        q = self._queues[queue.number]
        q.records.append((q.next_sequence, payload, time.time()))
        q.next_sequence += 1

    def create_receiver(self, queue: QueueId) -> MemoryQueueReceiver:
        return MemoryQueueReceiver(queue, self._queues[queue.number])

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


class MemoryAdapterFactory:
    def __init__(self, queues: int = 8) -> None:
        self._adapter = MemoryQueueAdapter(queues)

    async def create_adapter(self) -> MemoryQueueAdapter:
        return self._adapter

    def get_queue_mapper(self) -> HashRingQueueMapper:
        return self._adapter.mapper
