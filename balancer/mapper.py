"""Queue mappers: which queue carries a stream (Orleans' ``HashRingBasedStreamQueueMapper``)."""

from __future__ import annotations

import bisect

from streams.ids import QueueId, StreamId

_RING = 1 << 32


class HashRingQueueMapper:
    """Places queues evenly on a 32-bit hash ring; a stream goes to the queue whose range
    holds its stable hash. Every process computes the same mapping.

    >>> mapper = HashRingQueueMapper(8)
    >>> mapper.get_queue_for_stream(StreamId("sensors", "s-1")) in mapper.get_all_queues()
    True
    """

    def __init__(self, queues: int = 8) -> None:
        if not isinstance(queues, int) or queues < 1:
            raise ValueError(f"the number of queues is a positive int, not {queues!r}")
        self._queues = [QueueId(i) for i in range(queues)]
        # Queue i owns the ring range (upper[i-1], upper[i]].
        self._upper = [((i + 1) * _RING) // queues - 1 for i in range(queues)]

    @property
    def queue_count(self) -> int:
        return len(self._queues)

    def get_all_queues(self) -> list[QueueId]:
        return list(self._queues)

    def get_queue_for_stream(self, stream_id: StreamId) -> QueueId:
        return self._queues[bisect.bisect_left(self._upper, stream_id.uniform_hash)]
