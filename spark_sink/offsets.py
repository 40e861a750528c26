"""Offset arithmetic of the DataSource: Spark's JSON form, admission control, task splits.

An offset is ``{partition: next offset to read}``; a micro-batch is the range from one offset
to the next, partition by partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.errors import ConfigurationError

from .storage import OffsetRange

Offsets = dict[int, int]


def admit(start: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """Cut the ranges ``start → end`` to at most ``max_rows`` rows in all, shared evenly.

    Partitions with little data take all of it and leave their share to the others, so
    every partition with data moves and the total is exactly ``min(max_rows, available)``.

    >>> admit({0: 0, 1: 0}, {0: 100, 1: 3}, 10)
    {0: 7, 1: 3}
    """
    available = {p: end[p] - start.get(p, 0) for p in end}
    left = max_rows
    admitted = dict(end)
    by_size = sorted(available, key=lambda p: (available[p], p))
    for i, partition in enumerate(by_size):
        take = min(available[partition], left // (len(by_size) - i))
        admitted[partition] = start.get(partition, 0) + take
        left -= take
    return admitted


def split_ranges(start: Offsets, end: Offsets, max_rows: int) -> list[OffsetRange]:
    """The ranges ``start → end``, one per partition, cut into pieces of ``max_rows``.

    >>> [(r.partition, r.start, r.end) for r in split_ranges({0: 5}, {0: 12, 1: 2}, 4)]
    [(0, 5, 9), (0, 9, 12), (1, 0, 2)]
    """
    ranges = []
    for partition in sorted(end):
        lo = start.get(partition, 0)  # a partition new since `start` is read from 0
        while lo < end[partition]:
            hi = min(lo + max_rows, end[partition])
            ranges.append(OffsetRange(partition, lo, hi))
            lo = hi
    return ranges


def encode_offsets(offsets: Mapping[int, int]) -> dict[str, int]:
    """Spark's JSON form, ``{"<partition>": offset}``, in partition order (Spark compares
    offsets by their JSON text)."""
    return {str(p): offsets[p] for p in sorted(offsets)}


def decode_offsets(offset: Mapping[str, Any]) -> Offsets:
    try:
        return {int(p): int(o) for p, o in offset.items()}
    except (AttributeError, TypeError, ValueError):
        raise ConfigurationError(
            f"offset {offset!r} is not a headrace offset: the query's checkpoint belongs "
            "to another source; use a new checkpoint location"
        ) from None
