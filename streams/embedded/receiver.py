"""The embedded queues' receiver: reads one queue for the pulling agent that owns it,
checkpoints what every consumer has finished with, and applies the retention policy."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial

from streams.adapters.protocols import StateKey, StateSource
from streams.adapters.retention import RetentionPolicy
from streams.core.batch import QueueMessage
from streams.core.ids import QueueId, SequenceToken
from streams.embedded.queues import (
    LeaseFence,
    read_checkpoint,
    retain,
    select_records,
    write_checkpoint_and_states,
)
from streams.embedded.state import read_states
from streams.embedded.store import EmbeddedStore

log = logging.getLogger("headrace.embedded")


class EmbeddedQueueReceiver:
    """Reads one embedded queue for the pulling agent that owns it.

    Acknowledgements are persisted as a checkpoint at most every
    ``checkpoint_persist_interval`` seconds or every ``checkpoint_persist_every`` calls
    (Orleans' checkpointer ``PersistInterval``), and on :meth:`shutdown`; after a crash the
    records acknowledged since the last persisted checkpoint are read again (at least once).
    The receiver also applies the retention policy to its queue every ``retention.interval``.

    With a ``fence`` (the lease it reads under), it reads only while its worker holds that
    lease, and a checkpoint is written only while the lease is still the queue's current
    one; once one is refused, :attr:`fenced_out` is set and the receiver reads nothing
    more: a stale owner never overwrites a newer one's checkpoint.
    """

    def __init__(
        self,
        store: EmbeddedStore,
        queue: QueueId,
        *,
        retention: RetentionPolicy | None = None,
        checkpoint_persist_interval: float = 0.2,
        checkpoint_persist_every: int = 1000,
        fence: LeaseFence | None = None,
    ) -> None:
        self.queue = queue
        self._store = store
        self._fence = fence
        self.fenced_out = False  # a checkpoint was refused: the queue has a newer owner
        self._retention = retention
        self._persist_interval = checkpoint_persist_interval
        self._persist_every = checkpoint_persist_every
        self._position = 0  # next sequence number to read
        self._acknowledged: int | None = None
        self._persisted: int | None = None
        self._acks_since_persist = 0
        self._last_persist = float("-inf")
        self._next_retention = float("-inf")  # a first pass on the first read
        # The last read returned fewer records than asked: it reached the queue's tail as
        # that read's transaction saw it (the protocol's ``caught_up``).
        self.caught_up = False
        # The event-time state saved with each checkpoint (set by the pulling agent).
        self.state_source: StateSource | None = None

    @property
    def checkpoint(self) -> int | None:
        """The last acknowledged sequence number (persisted or about to be)."""
        return self._acknowledged

    async def initialize(self) -> None:
        """Resume after the persisted checkpoint (from the oldest record when there is none)."""
        checkpoint = await self._store.read(partial(read_checkpoint, self.queue))
        self._acknowledged = self._persisted = checkpoint
        self._position = 0 if checkpoint is None else checkpoint + 1

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The activation states saved with this queue's checkpoint."""
        return await self._store.read(partial(read_states, self.queue.number))

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        if max_count <= 0 or not self._may_read():
            self.caught_up = False  # nothing was read: the tail is not known
            return []
        self.caught_up = False  # until this read returns (it may fail)
        now = time.monotonic()
        if self._checkpoint_due(now):
            await self._persist_checkpoint(now)
        if self._retention is not None and now >= self._next_retention:
            self._next_retention = now + self._retention.interval
            await self._store.write(partial(retain, self.queue, self._retention, time.time()))
        messages = await self.read_range(self._position, max_count)
        if messages:
            self._position = messages[-1].sequence_number + 1
        self.caught_up = len(messages) < max_count
        return messages

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        """Up to ``max_count`` records from ``start_sequence`` (or the oldest retained one
        after it), without moving the read position: rewinds and cursor catch-up."""
        if max_count <= 0 or not self._may_read():
            return []
        return await self._store.read(partial(select_records, self.queue, start_sequence, max_count))

    def _may_read(self) -> bool:
        return not self.fenced_out and (self._fence is None or self._fence.held())

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        if not tokens:
            return
        last = max(token.sequence_number for token in tokens)
        if self._acknowledged is not None and last <= self._acknowledged:
            return
        self._acknowledged = last
        self._acks_since_persist += 1
        now = time.monotonic()
        if self._checkpoint_due(now):
            await self._persist_checkpoint(now)

    def _checkpoint_due(self, now: float) -> bool:
        if self._acknowledged == self._persisted and not self._states_pending():
            return False
        return now - self._last_persist >= self._persist_interval or self._acks_since_persist >= self._persist_every

    async def _persist_checkpoint(self, now: float) -> None:
        seq = self._acknowledged
        if self.fenced_out or (seq == self._persisted and not self._states_pending()):
            return
        source = self.state_source
        rows = source.collect() if source is not None else None
        try:
            ok = await self._store.write(partial(write_checkpoint_and_states, self.queue, seq, self._fence, rows))
        except BaseException:
            if source is not None:
                source.written(False)
            raise
        if source is not None:
            source.written(ok)
        if not ok:
            self.fenced_out = True
            log.warning(
                "%s: checkpoint %s refused: this worker's lease on the queue has ended and "
                "another worker may own it; this receiver stops reading",
                self.queue,
                seq,
            )
            return
        self._persisted = seq
        self._acks_since_persist = 0
        self._last_persist = now

    def _states_pending(self) -> bool:
        return self.state_source is not None and self.state_source.pending()

    async def shutdown(self) -> None:
        """Persist the last acknowledgement."""
        await self._persist_checkpoint(time.monotonic())
