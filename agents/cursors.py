"""Where a consumer reads from: its queue's cache, or (a rewind, a detached consumer) the durable
queue where the cache cannot serve it.

Where a consumer reads from: its queue's cache, or the durable queue where the cache
cannot serve it.

A subscription from a token older than the cache (or made before the cache has read
anything) reads the queue's history through a :class:`~agents.cursors.RewindCursor`, and so
does a consumer that held a full cache longer than ``slow_consumer_timeout``: it is detached
onto the queue, so the others go on while it catches up from there. Only a receiver that
reads history (``RewindableReceiver``) allows either; with any other, a token older than the
cache is a visible miss and a slow consumer holds the cache.

Reading a stream's history from the durable queue, for cursors the cache cannot serve.

A subscription from a token older than the cache, or a slow consumer detached so it no longer
holds the cache full, gets a :class:`RewindCursor`: it reads the queue itself from its position
(``RewindableReceiver.read_range``), keeps its own stream's batches, and joins the cache with an
ordinary cursor as soon as the cache holds everything from its position on.

A position the queue no longer holds (retention removed it) is a visible miss, as one older
than the cache is: :meth:`RewindCursor.fill` returns a :class:`CacheMissError` naming the first
position available, which the consumer hears through ``on_error`` before the data from there.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import deque
from collections.abc import Iterable

from agents.delivery import StreamConsumer
from cache.protocols import CachedBatch, QueueCache, QueueCacheCursor
from streams.adapters.protocols import QueueAdapterReceiver, RewindableReceiver
from streams.core.batch import BatchContainer, EventBatch, QueueMessage
from streams.core.errors import CacheMissError, DecodeError
from streams.core.ids import QueueId, SequenceToken, StreamId
from streams.core.options import StreamProviderOptions


class _HistoryBatch:
    """A batch read from the durable queue (the cache's batch shape, not in the cache)."""

    __slots__ = ("message", "sequence", "last", "container", "stream_id", "kind", "_events")

    def __init__(self, message: QueueMessage, container: BatchContainer) -> None:
        self.message = message
        self.sequence = message.sequence_number
        self.last = container.last_sequence(self.sequence)
        self.container = container
        self.stream_id = container.stream_id
        self.kind = container.kind
        self._events: EventBatch | None = None

    @property
    def start(self) -> int:
        return self.sequence

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

    @property
    def closed(self) -> bool:
        return self._closed

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


log = logging.getLogger("headrace.agent")


class Cursors:
    """Makes the cursors of one queue's consumers, and moves slow ones off its cache."""

    def __init__(
        self, queue: QueueId, receiver: QueueAdapterReceiver, cache: QueueCache, options: StreamProviderOptions
    ) -> None:
        self.queue = queue
        # Checked once: a runtime Protocol check is too slow for every pump.
        self._rewinder = receiver if isinstance(receiver, RewindableReceiver) else None
        self.cache = cache
        self._options = options
        self._pressure_since: float | None = None

    def open(self, sid: StreamId, token: SequenceToken | None) -> tuple[QueueCacheCursor, CacheMissError | None]:
        """A cursor of ``sid`` from ``token`` (None: from the next batch to arrive), and the
        miss to report when the cache no longer has that position (it then starts at the
        oldest batch the cache holds)."""
        miss: CacheMissError | None = None
        cursor: QueueCacheCursor
        if (
            token is not None
            and self._rewinder is not None
            and ((covered := self.cache.covered_from()) is None or token.sequence_number < covered)
        ):
            # Older than the cache, or the cache has read nothing yet (a worker just started
            # reads after the checkpoint): the durable queue has what the token asks for.
            cursor = self.rewind(sid, token.sequence_number)
        else:
            try:
                cursor = self.cache.create_cursor(sid, token)
            except CacheMissError as exc:
                miss = exc
                cursor = self.cache.create_cursor(sid, self.cache.oldest_cached_token())
        return cursor, miss

    def rewind(self, sid: StreamId, start_sequence: int) -> RewindCursor:
        """A cursor of ``sid`` over the durable queue from ``start_sequence``."""
        assert self._rewinder is not None, "only a receiver that reads history rewinds"
        return RewindCursor(sid, self._rewinder, self.cache, start_sequence)

    def detach_slow(self, working: Iterable[StreamConsumer]) -> None:
        """A consumer holding a full cache longer than ``slow_consumer_timeout`` is moved onto
        the durable queue, so the others go on (it catches up from there)."""
        timeout = self._options.slow_consumer_timeout
        if timeout is None or self._rewinder is None:
            self._pressure_since = None
            return
        now = time.monotonic()
        if not self.cache.is_under_pressure():
            self._pressure_since = None
            return
        if self._pressure_since is None:
            self._pressure_since = now
            return
        if now - self._pressure_since < timeout:
            return
        oldest = self.cache.oldest_needed()
        for consumer in tuple(working):  # one holding the cache has data, so a task
            item = consumer.cursor.current()
            if item is not None and item.sequence == oldest:
                log.warning(
                    "%s: consumer %s on %s held the cache full for %.0fs; detached to read from the queue",
                    self.queue,
                    consumer.subscription_id,
                    consumer.stream_id,
                    now - self._pressure_since,
                )
                consumer.detach(functools.partial(self.rewind, consumer.stream_id))
        self._pressure_since = None
