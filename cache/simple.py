"""The simple queue cache: a bounded window of a queue, shared by every consumer of it.

Like Orleans' ``SimpleQueueCache``, the cache is split into buckets (10 by default) and tracks
which cursors stand in each, so it knows without scanning that the oldest bucket is no longer
needed. Unlike it, each cached batch links to the next batch of the same stream, so a cursor
steps straight to its own stream's data instead of walking past every other stream's.

Nothing a cursor still needs is ever dropped: when the cache is full and its oldest bucket
holds a cursor, the cache is *under pressure* and the agent stops reading the queue. Full is
``max_size`` batches, or ``max_bytes`` bytes of the records they were read from, whichever
comes first, so a queue of large records cannot take a worker past its memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from streams.core.batch import BatchContainer, EventBatch, QueueMessage
from streams.core.codec import interned
from streams.core.errors import CacheMissError, ConfigurationError
from streams.core.ids import SequenceToken, StreamId


class SimpleCachedBatch:
    """One queue message in the cache, linked to the next batch of its stream.

    Its decoded form is kept only while a cursor of its stream has yet to pass it; after
    that only the raw bytes stay (for rewinds, decoded again on demand). Holding fewer
    Python objects keeps the garbage collector's work, and so the agent, fast: for the same
    reason the message's fields are kept here rather than the message itself, which is
    made again on the rare occasions it is asked for.
    """

    __slots__ = (
        "bucket",
        "sequence",
        "last",
        "stream_id",
        "kind",
        "next",
        "pending",
        "size",
        "_queue",
        "_payload",
        "_enqueued_time",
        "_container",
        "_events",
    )

    def __init__(self, bucket: int, message: QueueMessage, container: BatchContainer, pending: int) -> None:
        self.bucket = bucket  # the cache's own dense position // the bucket size
        self.sequence = message.sequence_number
        # The position of its last record: its own, but for a group of one-event records
        # (streams.core.record_batch.ContainerGroup), whose events stand at their records.
        self.last = container.last_sequence(self.sequence)
        self._queue, _, self._payload, self._enqueued_time, _ = message
        self.size = len(self._payload) or container.byte_size  # what the cache counts it as
        self.stream_id = container.stream_id
        self.kind = container.kind
        self.next: SimpleCachedBatch | None = None
        self.pending = pending  # cursors of the stream that have not passed it yet
        # With no cursor to pass it, nothing would drop the decoded form: keep only the bytes.
        # A batch a receiver decoded (no bytes of its own) keeps its decoded form.
        self._container: BatchContainer | None = container if pending > 0 or not self._payload else None
        self._events: EventBatch | None = None

    @property
    def start(self) -> int:
        return self.sequence

    @property
    def message(self) -> QueueMessage:
        return QueueMessage(self._queue, self.sequence, self._payload, self._enqueued_time)

    @property
    def container(self) -> BatchContainer:
        if self._container is None:
            return BatchContainer.decode(self._payload)
        return self._container

    @property
    def events(self) -> EventBatch:
        # Made once, on first delivery, and shared by every cursor.
        events = self._events
        if events is None:
            events = self.container.events(self.sequence)
            if self.pending > 0:
                self._events = events
        return events

    def passed(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            self._events = None
            if self._payload:
                self._container = None


class _StreamEntry:
    __slots__ = ("head", "tail", "waiting", "cursors")

    def __init__(self) -> None:
        self.head: SimpleCachedBatch | None = None
        self.tail: SimpleCachedBatch | None = None
        # The caught-up cursors: none, the one (a stream mostly has one consumer), or a tuple
        # of several. An entry lives while its stream's consumers do, quiet ones too: a set
        # here was 216 bytes a stream.
        self.waiting: SimpleCacheCursor | tuple[SimpleCacheCursor, ...] | None = None
        self.cursors = 0  # open cursors on the stream

    def wait(self, cursor: SimpleCacheCursor) -> None:
        """``cursor`` is caught up (once, however often it is said)."""
        waiting = self.waiting
        if waiting is None:
            self.waiting = cursor
        elif isinstance(waiting, tuple):
            if cursor not in waiting:
                self.waiting = (*waiting, cursor)
        elif waiting is not cursor:
            self.waiting = (waiting, cursor)

    def stop_waiting(self, cursor: SimpleCacheCursor) -> None:
        """``cursor`` is not caught up (any more, or was not)."""
        waiting = self.waiting
        if waiting is cursor:
            self.waiting = None
        elif isinstance(waiting, tuple) and cursor in waiting:
            rest = tuple(c for c in waiting if c is not cursor)
            self.waiting = rest[0] if len(rest) == 1 else rest

    def take_waiting(self) -> tuple[SimpleCacheCursor, ...]:
        """The caught-up cursors, none of them waiting any more."""
        waiting, self.waiting = self.waiting, None
        if waiting is None:
            return ()
        return waiting if isinstance(waiting, tuple) else (waiting,)


class _StartingAt:
    """A cached group of records that begins before a cursor's token, from the token on."""

    __slots__ = ("_item", "start", "sequence", "last", "stream_id", "kind")

    def __init__(self, item: SimpleCachedBatch, start: int) -> None:
        self._item, self.start = item, start  # start: the position the cursor begins at
        self.sequence, self.last, self.stream_id, self.kind = item.sequence, item.last, item.stream_id, item.kind

    @property
    def message(self) -> QueueMessage:
        return self._item.message

    @property
    def container(self) -> BatchContainer:
        return self._item.container

    @property
    def events(self) -> EventBatch:
        return self._item.events.starting_at(SequenceToken(self.start))


class SimpleCacheCursor:
    """A consumer's position on one stream. ``current()`` is ``None`` once caught up; the
    cache moves a caught-up cursor onto its stream's next batch when that arrives.

    Four slots (a worker holds one a consumer, quiet ones too): closed is ``_entry`` None,
    and only a cursor from a token (:class:`_CursorFromToken`) has a position to skip to."""

    __slots__ = ("stream_id", "_cache", "_entry", "_item")

    # It never reads the queue itself, unlike a RewindCursor (class attributes: the agent
    # reads them for every cursor, and a missing attribute is slow to look up).
    needs_fill: bool = False
    position: int | None = None
    # Skip batches before this position (the subscription's token): none but a token's.
    _min_sequence: int = -1

    def __init__(self, cache: SimpleQueueCache, entry: _StreamEntry, stream_id: StreamId) -> None:
        self.stream_id = stream_id
        self._cache = cache
        self._entry: _StreamEntry | None = entry  # its stream's entry, which lives while the stream has cursors
        self._item: SimpleCachedBatch | None = None

    def current(self) -> SimpleCachedBatch | _StartingAt | None:
        item = self._item
        if item is not None and item.sequence < self._min_sequence:
            # A group of records that begins before the token and ends at or after it: the
            # cursor's first batch, from the token on (its events stand at their records).
            return _StartingAt(item, self._min_sequence)
        return item

    def advance(self) -> None:
        item = self._item
        if item is None or self._entry is None:
            return
        item.passed()
        self._cache._move(self, item.next)

    def close(self) -> None:
        entry = self._entry
        if entry is not None:
            self._cache._move(self, None, waiting=False)
            entry.cursors -= 1
            self._entry = None
            self._cache._forget_if_unused(self.stream_id, entry)

    @property
    def closed(self) -> bool:
        return self._entry is None


class _CursorFromToken(SimpleCacheCursor):
    """A cursor that skips its stream's batches before the subscription's token."""

    __slots__ = ("_min_sequence",)

    def __init__(self, cache: SimpleQueueCache, entry: _StreamEntry, stream_id: StreamId, min_sequence: int) -> None:
        super().__init__(cache, entry, stream_id)
        self._min_sequence = min_sequence


class SimpleQueueCache:
    """A bounded queue cache [4096 batches, 10 buckets, 64 MiB] with one cursor per consumer.

    >>> cache = SimpleQueueCache(max_size=100, buckets=10)
    >>> cache.get_max_add_count()
    100
    """

    def __init__(self, max_size: int = 4096, buckets: int = 10, max_bytes: int = 64 << 20) -> None:
        if max_size < 1 or buckets < 1 or buckets > max_size or max_bytes < 1:
            raise ConfigurationError(
                f"cache_size ({max_size}), cache_buckets ({buckets}) and cache_max_bytes ({max_bytes}) "
                "must be positive, with no more buckets than batches"
            )
        self.max_size = max_size
        self.max_bytes = max_bytes
        self.bytes = 0  # of the records its batches were read from
        self._bucket_size = -(-max_size // buckets)
        self._items: deque[SimpleCachedBatch] = deque()
        self._streams: dict[StreamId, _StreamEntry] = {}
        # bucket number -> cursors standing on a batch of that bucket
        self._buckets: dict[int, set[SimpleCacheCursor]] = {}
        self._next_position = 0
        self._first_sequence: int | None = None  # first queue position ever cached
        self._purged_through = -1  # last queue position dropped from the cache

    # -- the agent's side -------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self._items)

    def is_under_pressure(self) -> bool:
        return len(self._items) >= self.max_size or self.bytes >= self.max_bytes

    def get_max_add_count(self) -> int:
        if self.bytes >= self.max_bytes:
            return 0
        return max(0, self.max_size - len(self._items))

    def add(self, messages: Iterable[tuple[QueueMessage, BatchContainer]]) -> set[StreamId]:
        touched: set[StreamId] = set()
        streams, items, size = self._streams, self._items, self._bucket_size
        position = self._next_position
        for message, container in messages:
            if self._first_sequence is None:
                self._first_sequence = message.sequence_number
            sid = container.stream_id
            entry = streams.get(sid)
            if entry is None:
                entry = streams[sid] = _StreamEntry()
            item = SimpleCachedBatch(position // size, message, container, entry.cursors)
            position += 1
            items.append(item)
            self.bytes += item.size
            if entry.tail is None:
                entry.head = item
            else:
                entry.tail.next = item
            entry.tail = item
            if entry.waiting is not None:
                self._wake_waiting(entry, item)
            touched.add(sid)
        self._next_position = position
        return touched

    def try_purge(self) -> int:
        """Drop whole buckets from the oldest end while no cursor stands in them, keeping
        delivered history for rewinds until the room is needed."""
        purged = 0
        items, size = self._items, self._bucket_size
        while items and (len(items) > self.max_size - size or self.bytes > self.max_bytes // 2):
            bucket = items[0].bucket
            if self._buckets.get(bucket):
                break
            while items and items[0].bucket == bucket:
                self._drop_head()
                purged += 1
        return purged

    def oldest_needed(self) -> int | None:
        for bucket in sorted(self._buckets):
            cursors = self._buckets[bucket]
            if cursors:
                return min(c._item.sequence for c in cursors if c._item)
        return None

    def create_cursor(self, stream_id: StreamId, token: SequenceToken | None) -> SimpleCacheCursor:
        """Raises :class:`CacheMissError` when ``token`` is older than the cache; the caller
        reports it and asks again with no token (the oldest data still cached)."""
        if token is not None and self._is_miss(token.sequence_number):
            raise CacheMissError(
                f"stream {stream_id}: token {token} is older than the queue cache "
                f"(oldest cached position {self._purged_through + 1 if self._first_sequence is not None else '-'}); "
                "resuming from the oldest data still available"
            )
        stream_id = interned(stream_id)
        entry = self._entry(stream_id)
        entry.cursors += 1
        if token is None:  # from the stream's next batch: caught up now
            cursor = SimpleCacheCursor(self, entry, stream_id)
            entry.wait(cursor)
            return cursor
        min_sequence = token.sequence_number
        cursor = _CursorFromToken(self, entry, stream_id, min_sequence)
        start = entry.head
        while start is not None and start.last < min_sequence:
            start = start.next
        self._move(cursor, start)
        return cursor

    def oldest_cached_token(self) -> SequenceToken | None:
        return SequenceToken(self._items[0].sequence) if self._items else None

    def covered_from(self) -> int | None:
        first = self._first_sequence
        return None if first is None else max(first, self._purged_through + 1)

    # -- internals --------------------------------------------------------------------
    def _is_miss(self, sequence_number: int) -> bool:
        if sequence_number <= self._purged_through:
            return True
        return self._first_sequence is not None and sequence_number < self._first_sequence

    def _wake_waiting(self, entry: _StreamEntry, item: SimpleCachedBatch) -> None:
        """Caught-up cursors of the stream step onto its new batch (if not before their token)."""
        bucket = self._buckets.get(item.bucket)
        for cursor in entry.take_waiting():
            if item.last < cursor._min_sequence:
                entry.wait(cursor)
                continue
            cursor._item = item
            if bucket is None:
                bucket = self._buckets[item.bucket] = set()
            bucket.add(cursor)

    def _move(self, cursor: SimpleCacheCursor, item: SimpleCachedBatch | None, *, waiting: bool = True) -> None:
        min_sequence = cursor._min_sequence
        while item is not None and item.last < min_sequence:
            item = item.next
        old, cursor._item = cursor._item, item
        if old is not None and item is not None and old.bucket == item.bucket:
            return  # the common step: within one bucket, no set to update
        entry = cursor._entry
        assert entry is not None, "a closed cursor does not move"
        if old is not None:
            self._buckets[old.bucket].discard(cursor)
        else:
            entry.stop_waiting(cursor)
        if item is not None:
            self._buckets.setdefault(item.bucket, set()).add(cursor)
        elif waiting:
            entry.wait(cursor)

    def _entry(self, stream_id: StreamId) -> _StreamEntry:
        entry = self._streams.get(stream_id)
        if entry is None:
            entry = self._streams[stream_id] = _StreamEntry()
        return entry

    def _forget_if_unused(self, stream_id: StreamId, entry: _StreamEntry) -> None:
        """A stream with no cursor and nothing cached is forgotten (its last cursor closed
        after its batches were dropped: a deactivated stream must leave nothing behind)."""
        if (
            entry.head is None
            and entry.cursors <= 0
            and entry.waiting is None
            and self._streams.get(stream_id) is entry
        ):
            del self._streams[stream_id]

    def _drop_head(self) -> None:
        item = self._items.popleft()
        self.bytes -= item.size
        if item.last > self._purged_through:  # a group's records stand up to its last
            self._purged_through = item.last
        bucket = item.bucket
        if (
            bucket in self._buckets
            and not self._buckets[bucket]
            and (not self._items or self._items[0].bucket != bucket)
        ):
            del self._buckets[bucket]
        sid = item.stream_id
        entry = self._streams[sid]
        entry.head = item.next
        if entry.head is None:
            entry.tail = None
            if entry.waiting is None and entry.cursors <= 0:
                del self._streams[sid]
