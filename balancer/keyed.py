"""Co-partitioned namespaces: the streams of one key, in several namespaces, on one queue.

A consumer type implicitly subscribed to several namespaces (``@provider.implicit("tolls",
"prices")``) is activated once per key, on the worker that owns the key's queue; so
``tolls/k`` and ``prices/k`` must live on one queue. :class:`KeyedQueueMapper` wraps a
provider's queue mapper and places every stream of a co-partitioned group where the group's
*first* namespace places the same key: the first namespace keeps its placement (its existing
data stays where it is), the others follow it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from streams.adapters.protocols import QueueMapper
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId, StreamId


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

    @property
    def places_by_key(self) -> bool:
        """Whether the wrapped mapper places every stream by its key alone already."""
        return bool(getattr(self.inner, "places_by_key", False))

    def co_partitioned(self, namespaces: Sequence[str]) -> bool:
        """True when every stream of one key in ``namespaces`` goes to one queue."""
        leads = {self._lead.get(n) for n in namespaces}
        return len(leads) == 1 and None not in leads


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


def places_together(mapper: QueueMapper, namespaces: Sequence[str]) -> bool:
    """Whether ``mapper`` puts the streams of one key in ``namespaces`` on one queue: a
    :class:`KeyedQueueMapper` grouping them, or a mapper that places by key alone (one that
    says so with a true ``places_by_key``, as Kafka's partitioner on a foreign topic does)."""
    check = getattr(mapper, "co_partitioned", None)
    if callable(check) and check(namespaces):
        return True
    return bool(getattr(mapper, "places_by_key", False))
