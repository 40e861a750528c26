"""Where a consumer reads from: its queue's cache, or the durable queue where the cache
cannot serve it.

A subscription from a token older than the cache (or made before the cache has read
anything) reads the queue's history through a :class:`~agents.rewind.RewindCursor`, and so
does a consumer that held a full cache longer than ``slow_consumer_timeout``: it is detached
onto the queue, so the others go on while it catches up from there. Only a receiver that
reads history (``RewindableReceiver``) allows either; with any other, a token older than the
cache is a visible miss and a slow consumer holds the cache.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable

from agents.delivery import StreamConsumer
from agents.rewind import RewindCursor
from cache.protocols import QueueCache, QueueCacheCursor
from streams.adapters.protocols import QueueAdapterReceiver, RewindableReceiver
from streams.core.errors import CacheMissError
from streams.core.ids import QueueId, StreamId
from streams.core.options import StreamProviderOptions
from streams.core.tokens import SequenceToken

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
        covered = self.cache.covered_from()
        if token is not None and self._rewinder is not None and (covered is None or token.sequence_number < covered):
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
