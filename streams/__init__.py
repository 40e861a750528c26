"""headrace: Orleans-style persistent streams on asyncio, feeding Apache Spark.

>>> from streams import StreamProvider, StreamId
>>> provider = StreamProvider.memory(queues=8)

The names below load on first use (PEP 562), as anyio's do: ``import streams`` (or
``streams.core.ids``, which a Spark executor needs) loads neither the provider nor the agents.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module that defines it
_HOMES = {
    "GeneratorConfig": "streams.backends.memory.adapter",
    "QueueAdapter": "streams.adapters.protocols",
    "QueueAdapterFactory": "streams.adapters.protocols",
    "QueueAdapterReceiver": "streams.adapters.protocols",
    "QueueMapper": "streams.adapters.protocols",
    "RewindableReceiver": "streams.adapters.protocols",
    "RecordFormat": "streams.core.records",
    "BatchContainer": "streams.core.batch",
    "BatchKind": "streams.core.batch",
    "Event": "streams.core.batch",
    "EventBatch": "streams.core.batch",
    "KeptEvents": "streams.core.batch",
    "QueueMessage": "streams.core.batch",
    "DeadLetter": "streams.core.deadletters",
    "DeadLetterStore": "streams.core.deadletters",
    "CacheMissError": "streams.core.errors",
    "ConfigurationError": "streams.core.errors",
    "DecodeError": "streams.core.errors",
    "DeliveryTimeoutError": "streams.core.errors",
    "EncodeError": "streams.core.errors",
    "HeadraceError": "streams.core.errors",
    "ProviderClosedError": "streams.core.errors",
    "PublishError": "streams.core.errors",
    "SubscriptionNotFoundError": "streams.core.errors",
    "QueueAdapterError": "streams.core.errors",
    "QueueFailedError": "streams.core.errors",
    "DeliveryFailure": "streams.core.observer",
    "StreamFailureHandler": "streams.core.observer",
    "QueueId": "streams.core.ids",
    "StreamId": "streams.core.ids",
    "StreamObserver": "streams.core.observer",
    "inline": "streams.core.observer",
    "StreamProviderOptions": "streams.core.options",
    "Durable": "streams.core.state",
    "Every": "streams.eventtime.windows",
    "StateError": "streams.core.state",
    "Timer": "streams.core.state",
    "Timers": "streams.core.state",
    "PubSubStore": "streams.core.pubsub",
    "SubscriptionRecord": "streams.core.pubsub",
    "SequenceToken": "streams.core.ids",
    "StreamProvider": "streams.runtime.provider",
    "Stream": "streams.runtime.stream",
    "StreamSubscriptionHandle": "streams.runtime.stream",
}

__all__ = [
    "BatchContainer",
    "BatchKind",
    "CacheMissError",
    "ConfigurationError",
    "DeadLetter",
    "DeadLetterStore",
    "DecodeError",
    "DeliveryFailure",
    "DeliveryTimeoutError",
    "Durable",
    "EncodeError",
    "Event",
    "EventBatch",
    "Every",
    "GeneratorConfig",
    "HeadraceError",
    "KeptEvents",
    "ProviderClosedError",
    "PublishError",
    "PubSubStore",
    "QueueAdapter",
    "QueueAdapterError",
    "QueueAdapterFactory",
    "QueueFailedError",
    "QueueAdapterReceiver",
    "QueueId",
    "QueueMapper",
    "QueueMessage",
    "RecordFormat",
    "RewindableReceiver",
    "SequenceToken",
    "StateError",
    "Stream",
    "StreamFailureHandler",
    "StreamId",
    "StreamObserver",
    "StreamProvider",
    "StreamProviderOptions",
    "StreamSubscriptionHandle",
    "SubscriptionNotFoundError",
    "SubscriptionRecord",
    "Timer",
    "Timers",
    "inline",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


if TYPE_CHECKING:  # the lazy names, for type checkers
    from streams.adapters.protocols import (
        QueueAdapter,
        QueueAdapterFactory,
        QueueAdapterReceiver,
        QueueMapper,
        RewindableReceiver,
    )
    from streams.backends.memory.adapter import GeneratorConfig
    from streams.core.batch import BatchContainer, BatchKind, Event, EventBatch, KeptEvents, QueueMessage
    from streams.core.deadletters import DeadLetter, DeadLetterStore
    from streams.core.errors import (
        CacheMissError,
        ConfigurationError,
        DecodeError,
        DeliveryTimeoutError,
        EncodeError,
        HeadraceError,
        ProviderClosedError,
        PublishError,
        QueueAdapterError,
        QueueFailedError,
        SubscriptionNotFoundError,
    )
    from streams.core.ids import QueueId, SequenceToken, StreamId
    from streams.core.observer import DeliveryFailure, StreamFailureHandler, StreamObserver
    from streams.core.options import StreamProviderOptions
    from streams.core.pubsub import PubSubStore, SubscriptionRecord
    from streams.core.records import RecordFormat
    from streams.core.state import Durable, StateError, Timer, Timers
    from streams.eventtime.windows import Every
    from streams.runtime.provider import StreamProvider
    from streams.runtime.stream import Stream, StreamSubscriptionHandle
