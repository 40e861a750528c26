"""The subscriptions of one queue's active streams, changed while its agent runs.

A subscription made, resumed or removed while a worker runs reaches the pulling agent of
the stream's queue (``StreamProvider.subscribe``, ``handle.resume()``,
``handle.unsubscribe()``). An in-process observer's subscription is attached as it is; a
durable one's (a record in the pub-sub store) delivers to the activation of its consumer
type for the stream, made by the queue's :class:`~agents.catalog.Catalog`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from agents.activation import Activation
from agents.catalog import Catalog, StreamState
from agents.registry import ConsumerRegistry, InProcessSubscription
from streams.core.codec import interned
from streams.core.ids import StreamId
from streams.core.observer import as_observer
from streams.core.pubsub import SubscriptionRecord

# What a subscription is to an agent: an in-process observer's, or a durable record.
Subscription = InProcessSubscription | SubscriptionRecord


class QueueSubscriptions:
    """Attaches, resumes and removes subscriptions on the active streams of one queue."""

    __slots__ = ("_catalog", "_open_stream", "_registry", "_streams")

    def __init__(
        self,
        streams: Mapping[StreamId, StreamState],
        catalog: Catalog,
        registry: ConsumerRegistry,
        open_stream: Callable[[StreamId, str | None], Awaitable[StreamState]],
    ) -> None:
        self._streams = streams  # the agent's active streams
        self._catalog = catalog
        self._registry = registry
        self._open_stream = open_stream  # activates a stream, attaching all but the one named

    async def add(self, subscription: Subscription) -> None:
        """A subscription made while the agent runs: attach it now, from its token."""
        sid = interned(subscription.stream_id)  # the key object decoded batches bring
        state = self._streams.get(sid)
        if state is None:
            state = await self._open_stream(sid, subscription.subscription_id)
        await state.opened()
        if state.consumer(subscription.subscription_id) is not None:
            return
        await self._attach(state, sid, subscription)

    async def resume(self, subscription: Subscription, *, rewind: bool) -> None:
        """``handle.resume()``: the subscription delivers to its new observer (the one
        ``subscription`` names) from where its consumer here is, or, when ``rewind``, from
        the subscription's token. A subscription with no live consumer here (its stream not
        active, or the consumer faulted) is attached afresh, from its token."""
        sid = interned(subscription.stream_id)
        state = self._streams.get(sid)
        if state is not None:
            await state.opened()
        consumer = state.consumer(subscription.subscription_id) if state is not None else None
        if state is None or consumer is None or consumer.closed or rewind:
            if state is not None and consumer is not None:
                state.remove_consumer(subscription.subscription_id)
                consumer.close()  # a delivery in flight finishes first, to the old observer
            await self.add(subscription)
        elif isinstance(subscription, InProcessSubscription):
            consumer.replace_observer(as_observer(subscription.observer))
        else:
            activation = self._activation_of(state, sid, subscription)  # one per stream and type
            if activation is not consumer.observer:
                consumer.replace_observer(activation)

    def remove(self, stream_id: StreamId, subscription_id: str) -> None:
        """An unsubscribe: its consumer here stops (after a delivery in flight)."""
        state = self._streams.get(stream_id)
        if state is None:
            return
        consumer = state.remove_consumer(subscription_id)
        if consumer is not None:
            consumer.close()

    async def _attach(self, state: StreamState, sid: StreamId, subscription: Subscription) -> None:
        """Attach ``subscription`` to the active stream ``sid``, from its token."""
        consumers = self._catalog.consumers
        if isinstance(subscription, InProcessSubscription):
            consumer, miss = consumers.add(
                state,
                sid,
                subscription.subscription_id,
                as_observer(subscription.observer),
                subscription.token,
                start=False,
                event_filter=subscription.filter,
            )
        else:
            cls = self._registry.get_type(subscription.consumer_type)
            activation = self._catalog.activation(state, sid, cls)
            consumer, miss = consumers.add(
                state,
                sid,
                subscription.subscription_id,
                activation,
                subscription.start_token,
                start=False,
                durable=True,
                of_type=cls,
            )
        await consumers.start(consumer, miss)

    def _activation_of(self, state: StreamState, sid: StreamId, record: SubscriptionRecord) -> Activation:
        return self._catalog.activation(state, sid, self._registry.get_type(record.consumer_type))
