"""Offset arithmetic of the DataSource: Spark's JSON form, admission control, task splits.

An offset is ``{partition: next offset to read}``; a micro-batch is the range from one offset
to the next, partition by partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigurationError

Offsets = dict[int, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition of a handoff stream."""

    partition: int
    start: int
    end: int

    @property
    def rows(self) -> int:
        """Offsets in the range: rows in the embedded log, records (appends) on Kafka."""
        return self.end - self.start


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


def admit_records(
    start: Offsets, end: Offsets, max_rows: int, records: Mapping[int, Sequence[tuple[int, int]]]
) -> Offsets:
    """:func:`admit` for a log whose offsets are records of several rows each.

    ``records[p]`` lists ``(offset, rows)`` of partition ``p``'s records from ``start[p]`` on,
    as far as ``max_rows`` could reach. Whole records are admitted, at most ``max_rows`` rows
    in all, except that a batch always moves if there is data: when even the smallest first
    record is over the limit, that one record goes alone.

    >>> admit_records({0: 0, 1: 0}, {0: 3, 1: 1}, 4, {0: [(0, 2), (1, 2), (2, 2)], 1: [(0, 9)]})
    {0: 2, 1: 0}
    """
    available = {p: sum(rows for _, rows in records.get(p, ())) for p in end}
    quota = admit(dict.fromkeys(end, 0), available, max_rows)  # fair shares, in rows
    taken = dict.fromkeys(end, 0)  # records admitted, per partition
    left = max_rows

    def take(partition: int, limit: int) -> bool:
        nonlocal left
        queue = records.get(partition, ())
        if taken[partition] < len(queue) and queue[taken[partition]][1] <= min(limit, left):
            left -= queue[taken[partition]][1]
            taken[partition] += 1
            return True
        return False

    for partition, share in quota.items():  # each partition up to its share...
        used = 0
        while take(partition, share - used):
            used += records[partition][taken[partition] - 1][1]
    while any([take(p, left) for p in sorted(end)]):  # ...then what shares left unused
        pass
    if not any(taken.values()):  # records over the limit: the smallest first one goes alone
        firsts = [(queue[0][1], p) for p, queue in records.items() if queue]
        if firsts:
            taken[min(firsts)[1]] = 1
    return {p: records[p][taken[p] - 1][0] + 1 if taken[p] else start.get(p, 0) for p in end}


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
