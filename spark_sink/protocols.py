"""What the runtime hands finalized output to: the one interface between the agents and the
handoff log. Light on purpose (no pyarrow, no SQLite): a worker's agents import it without
loading the log's machinery, and each backend's handoff sink
(``streams/backends/*/handoff_sink.py``) implements it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from streams.eventtime.release import Position
from streams.eventtime.results import EventOutcome, WindowResult


class HandoffSink(Protocol):
    """Where the runtime appends one handoff stream's closed windows.

    A write raises :class:`~streams.core.errors.HandoffRefusedError`, appending nothing, when
    some of the windows or events cannot be held by the declared columns; any other error
    is a failed append that a retry may get through."""

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]) -> int:
        """Append the windows of ``source`` (a stream) and ``consumer`` (a consumer type) not
        yet handed off, to ``partition`` (the stream's queue); return how many were."""
        ...

    async def write_events(
        self, source: str, consumer: str, partition: int, released: Sequence[EventOutcome], below: Position | None
    ) -> int:
        """Append the released events not yet handed off; ``below`` is the position under
        which the consumer holds no event any more. Return how many were appended."""
        ...

    async def close(self) -> None: ...
