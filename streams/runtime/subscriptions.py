"""A provider's subscriptions (Orleans' ``StreamSubscriptionManager``): made, resumed,
listed and removed through stream handles, and followed when another process makes them.

An in-process observer's subscription lives in this process's registry; a consumer type's
is a durable record in the pub-sub store, which whichever worker reads the stream's queue
delivers to. Either takes effect at once in a worker here that reads the stream's queue
(its agent's :class:`~agents.subscriptions.QueueSubscriptions`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Protocol

from agents.pulling_agent import PullingAgent, new_subscription_id
from agents.registry import ConsumerRegistry, InProcessSubscription
from streams.adapters.protocols import QueueAdapter
from streams.core.errors import ConfigurationError, SubscriptionNotFoundError
from streams.core.ids import SequenceToken, StreamId
from streams.core.observer import EventFilter, as_observer, is_coroutine_function
from streams.core.pubsub import PubSubStore, SubscriptionRecord, SubscriptionState
from streams.runtime.stream import StreamSubscriptionHandle

log = logging.getLogger("headrace.provider")


def check_token(token: object) -> None:
    """Refuse a token that is not a :class:`SequenceToken` (a bare int, say) at once."""
    if token is not None and not isinstance(token, SequenceToken):
        raise TypeError(f"token is a SequenceToken, not {type(token).__name__}")


def check_filter(event_filter: object, *, durable: bool) -> None:
    """Refuse a filter that could never work, at subscribe rather than at every event.

    >>> async def vip(event): return event.value["vip"]
    >>> check_filter(vip, durable=False)
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: a stream filter is a plain function of one event returning a bool; vip is async (its coroutine would count as true and keep every event)
    """
    if not callable(event_filter):
        raise ConfigurationError(f"a stream filter is a function of one event, not {event_filter!r}")
    if is_coroutine_function(event_filter):
        name = getattr(event_filter, "__qualname__", repr(event_filter))
        raise ConfigurationError(
            f"a stream filter is a plain function of one event returning a bool; {name} is async "
            "(its coroutine would count as true and keep every event)"
        )
    if durable:
        # A durable subscription is delivered by whichever worker reads its stream, after
        # restarts too: its record would have to carry the function, which it cannot.
        raise ConfigurationError(
            "a durable subscription (a @provider.consumer() type) takes no filter: the worker "
            "that reads the stream cannot rebuild a function from the subscription's record. "
            "Filter in the type's on_next, or subscribe an in-process observer with the filter"
        )


class SubscriptionHost(Protocol):
    """What the subscriptions need of their provider (``StreamProvider``)."""

    registry: ConsumerRegistry
    pubsub: PubSubStore

    @property
    def running(self) -> bool: ...

    @property
    def is_worker(self) -> bool: ...

    def require_running(self, what: str) -> QueueAdapter: ...

    def local_agent(self, stream_id: StreamId) -> PullingAgent | None: ...


class StreamSubscriptionManager:
    """The subscriptions of one provider (see the module's docstring)."""

    def __init__(self, host: SubscriptionHost) -> None:
        self._host = host

    async def changed(self, made: list[SubscriptionRecord], removed: list[SubscriptionRecord]) -> None:
        """Subscriptions made, changed or removed by another process: attach, resume or
        detach them where their stream's queue is read here. A changed one was resumed
        there (``handle.resume``): its consumer here goes on from where it is, with the
        type the record names now (one it has already, unchanged, is left as it is)."""
        for record in removed:
            agent = self._host.local_agent(record.stream_id)
            if agent is not None:
                agent.subscriptions.remove(record.stream_id, record.subscription_id)
        for record in made:
            agent = self._host.local_agent(record.stream_id)
            if agent is None:
                continue
            try:
                await agent.subscriptions.resume(record, rewind=False)
            except Exception:  # the queue moving away meanwhile, or worse: logged, not fatal
                log.exception("attaching subscription %s of %s failed", record.subscription_id, record.stream_id)

    async def subscribe(
        self,
        stream_id: StreamId,
        observer: Any,
        token: SequenceToken | None,
        event_filter: EventFilter | None = None,
    ) -> StreamSubscriptionHandle:
        check_token(token)
        subscription_id = new_subscription_id()
        subscription: InProcessSubscription | SubscriptionRecord
        type_name = self._host.registry.type_name(observer) if isinstance(observer, type) else None
        if event_filter is not None:
            check_filter(event_filter, durable=type_name is not None)
        if type_name is not None:
            self._host.require_running("a durable subscription")
            subscription = SubscriptionRecord(subscription_id, stream_id, type_name, token)
            await self._host.pubsub.add_subscription(subscription)
        else:
            self._check_observer(observer)
            if self._host.running and not self._host.is_worker:
                log.warning(
                    "%s: an in-process observer subscribed through provider.client() receives "
                    "nothing in this process: a client reads no queue. Subscribe it in a worker "
                    "(async with provider), or subscribe a @provider.consumer() type, which the "
                    "worker reading the stream delivers to",
                    stream_id,
                )
            subscription = InProcessSubscription(subscription_id, stream_id, observer, token, event_filter)
            self._host.registry.add_observer(subscription)
        agent = self._host.local_agent(stream_id)
        if agent is not None:
            await agent.subscriptions.add(subscription)
        return StreamSubscriptionHandle(self, stream_id, subscription_id, type_name is not None)

    def _check_observer(self, observer: Any) -> None:
        """Refuse what cannot be an in-process observer now, not at the first delivery."""
        if isinstance(observer, type):
            raise ConfigurationError(
                f"{observer.__qualname__} is a class that is not a registered consumer type; "
                "decorate it with @provider.consumer() or pass an instance"
            )
        as_observer(observer)

    async def resume(
        self, handle: StreamSubscriptionHandle, observer: Any, token: SequenceToken | None
    ) -> StreamSubscriptionHandle:
        check_token(token)
        sid, subscription_id = handle.stream_id, handle.subscription_id
        subscription: InProcessSubscription | SubscriptionRecord
        if handle.durable:
            self._host.require_running("resuming a durable subscription")
            type_name = self._host.registry.type_name(observer) if isinstance(observer, type) else None
            if type_name is None:
                raise ConfigurationError(
                    f"a durable subscription resumes with a consumer type registered with "
                    f"@provider.consumer(), not {observer!r}: its record names the type, so that "
                    "whichever worker reads the stream can build it"
                )
            record = next(
                (r for r in await self._host.pubsub.subscriptions(sid) if r.subscription_id == subscription_id), None
            )
            if record is None:
                raise SubscriptionNotFoundError(f"subscription {subscription_id} of {sid} no longer exists")
            subscription = replace(
                record,
                consumer_type=type_name,
                start_token=token,  # where a consumer attached afresh starts (None: from now)
                state=SubscriptionState.ACTIVE,  # a faulted one delivers again
            )
            await self._host.pubsub.add_subscription(subscription)  # replaces the record
        else:
            old = next((s for s in self._host.registry.observers(sid) if s.subscription_id == subscription_id), None)
            if old is None:
                raise SubscriptionNotFoundError(f"subscription {subscription_id} of {sid} no longer exists")
            self._check_observer(observer)
            subscription = replace(old, observer=observer, token=token)
            self._host.registry.add_observer(subscription)  # replaces the old one
        agent = self._host.local_agent(sid)
        if agent is not None:
            await agent.subscriptions.resume(subscription, rewind=token is not None)
        return StreamSubscriptionHandle(self, sid, subscription_id, handle.durable)

    async def unsubscribe(self, handle: StreamSubscriptionHandle) -> None:
        if handle.durable:
            await self._host.pubsub.remove_subscription(handle.subscription_id)
        else:
            self._host.registry.remove_observer(handle.stream_id, handle.subscription_id)
        agent = self._host.local_agent(handle.stream_id)
        if agent is not None:
            agent.subscriptions.remove(handle.stream_id, handle.subscription_id)

    async def handles(self, stream_id: StreamId) -> list[StreamSubscriptionHandle]:
        handles = [
            StreamSubscriptionHandle(self, stream_id, s.subscription_id, False)
            for s in self._host.registry.observers(stream_id)
        ]
        for record in await self._host.pubsub.subscriptions(stream_id):
            handles.append(StreamSubscriptionHandle(self, stream_id, record.subscription_id, True))
        return handles
