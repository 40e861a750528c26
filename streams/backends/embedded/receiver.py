"""The embedded queues' receiver: reads one queue for the pulling agent that owns it, through
its checkpointer (:mod:`~streams.backends.embedded.checkpointer`) persists what every consumer
has finished with, and applies the retention policy."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from functools import partial

from streams.adapters.protocols import CheckpointedState, ReceiverDefaults, StateKey
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.checkpointer import EmbeddedCheckpointer
from streams.backends.embedded.queue_tables import LeaseFence, retain, select_records
from streams.backends.embedded.store import EmbeddedStore
from streams.core.batch import QueueMessage
from streams.core.clock import wall_time
from streams.core.ids import QueueId, SequenceToken


class EmbeddedQueueReceiver(CheckpointedState, ReceiverDefaults):
    """Reads one embedded queue for the pulling agent that owns it.

    Its :class:`~streams.backends.embedded.checkpointer.EmbeddedCheckpointer` persists the
    acknowledgements (every ``checkpoint_persist_interval`` seconds or
    ``checkpoint_persist_every`` calls, and on :meth:`shutdown`) with the event-time state
    they rely on. The receiver also applies the retention policy to its queue every
    ``retention.interval``.

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
        self.checkpointer: EmbeddedCheckpointer = EmbeddedCheckpointer(
            store,
            queue,
            persist_interval=checkpoint_persist_interval,
            persist_every=checkpoint_persist_every,
            fence=fence,
        )
        self._retention = retention
        self._position = 0  # next sequence number to read
        self._next_retention = float("-inf")  # a first pass on the first read
        # The last read returned fewer records than asked: it reached the queue's tail as
        # that read's transaction saw it (the protocol's ``caught_up``).
        self.caught_up = False

    @property
    def checkpoint(self) -> int | None:
        """The last acknowledged sequence number (persisted or about to be)."""
        return self.checkpointer.acknowledged

    @property
    def fenced_out(self) -> bool:
        """A checkpoint was refused: the queue has a newer owner, and this receiver reads no more."""
        return self.checkpointer.fenced_out

    async def initialize(self) -> None:
        """Resume after the persisted checkpoint (from the oldest record when there is none)."""
        self._position = await self.checkpointer.resume()

    def saved_state(self, key: StateKey) -> tuple[SequenceToken, bytes] | None:
        """One activation's saved state, read now (:meth:`EmbeddedCheckpointer.saved_state`)."""
        return self.checkpointer.saved_state(key)

    def saved_states(self, keys: Collection[StateKey]) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The saved states of ``keys``, read now (:meth:`EmbeddedCheckpointer.saved_states`)."""
        return self.checkpointer.saved_states(keys)

    async def expire_states(self, consumer: str, before: float) -> int:
        """Delete ``consumer``'s durable states of this queue written before ``before``."""
        return await self.checkpointer.expire_states(consumer, before)

    async def get_queue_messages(self, max_count: int) -> list[QueueMessage]:
        if max_count <= 0 or not self._may_read():
            self.caught_up = False  # nothing was read: the tail is not known
            return []
        self.caught_up = False  # until this read returns (it may fail)
        now = time.monotonic()
        if now >= self.checkpointer.due_at:  # the interval since the last checkpoint has passed
            await self.checkpointer.persist_if_due()
        if self._retention is not None and now >= self._next_retention:
            self._next_retention = now + self._retention.interval
            await self._store.write(partial(retain, self.queue, self._retention, wall_time()))
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
        fence = self._fence
        if fence is None:
            return not self.fenced_out
        # Tenure.held, checked here: one comparison on every read, with no call to the balancer.
        tenure = fence.tenure
        return not self.fenced_out and tenure is not None and tenure.clock.monotonic() < tenure.held_until

    def positions(self, messages: Sequence[QueueMessage]) -> Iterable[int]:
        # A queue's records are numbered densely and retention takes only a prefix, so a
        # read's records are a run of consecutive positions.
        return range(messages[0].sequence_number, messages[-1].sequence_number + 1) if messages else ()

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        await self.checkpointer.acknowledge(tokens)

    async def shutdown(self) -> None:
        """Persist the last acknowledgement."""
        await self.checkpointer.persist()
