"""Reading a stream's history from the durable queue, for cursors the cache cannot serve.

A subscription from a token older than the cache, or a slow consumer detached so it no longer
holds the cache full, gets a :class:`RewindCursor`: it reads the queue itself from its position
(``RewindableReceiver.read_range``), keeps its own stream's batches, and joins the cache with an
ordinary cursor as soon as the cache holds everything from its position on.

A position the queue no longer holds (retention removed it) is a visible miss, as one older
than the cache is: :meth:`RewindCursor.fill` returns a :class:`CacheMissError` naming the first
position available, which the consumer hears through ``on_error`` before the data from there.
"""

from __future__ import annotations

import math
from collections import deque

from cache.protocols import CachedBatch, QueueCache, QueueCacheCursor
from streams.adapters.protocols import RewindableReceiver
from streams.core.batch import BatchContainer, EventBatch, QueueMessage
from streams.core.errors import CacheMissError, DecodeError
from streams.core.ids import StreamId
from streams.core.tokens import SequenceToken


class _HistoryBatch:
    """A batch read from the durable queue (the cache's batch shape, not in the cache)."""

    __slots__ = ("message", "sequence", "container", "stream_id", "kind", "_events")

    def __init__(self, message: QueueMessage, container: BatchContainer) -> None:
        self.message = message
        self.sequence = message.sequence_number
        self.container = container
        self.stream_id = container.stream_id
        self.kind = container.kind
        self._events: EventBatch | None = None

    @property
    def events(self) -> EventBatch:
        if self._events is None:
            self._events = self.container.events(self.sequence)
        return self._events


class RewindCursor:
    """A cursor that catches up from the durable queue, then continues in the cache."""

    def __init__(
        self,
        stream_id: StreamId,
        receiver: RewindableReceiver,
        cache: QueueCache,
        start_sequence: int,
        read_size: int = 512,
    ) -> None:
        self.stream_id = stream_id
        self._receiver = receiver
        self._cache = cache
        self._next_sequence = start_sequence  # next queue position to read
        self._buffer: deque[_HistoryBatch] = deque()
        self._joined: QueueCacheCursor | None = None
        self._read_size = read_size
        self._closed = False
        # The queue's clock as this cursor reads it (every stream's records): each batch
        # kept learns where it stood just before it, as the agent's reads teach the cache's.
        self._clock = -math.inf

    @property
    def needs_fill(self) -> bool:
        return self._joined is None and not self._buffer and not self._closed

    @property
    def position(self) -> int | None:
        """The oldest queue position this cursor still needs (None once in the cache)."""
        if self._joined is not None or self._closed:
            return None
        return self._buffer[0].sequence if self._buffer else self._next_sequence

    def current(self) -> CachedBatch | None:
        if self._joined is not None:
            return self._joined.current()
        return self._buffer[0] if self._buffer else None

    def advance(self) -> None:
        if self._joined is not None:
            self._joined.advance()
        elif self._buffer:
            self._buffer.popleft()

    def close(self) -> None:
        self._closed = True
        if self._joined is not None:
            self._joined.close()
        self._buffer.clear()

    async def fill(self) -> CacheMissError | None:
        """Join the cache if it now holds our position, else read the next run of history.
        Returns the miss to report when the queue no longer holds our position."""
        wanted = self._next_sequence
        covered = self._cache.covered_from()
        if covered is not None and wanted >= covered:
            self._joined = self._cache.create_cursor(self.stream_id, SequenceToken(wanted))
            return None
        messages = await self._receiver.read_range(wanted, self._read_size)
        if not messages and covered is None:
            # The end of the queue, and the agent has read nothing yet: what comes next is
            # what it reads next, into the cache.
            self._joined = self._cache.create_cursor(self.stream_id, SequenceToken(wanted))
            return None
        if not messages:
            # Retention removed our position and the cache has moved past it too: continue
            # from the oldest data the cache holds (what a plain cache miss does).
            oldest = self._cache.oldest_cached_token()
            self._joined = self._cache.create_cursor(self.stream_id, oldest)
            return self._miss(wanted, None if oldest is None else oldest.sequence_number)
        miss = None
        if messages[0].sequence_number > wanted:  # read_range starts at the oldest record retained
            miss = self._miss(wanted, messages[0].sequence_number)
        for message in messages:
            try:
                container = BatchContainer.decode(message.payload)
            except DecodeError:
                continue  # the agent dead-lettered it when it first read it
            if container.clock_before is None and self._clock > -math.inf:
                container.clock_before = self._clock
            self._clock = max(self._clock, container.arrival_time)
            if container.stream_id == self.stream_id:
                self._buffer.append(_HistoryBatch(message, container))
        self._next_sequence = messages[-1].sequence_number + 1
        return miss

    def _miss(self, wanted: int, first: int | None) -> CacheMissError:
        return CacheMissError(
            f"stream {self.stream_id}: position {wanted} is no longer in the queue (retention "
            f"removed it); the first position available is {'-' if first is None else first}; "
            "resuming from there"
        )
