"""The interface between a pulling agent and its queue cache (Orleans' ``IQueueCache``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from streams.core.batch import BatchContainer, BatchKind, EventBatch, QueueMessage
from streams.core.ids import SequenceToken, StreamId


class CachedBatch(Protocol):
    sequence: int  # message.sequence_number, read on every delivery
    last: int  # the position of its last record (a group of one-event records: not its own)
    stream_id: StreamId
    kind: BatchKind

    @property
    def start(self) -> int:
        """Where a cursor on it begins: ``sequence``, or inside a group of one-event records
        the record a subscription's token named (see ``streams.core.record_batch``)."""
        ...

    @property
    def message(self) -> QueueMessage: ...

    @property
    def container(self) -> BatchContainer: ...

    @property
    def events(self) -> EventBatch: ...


class QueueCacheCursor(Protocol):
    """One consumer's position in the cache, on one stream."""

    stream_id: StreamId

    @property
    def needs_fill(self) -> bool:
        """It reads history from the queue: ``fill()`` before ``current()``."""
        ...

    @property
    def position(self) -> int | None:
        """The oldest queue position it reads from the queue itself, if any."""
        ...

    def current(self) -> CachedBatch | None:
        """The batch to deliver next, or ``None`` when the cursor has caught up."""
        ...

    def advance(self) -> None:
        """The current batch is finished; move to the stream's next one."""

    def close(self) -> None: ...

    @property
    def closed(self) -> bool:
        """Closed: its consumer has stopped, for good or for another cursor."""
        ...


class QueueCache(Protocol):
    max_size: int  # the bound the cache holds its batches to (status shows the fill against it)
    max_bytes: int  # and the bound in bytes of the records they were read from
    bytes: int  # what it holds now, counted so

    def add(self, messages: Iterable[tuple[QueueMessage, BatchContainer]]) -> set[StreamId]:
        """Add decoded messages in queue order; return the streams that got data."""
        ...

    def get_max_add_count(self) -> int:
        """How many messages the agent may read now (0 when under pressure)."""
        ...

    def is_under_pressure(self) -> bool: ...

    def try_purge(self) -> int:
        """Drop batches no cursor needs, only as far as room is needed; return how many."""
        ...

    def create_cursor(self, stream_id: StreamId, token: SequenceToken | None) -> QueueCacheCursor:
        """A cursor at ``token`` (raising ``CacheMissError`` if that is older than the
        cache), or, with no token, at the next batch of the stream to arrive."""
        ...

    def oldest_cached_token(self) -> SequenceToken | None:
        """Where the oldest batch still cached stands (where a cache miss resumes)."""
        ...

    def oldest_needed(self) -> int | None:
        """The queue sequence number of the oldest batch a cursor still needs, if any."""
        ...

    def covered_from(self) -> int | None:
        """The oldest queue position from which a cursor gets every record of its stream
        from the cache (``None`` until the cache has read anything: it cannot tell yet)."""
        ...

    @property
    def size(self) -> int: ...
