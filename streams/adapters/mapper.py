"""Queue mappers: which queue carries a stream (Orleans' ``HashRingBasedStreamQueueMapper``).

Co-partitioned namespaces: the streams of one key, in several namespaces, on one queue.

A consumer type implicitly subscribed to several namespaces (``@provider.implicit("tolls",
"prices")``) is activated once per key, on the worker that owns the key's queue; so
``tolls/k`` and ``prices/k`` must live on one queue. :class:`KeyedQueueMapper` wraps a
provider's queue mapper and places every stream of a co-partitioned group where the group's
*first* namespace places the same key: the first namespace keeps its placement (its existing
data stays where it is), the others follow it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from streams.adapters.protocols import QueueMapper
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, StreamId

_RING = 1 << 32


class FixedQueues:
    """A fixed number of queues, ``QueueId(0) .. QueueId(queues - 1)``: what every mapper
    here maps onto."""

    places_by_key = False  # whether the key alone places a stream, whatever its namespace

    def __init__(self, queues: int) -> None:
        if not isinstance(queues, int) or queues < 1:
            raise ValueError(f"the number of queues is a positive int, not {queues!r}")
        self._queues = [QueueId(i) for i in range(queues)]

    @property
    def queue_count(self) -> int:
        return len(self._queues)

    def get_all_queues(self) -> list[QueueId]:
        return list(self._queues)

    def co_partitioned(self, namespaces: Sequence[str]) -> bool:
        return self.places_by_key


class HashRingQueueMapper(FixedQueues):
    """Places queues evenly on a 32-bit hash ring; a stream goes to the queue whose range
    holds its stable hash. Every process computes the same mapping.

    >>> mapper = HashRingQueueMapper(8)
    >>> mapper.get_queue_for_stream(StreamId("sensors", "s-1")) in mapper.get_all_queues()
    True
    """

    def __init__(self, queues: int = 8) -> None:
        super().__init__(queues)
        # Queue i owns the ring range (upper[i-1], upper[i]].
        self._upper = [((i + 1) * _RING) // queues - 1 for i in range(queues)]

    def get_queue_for_stream(self, stream_id: StreamId) -> QueueId:
        return self._queues[bisect.bisect_left(self._upper, stream_id.uniform_hash)]


_M = 0x5BD1E995  # murmur2's multiplier, as in Kafka's Java client
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` as an unsigned 32-bit int (the Java client's
    ``Utils.murmur2``, seed ``0x9747b28c``, read modulo 2**32).

    >>> murmur2(b"21") - (1 << 32)  # Kafka's own test value, which Java prints signed
    -973932308
    """
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with ``key``: the positive
    part of its murmur2 hash, modulo the partition count.

    >>> kafka_partition(b"sensor-1", 8) in range(8)
    True
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class KafkaPartitionMapper(FixedQueues):
    """The queue mapper of a topic other programs write too: a stream lives in the
    partition Kafka's default partitioner gives its key (``stream_id.key`` as UTF-8), so
    headrace and any other producer agree on where a key's records are.

    >>> mapper = KafkaPartitionMapper(8)
    >>> mapper.get_queue_for_stream(StreamId("sensors", "sensor-1")).number == kafka_partition(b"sensor-1", 8)
    True
    """

    places_by_key = True  # the key alone: every namespace's stream of one key shares a queue

    def __init__(self, queues: int = 8) -> None:
        super().__init__(queues)
        self._known: dict[str, QueueId] = {}  # key -> queue: producers repeat their keys

    def get_queue_for_stream(self, stream_id: StreamId) -> QueueId:
        return self.queue_of_key(stream_id.key)

    def queue_of_key(self, key: str) -> QueueId:
        """The queue of a record keyed ``key`` (UTF-8), whatever its namespace."""
        queue = self._known.get(key)
        if queue is None:
            if len(self._known) >= 100_000:
                self._known.clear()
            queue = self._known[key] = self._queues[kafka_partition(key.encode(), len(self._queues))]
        return queue


class KeyedQueueMapper:
    """A queue mapper that places the namespaces of each group by key.

    >>> from streams.adapters.mapper import HashRingQueueMapper
    >>> mapper = KeyedQueueMapper(HashRingQueueMapper(8), [("tolls", "prices")])
    >>> all(mapper.get_queue_for_stream(StreamId("prices", k))
    ...     == mapper.get_queue_for_stream(StreamId("tolls", k)) for k in map(str, range(50)))
    True
    >>> mapper.co_partitioned(["tolls", "prices"]), mapper.co_partitioned(["tolls", "other"])
    (True, False)
    """

    def __init__(self, inner: QueueMapper, groups: Iterable[Sequence[str]]) -> None:
        self.inner = inner
        self.groups: list[tuple[str, ...]] = []
        self._lead: dict[str, str] = {}  # namespace -> the first namespace of its group
        for group in groups:
            names = list(group) if not isinstance(group, str) else [group]
            if len(names) < 2 or not all(isinstance(n, str) and n for n in names):
                raise ConfigurationError(
                    f"co_partitioned takes groups of two or more namespaces, e.g. [('tolls', 'prices')], not {group!r}"
                )
            for name in names:
                if self._lead.get(name, names[0]) != names[0]:
                    raise ConfigurationError(f"namespace {name!r} is in two co-partitioned groups: merge them into one")
                self._lead[name] = names[0]
            self.groups.append(tuple(names))

    @property
    def queue_count(self) -> int:
        return len(self.inner.get_all_queues())

    def get_all_queues(self) -> list[QueueId]:
        return self.inner.get_all_queues()

    def get_queue_for_stream(self, stream_id: StreamId) -> QueueId:
        lead = self._lead.get(stream_id.namespace)
        if lead is not None and lead != stream_id.namespace:
            stream_id = StreamId(lead, stream_id.key)
        return self.inner.get_queue_for_stream(stream_id)

    def co_partitioned(self, namespaces: Sequence[str]) -> bool:
        """True when every stream of one key in ``namespaces`` goes to one queue: one of the
        groups holds them all, or the wrapped mapper places them together already."""
        leads = {self._lead.get(n) for n in namespaces}
        return (len(leads) == 1 and None not in leads) or self.inner.co_partitioned(namespaces)


def co_partition(mapper: QueueMapper, namespaces: Sequence[str]) -> KeyedQueueMapper:
    """``mapper`` with ``namespaces`` placed together by key as well (a new mapper; the
    groups ``mapper`` has already stay). A namespace already in another group is refused.

    >>> from streams.adapters.mapper import HashRingQueueMapper
    >>> co_partition(HashRingQueueMapper(8), ["tolls", "prices"]).groups
    [('tolls', 'prices')]
    """
    if isinstance(mapper, KeyedQueueMapper):
        return KeyedQueueMapper(mapper.inner, [*mapper.groups, tuple(namespaces)])
    return KeyedQueueMapper(mapper, [tuple(namespaces)])
