"""A stream handle: the producer side (``on_next``) and the consumer side (``subscribe``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from streams.core.batch import BatchKind, to_seconds
from streams.core.errors import EncodeError
from streams.core.ids import SequenceToken, StreamId
from streams.core.observer import EventFilter
from streams.runtime.publisher import Publisher

# An instant of event time as producers give it: POSIX seconds or an aware datetime (None:
# none given). Not `streams.eventtime.EventTime`, which is a consumer type's declaration.
Instant = float | int | datetime | None


class Subscriptions(Protocol):
    """What a stream handle and a subscription handle ask of their provider's subscriptions
    (:class:`~streams.runtime.subscriptions.StreamSubscriptionManager` is the one)."""

    async def subscribe(
        self, stream_id: StreamId, observer: Any, token: SequenceToken | None, event_filter: EventFilter | None = ...
    ) -> StreamSubscriptionHandle: ...

    async def resume(
        self, handle: StreamSubscriptionHandle, observer: Any, token: SequenceToken | None
    ) -> StreamSubscriptionHandle: ...

    async def unsubscribe(self, handle: StreamSubscriptionHandle) -> None: ...

    async def handles(self, stream_id: StreamId) -> list[StreamSubscriptionHandle]: ...


class InternalStreamProvider(Protocol):
    """What a stream handle asks of its provider (Orleans' ``IInternalStreamProvider``):
    :class:`~streams.runtime.provider.StreamProvider` is the one."""

    _publisher: Publisher | None

    @property
    def subscriptions(self) -> Subscriptions: ...

    def _require_publisher(self, what: str = ...) -> Publisher: ...


class StreamSubscriptionHandle:
    """Returned by :meth:`Stream.subscribe` and :meth:`Stream.get_all_subscription_handles`:
    ``unsubscribe()`` ends the subscription, ``resume(observer)`` gives it a new observer.

    Two handles of one subscription are equal and hash alike (Orleans' handles compare by
    stream and subscription id), however each was obtained; ``durable`` is whether its
    subscription is a consumer type's record in the pub-sub store.

    >>> import anyio
    >>> from streams import StreamProvider
    >>> async def main():
    ...     async with StreamProvider.memory(queues=1) as provider:
    ...         stream = provider.get_stream(StreamId("ns", "k"))
    ...         handle = await stream.subscribe(print)
    ...         return [handle] == await stream.get_all_subscription_handles()
    >>> anyio.run(main)
    True
    """

    def __init__(self, subscriptions: Subscriptions, stream_id: StreamId, subscription_id: str, durable: bool) -> None:
        self._subscriptions = subscriptions
        self.stream_id = stream_id
        self.subscription_id = subscription_id
        self.durable = durable

    async def unsubscribe(self) -> None:
        await self._subscriptions.unsubscribe(self)

    async def resume(self, observer: Any, token: SequenceToken | None = None) -> StreamSubscriptionHandle:
        """Deliver this subscription to ``observer`` from now on (Orleans' ``ResumeAsync``):
        from where the subscription is (nothing skipped, nothing repeated), or from
        ``token`` (a rewind, as :meth:`Stream.subscribe`'s). The subscription keeps its id,
        its filter and its kind; a faulted one delivers again. Returns a handle equal to
        this one.

        A durable subscription resumes with a consumer type registered with
        ``@provider.consumer()`` (its record is updated, so it holds after a restart); an
        in-process one with any observer. It takes effect at once in a worker that reads
        the stream's queue. A durable one resumed from another process: on Kafka, the
        worker reading the stream follows within about a second, from where its consumer
        is (a token is not replayed there); on an embedded store, when a worker next
        activates the stream. A subscription that is gone raises
        :class:`~streams.core.errors.SubscriptionNotFoundError`.

        >>> async def hand_over(stream, new_observer):
        ...     for handle in await stream.get_all_subscription_handles():
        ...         if not handle.durable:
        ...             await handle.resume(new_observer)  # the old observer gets no more
        """
        return await self._subscriptions.resume(self, observer, token)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamSubscriptionHandle):
            return NotImplemented
        return (self.stream_id, self.subscription_id) == (other.stream_id, other.subscription_id)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.subscription_id))

    def __repr__(self) -> str:
        return f"StreamSubscriptionHandle({self.stream_id!r}, {self.subscription_id!r})"


class Stream:
    """One stream of a provider.

    >>> async def publish(provider):
    ...     stream = provider.get_stream(StreamId("sensors", "s-1"))
    ...     await stream.on_next({"temp": 21.5}, event_time=1_700_000_000.0)
    """

    def __init__(self, provider: InternalStreamProvider, stream_id: StreamId) -> None:
        self._provider = provider
        self.stream_id = stream_id

    def __repr__(self) -> str:
        return f"Stream({self.stream_id!r})"

    # -- producing -------------------------------------------------------------------
    async def on_next(self, value: Any, *, event_time: Instant = None) -> None:
        """Publish one event. Returns once the queue has accepted it (durably, on a durable
        queue); concurrent calls share a write, and on one stream a batch container.

        ``event_time`` is POSIX seconds or an aware datetime; without it the event time is
        the arrival time. A value msgpack cannot encode raises :class:`EncodeError` and
        nothing is enqueued.
        """
        times = None if event_time is None else [to_seconds(event_time)]
        await self._publish(BatchKind.DATA, [value], times)

    async def send(self, value: Any, *, event_time: Instant = None) -> None:
        """Publish one event without waiting for it to be written: it is buffered, with
        this stream's other events, into batch containers written in the background (a
        few milliseconds later). Returns at once unless the buffer is full. Events stay in
        order with this stream's others; ``await provider.flush()`` waits until all are
        durable and raises :class:`~streams.core.errors.PublishError` for any that were not.
        A value that cannot be encoded counts as failed there.
        """
        publisher = self._provider._publisher
        if publisher is None:
            publisher = self._provider._require_publisher()
        await publisher.send(self.stream_id, value, None if event_time is None else to_seconds(event_time))

    async def on_next_batch(self, values: Iterable[Any], *, event_times: Sequence[Instant] | None = None) -> None:
        """Publish several events as one batch container (one queue record)."""
        values = list(values)
        times = self._times(values, event_times, "on_next_batch")
        if values:
            publisher = self._provider._require_publisher()
            await publisher.add(self.stream_id, BatchKind.DATA, values, times, wait=True, whole=True)

    async def send_batch(self, values: Iterable[Any], *, event_times: Sequence[Instant] | None = None) -> None:
        """:meth:`on_next_batch` without waiting for the write (see :meth:`send`); a value
        that cannot be encoded raises :class:`EncodeError` here, and nothing is buffered."""
        values = list(values)
        times = self._times(values, event_times, "send_batch")
        if values:
            publisher = self._provider._require_publisher()
            await publisher.add(self.stream_id, BatchKind.DATA, values, times, wait=False, whole=True)

    @staticmethod
    def _times(values: list[Any], event_times: Sequence[Instant] | None, what: str) -> list[float | None] | None:
        if event_times is None:
            return None
        if len(event_times) != len(values):
            raise EncodeError(f"{what} got {len(values)} values and {len(event_times)} event times")
        return [to_seconds(t) for t in event_times]

    async def advance_time(self, watermark: Instant) -> None:
        """Publish punctuation (a StreamInsight CTI): no event with an earlier event time is
        expected any more. It travels in the queue, in order with the events."""
        await self._publish(BatchKind.WATERMARK, [to_seconds(watermark)], None)

    async def on_completed(self) -> None:
        """End the stream: every consumer's ``on_completed`` runs after all earlier events."""
        await self._publish(BatchKind.COMPLETED, [], None)

    async def _publish(self, kind: BatchKind, values: list[Any], times: list[float | None] | None) -> None:
        """Write in order with this stream's sent events, and return once written."""
        publisher = self._provider._require_publisher()
        await publisher.add(self.stream_id, kind, values, times, wait=True)

    # -- consuming -------------------------------------------------------------------
    async def subscribe(
        self, observer: Any, token: SequenceToken | None = None, *, filter: EventFilter | None = None
    ) -> StreamSubscriptionHandle:
        """Subscribe an observer, from ``token`` if given (a rewind), else from now.

        ``observer`` is a callable taking a batch (sync or async), an object with
        ``on_next(batch)`` and optionally ``on_error``, ``on_completed``, ``on_watermark``;
        or a consumer type registered with ``@provider.consumer()``, which makes a durable
        subscription kept in the pub-sub store.

        ``filter`` (Orleans' stream filter; in-process observers only) is a plain function
        of one :class:`~streams.core.batch.Event`: the observer gets only the events for
        which it returns a true value (taken by truth value, as Python's ``filter()`` does),
        as :class:`~streams.core.batch.KeptEvents`, and nothing for a batch it keeps none
        of. It runs in the subscription's delivery on the worker. An event it raises on, or
        returns an awaitable or a value with no truth value for, is dead-lettered
        ``filter_failed`` with the traceback (the first of a run logged) and the other
        events go on. An ``async def`` filter is refused here, and so is a filter on a
        durable subscription (a worker elsewhere could not rebuild it from the record).

        An in-process observer delivers in this process only, from the queues its worker
        reads: subscribed through ``provider.client()`` (no worker) it receives nothing,
        which one warning says at subscribe.

        >>> async def follow_vips(provider, seen):
        ...     stream = provider.get_stream(StreamId("clicks", "u-1"))
        ...     return await stream.subscribe(seen.extend, filter=lambda e: e.value.get("vip"))
        """
        return await self._provider.subscriptions.subscribe(self.stream_id, observer, token, filter)

    async def get_all_subscription_handles(self) -> list[StreamSubscriptionHandle]:
        """A handle of each subscription of this stream: its in-process observers in this
        process, and the durable subscriptions in the pub-sub store."""
        return await self._provider.subscriptions.handles(self.stream_id)
