"""Pub-sub: who consumes which stream.

Implicit subscriptions are a registry of consumer types by namespace (like Orleans'
``[ImplicitStreamSubscription]``). Explicit subscriptions of a consumer *type* are durable
records in a :class:`PubSubStore`, so they survive restarts and follow the queue when it
moves. In-process observers are not stored: they live as long as the process.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from streams.core.ids import SequenceToken, StreamId


class SubscriptionState(enum.Enum):
    ACTIVE = "active"
    FAULTED = "faulted"


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """A durable explicit subscription: this consumer type reads this stream from this token."""

    subscription_id: str
    stream_id: StreamId
    consumer_type: str
    start_token: SequenceToken | None = None
    state: SubscriptionState = SubscriptionState.ACTIVE


class PubSubStore(Protocol):
    """Where durable subscriptions live (memory for tests, the embedded store, ...)."""

    async def add_subscription(self, record: SubscriptionRecord) -> None: ...

    async def remove_subscription(self, subscription_id: str) -> None: ...

    async def fault_subscription(self, subscription_id: str) -> None: ...

    async def subscriptions(self, stream_id: StreamId | None = None) -> list[SubscriptionRecord]:
        """The records of one stream, or of every stream."""
        ...

    async def subscriptions_of(self, stream_ids: Collection[StreamId]) -> dict[StreamId, list[SubscriptionRecord]]:
        """The records of each of ``stream_ids`` (a stream without any is left out), in one
        read: a worker asks once for all the streams one queue read brings it first."""
        ...


def by_stream(
    records: Iterable[SubscriptionRecord], wanted: Collection[StreamId]
) -> dict[StreamId, list[SubscriptionRecord]]:
    """``records`` of the streams in ``wanted``, by stream, in their order.

    >>> a, b = StreamId("s", "a"), StreamId("s", "b")
    >>> found = by_stream([SubscriptionRecord("1", a, "T"), SubscriptionRecord("2", b, "T")], {a})
    >>> [(str(sid), [r.subscription_id for r in records]) for sid, records in found.items()]
    [('s/a', ['1'])]
    """
    found: dict[StreamId, list[SubscriptionRecord]] = {}
    wanted = wanted if isinstance(wanted, (set, frozenset)) else set(wanted)
    for record in records:
        if record.stream_id in wanted:
            found.setdefault(record.stream_id, []).append(record)
    return found


# What changed since the last call: subscriptions made (or made active again), and those
# removed (or faulted).
SubscriptionChanges = Callable[[list[SubscriptionRecord], list[SubscriptionRecord]], Awaitable[None]]


@runtime_checkable
class FollowedPubSubStore(PubSubStore, Protocol):
    """A store other processes write to that says what they changed (the Kafka topic's):
    the provider attaches a subscription made elsewhere to a stream already active here."""

    async def follow(self, changed: SubscriptionChanges) -> None:
        """Call ``changed`` with what others changed, until cancelled."""
        ...
