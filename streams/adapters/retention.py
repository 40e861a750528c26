"""Retention of a durable queue: how much history stays readable for rewinds and restarts, and
that history read back (``headrace export``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from streams.core.batch import BatchContainer
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId

WEEK = 7 * 24 * 3600.0


@dataclass(frozen=True)
class RetentionPolicy:
    """Which records a queue may delete, checked every ``interval`` seconds by the queue's owner.

    - ``max_age``: acknowledged records older than this many seconds go (``None``: no limit).
    - ``max_records_per_queue``: when a queue holds more, the oldest go; acknowledged ones
      first, and then, only if the limit still forces it, unacknowledged ones, which are
      counted and logged (``None``: no limit).

    Age alone never deletes a record above the queue's checkpoint.

    >>> RetentionPolicy(max_age=3600, max_records_per_queue=1_000_000).max_age
    3600
    """

    max_age: float | None = WEEK
    max_records_per_queue: int | None = None
    interval: float = 60.0

    def __post_init__(self) -> None:
        if self.max_age is not None and self.max_age < 0:
            raise ConfigurationError(f"retention max_age is seconds >= 0 or None, not {self.max_age!r}")
        if self.max_records_per_queue is not None and (
            not isinstance(self.max_records_per_queue, int) or self.max_records_per_queue < 0
        ):
            raise ConfigurationError(
                f"retention max_records_per_queue is an int >= 0 or None, not {self.max_records_per_queue!r}"
            )
        if self.interval <= 0:
            raise ConfigurationError(f"retention interval is positive seconds, not {self.interval!r}")


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What one retention pass removed from one queue.

    ``expired`` counts acknowledged records removed; ``dropped_unacknowledged`` counts records
    no consumer had finished with, removed because the size limit forced it; they were
    ``dropped_first .. dropped_last``.
    """

    queue: QueueId
    expired: int = 0
    dropped_unacknowledged: int = 0
    dropped_first: int | None = None
    dropped_last: int | None = None

    @property
    def removed(self) -> int:
        return self.expired + self.dropped_unacknowledged


class RetainedRecords(Protocol):
    """What a backend's queues retain: the batch containers of ``namespace`` (of one stream,
    when ``key`` is given), each with its queue and position, in queue order; and every
    namespace with records (for a mistake's message)."""

    def containers(self, namespace: str, key: str | None) -> Iterator[tuple[int, int, BatchContainer]]: ...

    def namespaces(self) -> list[str]: ...
