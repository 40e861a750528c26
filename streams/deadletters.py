"""Dead letters: everything dropped or refused, with its reason and the original record.

Nothing headrace drops is silently lost: a corrupt queue record, an event an ordering policy
drops, an event whose windows have all closed; each becomes a :class:`DeadLetter`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dropped or refused record.

    ``reason`` is one of ``early_arrival``, ``late_arrival``, ``out_of_order``,
    ``window_closed``, ``invalid_timestamp``, ``invalid_value``, ``undecodable``,
    ``delivery_failed``, ``handoff_failed`` (or an adapter's own). A ``handoff_failed``
    window has ``value`` ``{"key", "start", "end", "value"}`` and no queue position.
    """

    reason: str
    stream: str | None = None  # "namespace/key", when known
    queue: int | None = None
    sequence_number: int | None = None
    payload: bytes | None = None  # the raw record, when it never decoded
    value: Any = None  # the original event value, when it did
    event_time: float | None = None
    detail: str = ""
    recorded_at: float = field(default_factory=time.time)


class DeadLetterStore(Protocol):
    async def add(self, letters: list[DeadLetter]) -> None: ...

    async def list(self, reason: str | None = None, limit: int = 100) -> list[DeadLetter]: ...

    async def count(self, reason: str | None = None) -> int: ...


class MemoryDeadLetterStore:
    """A :class:`DeadLetterStore` in this process's memory."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    async def add(self, letters: list[DeadLetter]) -> None:
        self.letters.extend(letters)

    async def list(self, reason: str | None = None, limit: int = 100) -> list[DeadLetter]:
        return [x for x in self.letters if reason is None or x.reason == reason][:limit]

    async def count(self, reason: str | None = None) -> int:
        return sum(1 for x in self.letters if reason is None or x.reason == reason)
