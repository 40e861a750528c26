"""headrace: Orleans-style persistent streams on asyncio, feeding Apache Spark.

>>> from streams import StreamProvider, StreamId
>>> provider = StreamProvider.memory(queues=8)
"""

from streams.adapters.generator import GeneratorConfig
from streams.adapters.protocols import (
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
    QueueMapper,
    RewindableReceiver,
)
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
from streams.provider import StreamProvider
from streams.stream import Stream, StreamSubscriptionHandle

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
