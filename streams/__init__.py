"""headrace: Orleans-style persistent streams on asyncio, feeding Apache Spark.

>>> from streams import StreamProvider, StreamId
>>> provider = StreamProvider.memory(queues=8)
"""

import importlib
from typing import Any

from streams.core.batch import BatchContainer, BatchKind, Event, EventBatch, QueueMessage
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
)
from streams.core.failures import DeliveryFailure, StreamFailureHandler
from streams.core.ids import QueueId, StreamId
from streams.core.observer import StreamObserver
from streams.core.options import StreamProviderOptions
from streams.core.pubsub import PubSubStore, SubscriptionRecord
from streams.core.records import RecordFormat
from streams.core.tokens import SequenceToken

# The rest loads on first use (PEP 562): a Spark executor or a tool that needs only the
# floor (ids, errors, the store) does not pay for the provider, adapters, agents or aiokafka.
_HOMES = {
    "GeneratorConfig": "streams.adapters.generator",
    "QueueAdapter": "streams.adapters.protocols",
    "QueueAdapterFactory": "streams.adapters.protocols",
    "QueueAdapterReceiver": "streams.adapters.protocols",
    "QueueMapper": "streams.adapters.protocols",
    "RewindableReceiver": "streams.adapters.protocols",
    "StreamProvider": "streams.provider",
    "Stream": "streams.stream",
    "StreamSubscriptionHandle": "streams.stream",
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
    "EncodeError",
    "Event",
    "EventBatch",
    "GeneratorConfig",
    "HeadraceError",
    "ProviderClosedError",
    "PublishError",
    "PubSubStore",
    "QueueAdapter",
    "QueueAdapterError",
    "QueueAdapterFactory",
    "QueueAdapterReceiver",
    "QueueId",
    "QueueMapper",
    "QueueMessage",
    "RecordFormat",
    "RewindableReceiver",
    "SequenceToken",
    "Stream",
    "StreamFailureHandler",
    "StreamId",
    "StreamObserver",
    "StreamProvider",
    "StreamProviderOptions",
    "StreamSubscriptionHandle",
    "SubscriptionRecord",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
