"""The Kafka receivers of a worker with a local state store: they serve parked durable states
by key from that store (a :class:`~streams.adapters.protocols.StateLookup`, as the embedded
store's receivers do), so the worker holds none of them in memory; the changelog keeps them
for whoever reads the queue next (see :mod:`~streams.backends.kafka.changelog`)."""

from __future__ import annotations

from collections.abc import Collection

from streams.adapters.protocols import LocalStates, StateKey
from streams.backends.kafka.changelog import KafkaChangelog
from streams.backends.kafka.record_receiver import KafkaRecordReceiver
from streams.backends.kafka.state_receiver import KafkaStateReceiver
from streams.core.errors import QueueAdapterError
from streams.core.ids import QueueId, SequenceToken


class LocalLookup:
    """Reads of one queue's states in the worker's local state store (opened by the queue's
    first load, which comes before any lookup).

    Example (a receiver of ``adapter.create_receiver`` on a worker)::

        saved = await receiver.load_states()  # the states a worker holds
        receiver.saved_states([("Device", "devices/d1")])  # a parked one, read from disk
    """

    changelog: KafkaChangelog
    queue: QueueId

    def _local(self) -> LocalStates:
        local = self.changelog.local
        if local is None:  # the agent loads before it looks up
            raise QueueAdapterError(f"{self.queue}: no local state store is open (its states are not loaded)")
        return local

    def saved_state(self, key: StateKey) -> tuple[SequenceToken, bytes] | None:
        """One parked state, read now from the local store."""
        return self.changelog.saved_states(self.queue, (key,)).get(key)

    def saved_states(self, keys: Collection[StateKey]) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The parked states of ``keys`` (a key without one left out), read now together
        (:meth:`~streams.backends.kafka.changelog.KafkaChangelog.saved_states`)."""
        return self.changelog.saved_states(self.queue, keys)

    async def expire_states(self, consumer: str, before: float) -> int:
        """Delete ``consumer``'s durable states of this queue written before ``before``: a
        tombstone each in the changelog, then from the local store; how many (0 while the
        changelog cannot be written: the next sweep tries again)."""
        self._local()
        return await self.changelog.expire(self.queue, consumer, before)


class KafkaLocalStateReceiver(LocalLookup, KafkaStateReceiver):
    """A :class:`~streams.backends.kafka.state_receiver.KafkaStateReceiver` that looks parked
    states up in the local state store."""


class KafkaLocalRecordReceiver(LocalLookup, KafkaRecordReceiver):
    """A :class:`~streams.backends.kafka.record_receiver.KafkaRecordReceiver` that looks parked
    states up in the local state store."""
