"""A sequence whose items are made as they are looked at, from the list they stand for.

A read or an acknowledgement can cover thousands of records. A list of as many objects,
alive until the call returns, costs more in garbage collections than making each when it
is asked for, and many takers only count the items, read the last, or read the list
beneath (a Kafka read's fetched records, the acknowledged positions).

>>> squares = LazySequence([1, 2, 3], lambda n: n * n)
>>> len(squares), squares[-1], squares[:2], list(squares)
(3, 9, [1, 4], [1, 4, 9])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar, overload

S = TypeVar("S")
T = TypeVar("T")


class LazySequence(Sequence[T], Generic[S, T]):
    """``make(item)`` for each item of ``source``, made when it is read."""

    __slots__ = ("source", "_make")

    def __init__(self, source: Sequence[S], make: Callable[[S], T]) -> None:
        self.source = source
        self._make = make

    def __len__(self) -> int:
        return len(self.source)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return list(map(self._make, self.source[index]))
        return self._make(self.source[index])

    def __iter__(self) -> Iterator[T]:
        return map(self._make, self.source)
