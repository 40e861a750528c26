"""headrace: Orleans-style persistent streams on asyncio, feeding Apache Spark.

>>> from streams import StreamProvider, StreamId
>>> provider = StreamProvider.memory(queues=8)
"""

from .adapters.generator import GeneratorConfig
from .adapters.protocols import (
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
    QueueMapper,
    RewindableReceiver,
)
from .adapters.records import RecordFormat
from .batch import BatchContainer, BatchKind, Event, EventBatch, QueueMessage
from .deadletters import DeadLetter, DeadLetterStore
from .errors import (
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
from .failures import DeliveryFailure, StreamFailureHandler
from .ids import QueueId, StreamId
from .observer import StreamObserver
from .options import StreamProviderOptions
from .provider import StreamProvider
from .pubsub import PubSubStore, SubscriptionRecord
from .stream import Stream, StreamSubscriptionHandle
from .tokens import SequenceToken

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
