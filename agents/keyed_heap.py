"""A min-heap of one value per key, for what an agent must find the smallest of among many
activations without walking them all: the checkpoint holds, the next tick due.

Setting a key's value pushes an entry; entries a later value replaced stay in the heap
until they reach its top, where they are recognised as stale and dropped (cheaper than
finding and removing them). The heap is rebuilt when stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class KeyedMinHeap(Generic[K]):
    """The smallest value over keys whose values change.

    >>> heap = KeyedMinHeap()
    >>> heap.set("a", 5.0); heap.set("b", 3.0); heap.set("b", 7.0)
    >>> heap.min(), len(heap)
    (5.0, 2)
    >>> heap.pop_until(6.0), heap.min()
    (['a'], 7.0)
    >>> heap.set("b", None); heap.min() is None
    True
    """

    __slots__ = ("_values", "_heap", "_order")

    def __init__(self) -> None:
        self._values: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()  # ties never compare keys

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def set(self, key: K, value: float | None) -> None:
        """Give ``key`` a value, or none (``None``: it no longer counts)."""
        if value is None:
            self._values.pop(key, None)
            return
        if self._values.get(key) == value:
            return
        self._values[key] = value
        heap = self._heap
        heapq.heappush(heap, (value, next(self._order), key))
        if len(heap) > 2 * len(self._values) + 64:
            self._heap = [(v, next(self._order), k) for k, v in self._values.items()]
            heapq.heapify(self._heap)

    def discard(self, key: K) -> None:
        self._values.pop(key, None)

    def min(self) -> float | None:
        """The smallest value of any key, or None when no key has one."""
        heap, values = self._heap, self._values
        while heap:
            value, _, key = heap[0]
            if values.get(key) == value:
                return value
            heapq.heappop(heap)
        return None

    def pop_until(self, limit: float) -> list[K]:
        """Remove and return the keys whose value is at most ``limit``, smallest first."""
        heap, values = self._heap, self._values
        keys = []
        while heap and heap[0][0] <= limit:
            value, _, key = heapq.heappop(heap)
            if values.get(key) == value:
                del values[key]
                keys.append(key)
        return keys
