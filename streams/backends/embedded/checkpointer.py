"""The embedded queues' checkpointer: what a queue's consumers have finished with, persisted in
the store with the event-time state it relies on (Orleans' ``IStreamQueueCheckpointer``).

Acknowledgements are persisted as a checkpoint at most every ``persist_interval`` seconds or
every ``persist_every`` acknowledgements (Orleans' checkpointer ``PersistInterval``), and on
:meth:`EmbeddedCheckpointer.persist` when asked; after a crash the records acknowledged since
the last persisted checkpoint are read again (at least once). The activation states
collected from :attr:`~EmbeddedCheckpointer.state_source` are written in the same
transaction as the checkpoint, so a checkpoint that passes an open window always lands with
the state of that window.

With a ``fence`` (the lease its receiver reads under), a checkpoint is written only while the
lease is still the queue's current one; once one is refused, :attr:`~EmbeddedCheckpointer.fenced_out`
is set and nothing more is written: a stale owner never overwrites a newer one's checkpoint.

>>> import anyio, tempfile
>>> from streams.core.ids import QueueId, SequenceToken
>>> from streams.backends.embedded.store import EmbeddedStore
>>> from streams.backends.embedded.queue_tables import QUEUE_SCHEMA, STATE_AREA, STATE_SCHEMA
>>> async def main():
...     with EmbeddedStore(tempfile.mkdtemp()) as store:
...         store.require_schema("queue", QUEUE_SCHEMA)
...         store.require_schema(STATE_AREA, STATE_SCHEMA)
...         checkpointer = EmbeddedCheckpointer(store, QueueId(0), persist_interval=0.0)
...         await checkpointer.acknowledge([SequenceToken(4, 0)])
...         return await EmbeddedCheckpointer(store, QueueId(0)).resume()
>>> anyio.run(main)
5
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from functools import partial

from streams.adapters.protocols import StateKey, StateSource
from streams.backends.embedded.queue_tables import (
    LeaseFence,
    expire_states,
    read_checkpoint,
    read_states,
    saved_state,
    saved_states,
    write_checkpoint_and_states,
)
from streams.backends.embedded.store import EmbeddedStore
from streams.core.ids import QueueId, SequenceToken

log = logging.getLogger("headrace.embedded")


class EmbeddedCheckpointer:
    """One queue's checkpoint and the activation states saved with it, in the embedded store."""

    def __init__(
        self,
        store: EmbeddedStore,
        queue: QueueId,
        *,
        persist_interval: float = 0.2,
        persist_every: int = 1000,
        fence: LeaseFence | None = None,
    ) -> None:
        self.queue = queue
        self._store = store
        self._fence = fence
        self.fenced_out = False  # a checkpoint was refused: the queue has a newer owner
        self._persist_interval = persist_interval
        self._persist_every = persist_every
        self.acknowledged: int | None = None  # the last acknowledged sequence number
        self._persisted: int | None = None
        self._acks_since_persist = 0
        self._last_persist = float("-inf")
        # From when (time.monotonic()) the interval lets a checkpoint be written: the receiver
        # compares this on each read, and calls persist_if_due only from then on.
        self.due_at = float("-inf")
        # The event-time state saved with each checkpoint (set by the pulling agent).
        self.state_source: StateSource | None = None

    async def resume(self) -> int:
        """Read the persisted checkpoint; the sequence number to read from after it (0 when
        there is none: from the oldest record)."""
        checkpoint = await self._store.read(partial(read_checkpoint, self.queue))
        self.acknowledged = self._persisted = checkpoint
        return 0 if checkpoint is None else checkpoint + 1

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The activation states saved with this queue's checkpoint (but the durable units
        :meth:`saved_state` looks up when their stream has data)."""
        return await self._store.read(partial(read_states, self.queue.number))

    def saved_state(self, key: StateKey) -> tuple[SequenceToken, bytes] | None:
        """One activation's saved state, read now (a point read by primary key: this blocks
        for well under a millisecond, and only when a stream of a durable type activates)."""
        with self._store.connection() as conn:
            return saved_state(self.queue.number, key, conn)

    def saved_states(self, keys: Collection[StateKey]) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The saved states of ``keys`` (a key without one is left out), read now in one
        query per consumer type and ``KEYS_PER_QUERY`` streams."""
        with self._store.connection() as conn:
            return saved_states(self.queue.number, keys, conn)

    async def expire_states(self, consumer: str, before: float) -> int:
        """Delete ``consumer``'s durable states of this queue written before ``before``."""
        if self.fenced_out:
            return 0
        return await self._store.write(partial(expire_states, self.queue.number, consumer, before))

    async def acknowledge(self, tokens: Sequence[SequenceToken]) -> None:
        """The consumers have finished with these positions: persisted when due."""
        if not tokens:
            return
        # The pulling agent's tokens are in queue order (agents.checkpoint.Tokens.ascending):
        # the newest is the last, read without making a token for every record.
        ascending = getattr(tokens, "ascending", False)
        last = tokens[-1].sequence_number if ascending else max(token.sequence_number for token in tokens)
        if self.acknowledged is not None and last <= self.acknowledged:
            return
        self.acknowledged = last
        self._acks_since_persist += 1
        await self.persist_if_due()

    async def persist_if_due(self) -> None:
        """Persist what is acknowledged (and the pending states) if the interval or the count
        of acknowledgements since the last persist says so."""
        if self._unpersisted():
            now = time.monotonic()
            if now - self._last_persist >= self._persist_interval or self._acks_since_persist >= self._persist_every:
                await self.persist(now)

    def _unpersisted(self) -> bool:
        pending = self.state_source is not None and self.state_source.pending()
        return self.acknowledged != self._persisted or pending

    async def persist(self, now: float | None = None) -> None:
        """Write the checkpoint and the pending states now, in one transaction, while the
        lease holds (a refusal sets :attr:`fenced_out`)."""
        seq = self.acknowledged
        if self.fenced_out or not self._unpersisted():
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
        self._last_persist = time.monotonic() if now is None else now
        self.due_at = self._last_persist + self._persist_interval
