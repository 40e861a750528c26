"""Window aggregates: the :class:`Reducer` protocol and the built-in reducers.

A reducer folds a window's values: ``init()`` makes an empty accumulator, ``add(acc, value)``
folds one value in, ``merge(a, b)`` combines two accumulators (the windows of overlapping
hopping windows are merged from panes), ``result(acc)`` gives the window's value. ``add`` and
``merge`` may update and return their first argument; they never change the second.

First, last and collect follow arrival order, also across panes: their accumulators carry an
ingestion sequence number.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

A = TypeVar("A")
R = TypeVar("R", covariant=True)


class Reducer(Protocol[A, R]):
    """A window aggregate, written by users like the built-ins.

    >>> class Spread:  # max - min
    ...     def init(self): return (math.inf, -math.inf)
    ...     def add(self, acc, v): return (min(acc[0], v), max(acc[1], v))
    ...     def merge(self, a, b): return (min(a[0], b[0]), max(a[1], b[1]))
    ...     def result(self, acc): return acc[1] - acc[0]
    >>> s = Spread(); s.result(s.add(s.add(s.init(), 3), 8))
    5
    """

    def init(self) -> A: ...

    def add(self, acc: A, value: Any) -> A: ...

    def merge(self, a: A, b: A) -> A: ...

    def result(self, acc: A) -> R: ...


class Count:
    """The number of events.

    >>> c = Count(); c.result(c.merge(c.add(c.init(), "x"), 2))
    3
    """

    def init(self) -> int:
        return 0

    def add(self, acc: int, value: Any) -> int:
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b

    # The count itself (``operator.index``: an int as it is), a call into C once a window,
    # where a method returning its argument was a call of its own.
    result = staticmethod(operator.index)


class Sum:
    """The sum of the values (0 for no value)."""

    def init(self) -> Any:
        return 0

    def add(self, acc: Any, value: Any) -> Any:
        return acc + value

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def result(self, acc: Any) -> Any:
        return acc


class _Extreme:
    """Min or max; ``None`` for a window with no value."""

    _pick = min

    def init(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        return value if acc is None else type(self)._pick(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else type(self)._pick(a, b)

    def result(self, acc: Any) -> Any:
        return acc


class Min(_Extreme):
    """The smallest value.

    >>> m = Min(); m.result(m.add(m.add(m.init(), 4), 2))
    2
    """

    _pick = min


class Max(_Extreme):
    """The largest value."""

    _pick = max


class Mean:
    """The arithmetic mean (NaN for a window with no value).

    >>> m = Mean(); m.result(m.merge(m.add(m.init(), 1), m.add(m.init(), 4)))
    2.5
    """

    def init(self) -> list[float]:
        return [0.0, 0]

    def add(self, acc: list[float], value: Any) -> list[float]:
        acc[0] += value
        acc[1] += 1
        return acc

    def merge(self, a: list[float], b: list[float]) -> list[float]:
        a[0] += b[0]
        a[1] += b[1]
        return a

    def result(self, acc: list[float]) -> float:
        return acc[0] / acc[1] if acc[1] else math.nan


class _Sequenced:
    """Shared by the order-aware reducers: each value is stamped with its ingestion order."""

    def __init__(self) -> None:
        self._seq = itertools.count()


class First(_Sequenced):
    """The first value to arrive (``None`` for an empty window).

    >>> f = First(); f.result(f.add(f.add(f.init(), "a"), "b"))
    'a'
    """

    def init(self) -> tuple[float, Any] | None:
        return None

    def add(self, acc: tuple[float, Any] | None, value: Any) -> tuple[float, Any]:
        return (next(self._seq), value) if acc is None else acc

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None or a[0] < b[0] else b

    def result(self, acc: Any) -> Any:
        return None if acc is None else acc[1]


class Last(_Sequenced):
    """The last value to arrive (``None`` for an empty window)."""

    def init(self) -> tuple[float, Any] | None:
        return None

    def add(self, acc: Any, value: Any) -> tuple[float, Any]:
        return (next(self._seq), value)

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None or a[0] > b[0] else b

    def result(self, acc: Any) -> Any:
        return None if acc is None else acc[1]


class Collect(_Sequenced):
    """Every value, in arrival order.

    >>> c = Collect(); c.result(c.merge(c.add(c.init(), 1), c.add(c.init(), 2)))
    [1, 2]
    """

    def init(self) -> list[tuple[int, Any]]:
        return []

    def add(self, acc: list[tuple[int, Any]], value: Any) -> list[tuple[int, Any]]:
        acc.append((next(self._seq), value))
        return acc

    def merge(self, a: list[tuple[int, Any]], b: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        a.extend(b)
        return a

    def result(self, acc: list[tuple[int, Any]]) -> list[Any]:
        return [value for _, value in sorted(acc, key=lambda pair: pair[0])]


class Combined(Generic[A]):
    """Several reducers over the same values; the result is a dict by name.

    >>> r = Combined({"n": Count(), "top": Max()})
    >>> r.result(r.add(r.add(r.init(), 3), 9))
    {'n': 2, 'top': 9}
    """

    def __init__(self, reducers: Mapping[str, Reducer[Any, Any]]) -> None:
        self._names = tuple(reducers)
        self._reducers = tuple(reducers.values())

    def init(self) -> list[Any]:
        return [r.init() for r in self._reducers]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        for i, r in enumerate(self._reducers):
            acc[i] = r.add(acc[i], value)
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        for i, r in enumerate(self._reducers):
            a[i] = r.merge(a[i], b[i])
        return a

    def result(self, acc: list[Any]) -> dict[str, Any]:
        return {n: r.result(x) for n, r, x in zip(self._names, self._reducers, acc, strict=True)}
