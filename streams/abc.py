"""What an extension author implements: every protocol a new queue, store, format, balancer,
cache or handoff sink must satisfy, in one place (as ``collections.abc`` is for containers).

Each is a :class:`typing.Protocol`: implement the methods, no base class needed. A queue
backend implements :class:`QueueAdapterFactory`, :class:`QueueAdapter` and
:class:`QueueAdapterReceiver` (and :class:`RewindableReceiver` if its queue can be re-read,
:class:`ForwardingReceiver` if it sends records on to other queues);
foreign records need a :class:`RecordFormat`; durable subscriptions and dead letters a
:class:`PubSubStore` and a :class:`DeadLetterStore`. A whole backend (one package of
``streams/backends/``) builds them behind a :class:`Backend`, with a :class:`StatusBoard`, the
:class:`RetainedRecords` and :class:`DeadLetterArchive` the CLI reads, and the
:class:`HandoffStorage` the Spark DataSource reads.

>>> from streams.abc import RecordFormat
>>> class Lines:
...     name = "lines"
...     def decode(self, data: bytes) -> str:
...         return data.decode()
...     def encode(self, value: str) -> bytes:
...         return value.encode()
>>> lines: RecordFormat = Lines()  # checked by mypy: a Lines is a RecordFormat
>>> lines.decode(b"a line")
'a line'
"""

from __future__ import annotations

from balancer.protocols import LeaseProvider, MembershipOracle, QueueBalancer
from cache.protocols import CachedBatch, QueueCache, QueueCacheCursor
from spark_sink.protocols import HandoffSink
from spark_sink.storage import HandoffStorage
from streams.adapters.protocols import (
    ContainerQueueAdapter,
    EventWriter,
    ForwardingReceiver,
    LocalStates,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
    QueueCheckpointer,
    QueueMapper,
    ReceiverDefaults,
    RewindableReceiver,
    StatefulReceiver,
    StateLookup,
    StateSource,
)
from streams.adapters.retention import RetainedRecords
from streams.adapters.status import StatusBoard
from streams.core.clock import Clock
from streams.core.deadletters import DeadLetterArchive, DeadLetterStore
from streams.core.observer import StreamFailureHandler, StreamObserver
from streams.core.pubsub import FollowedPubSubStore, PubSubStore
from streams.core.records import RecordFormat
from streams.eventtime.aggregates import Reducer
from streams.runtime.backends import Backend

__all__ = [
    "Backend",
    "CachedBatch",
    "Clock",
    "ContainerQueueAdapter",
    "DeadLetterArchive",
    "DeadLetterStore",
    "EventWriter",
    "FollowedPubSubStore",
    "ForwardingReceiver",
    "HandoffSink",
    "HandoffStorage",
    "LeaseProvider",
    "LocalStates",
    "MembershipOracle",
    "PubSubStore",
    "QueueAdapter",
    "QueueAdapterFactory",
    "QueueAdapterReceiver",
    "QueueBalancer",
    "QueueCache",
    "QueueCacheCursor",
    "QueueCheckpointer",
    "QueueMapper",
    "ReceiverDefaults",
    "RecordFormat",
    "Reducer",
    "RetainedRecords",
    "RewindableReceiver",
    "StateLookup",
    "StateSource",
    "StatefulReceiver",
    "StatusBoard",
    "StreamFailureHandler",
    "StreamObserver",
]
