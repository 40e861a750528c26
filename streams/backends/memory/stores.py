"""Pub-sub and dead letters in this process's memory: the memory backend's stores."""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import replace

from streams.core.deadletters import DeadLetter, letter_key
from streams.core.ids import StreamId
from streams.core.pubsub import SubscriptionRecord, SubscriptionState, by_stream


class MemoryDeadLetterStore:
    """A :class:`DeadLetterStore` in this process's memory.

    >>> import anyio
    >>> store = MemoryDeadLetterStore()
    >>> again = DeadLetter("undecodable", queue=0, sequence_number=9, payload=b"x")
    >>> anyio.run(store.add, [again, again])
    >>> anyio.run(store.count)
    1
    """

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []
        self._keys: set[Hashable] = set()

    async def add(self, letters: list[DeadLetter]) -> None:
        keys = self._keys
        for letter in letters:
            key = letter_key(letter)
            if key is not None:
                if key in keys:
                    continue
                keys.add(key)
            self.letters.append(letter)

    async def list(self, reason: str | None = None, limit: int = 100) -> list[DeadLetter]:
        return [x for x in self.letters if reason is None or x.reason == reason][:limit]

    async def count(self, reason: str | None = None) -> int:
        return sum(1 for x in self.letters if reason is None or x.reason == reason)


class MemoryPubSubStore:
    """A :class:`PubSubStore` in this process's memory."""

    def __init__(self) -> None:
        self._records: dict[str, SubscriptionRecord] = {}

    async def add_subscription(self, record: SubscriptionRecord) -> None:
        self._records[record.subscription_id] = record

    async def remove_subscription(self, subscription_id: str) -> None:
        self._records.pop(subscription_id, None)

    async def fault_subscription(self, subscription_id: str) -> None:
        record = self._records.get(subscription_id)
        if record is not None:
            self._records[subscription_id] = replace(record, state=SubscriptionState.FAULTED)

    async def subscriptions(self, stream_id: StreamId | None = None) -> list[SubscriptionRecord]:
        return [r for r in self._records.values() if stream_id is None or r.stream_id == stream_id]

    async def subscriptions_of(self, stream_ids: Collection[StreamId]) -> dict[StreamId, list[SubscriptionRecord]]:
        return by_stream(self._records.values(), stream_ids)
