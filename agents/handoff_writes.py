"""Handing one activation's finalized output to its handoff sink, with nothing lost in silence.

An append that fails (a full disk, a locked store, a broker away) is retried with back-off
until it gets through; the activation waits meanwhile, so its checkpoint stays where it was
(``EventTimeObserver`` holds it until the emit completes), and the outage is logged once
when it begins and once when it ends, however many activations share the sink. What the
sink refuses (:class:`~streams.core.errors.HandoffRefusedError`: a value its declared columns
cannot hold, which no retry can fix) is dead-lettered as ``handoff_failed``, with the
window's key, bounds and value (or the event itself), and the rest is handed off.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from spark_sink.protocols import HandoffSink  # the one interface of a handoff sink, owned by the log's side
from streams.core.deadletters import DeadLetter, DeadLetterStore, event_position
from streams.core.errors import (
    HandoffRefusedError,
)
from streams.core.retry import Backoff, OutageLog, retry
from streams.eventtime.release import Position
from streams.eventtime.results import EventOutcome, WindowResult

log = logging.getLogger("headrace.handoff")
T = TypeVar("T")
HANDOFF_FAILED = "handoff_failed"


@dataclass(frozen=True, slots=True)
class HandoffTarget:
    """Where one activation's finalized output goes: the sink of handoff stream ``handoff``,
    written as ``source`` (the stream) and ``consumer`` (the type) to ``partition`` (the queue)."""

    sink: HandoffSink
    source: str
    consumer: str
    partition: int
    handoff: str  # the handoff stream's name (named in the outage log lines)


# One outage log per sink: every activation writing to it reports to the same one.
_outages: weakref.WeakKeyDictionary[HandoffSink, OutageLog] = weakref.WeakKeyDictionary()


def _outage_of(target: HandoffTarget) -> OutageLog:
    outage = _outages.get(target.sink)
    if outage is None:
        outage = _outages[target.sink] = OutageLog(f"handoff stream {target.handoff!r}", log)
    return outage


class HandoffWrites:
    """One activation's appends to its handoff target, retried and never lost.

    Example (``EventTimeObserver`` does this)::

        writes = HandoffWrites(HandoffTarget(sink, "tolls/p1", "Totals", 3, "totals"), dead_letters)
        await writes.windows(output.windows)  # returns once appended or dead-lettered
    """

    def __init__(self, target: HandoffTarget, dead_letters: DeadLetterStore, *, max_backoff: float = 5.0) -> None:
        self.target = target
        self._dead_letters = dead_letters
        self._outage = _outage_of(target)
        self._max_backoff = max_backoff
        # True while an append is being retried: the delivery watchdog does not count that
        # time against the consumer (cancelling it would dead-letter a batch whose windows a
        # replay counts again).
        self.retrying = False

    async def windows(self, windows: Sequence[WindowResult]) -> None:
        t = self.target
        await self._write(
            list(windows), lambda items: t.sink.write(t.source, t.consumer, t.partition, items), self._window_letter
        )

    async def events(self, released: Sequence[EventOutcome], below: Position | None, source: str | None = None) -> None:
        """Append released events as ``source`` (the target's stream unless given: an
        activation with several inputs writes each input stream's events as their own)."""
        t = self.target
        await self._write(
            list(released),
            lambda items: t.sink.write_events(source or t.source, t.consumer, t.partition, items, below),
            self._event_letter,
        )

    async def _write(
        self, items: list[T], append: Callable[[list[T]], Awaitable[int]], letter: Callable[[T, str], DeadLetter]
    ) -> None:
        try:
            await self._append_all(items, append, letter)
        finally:
            self.retrying = False

    async def _append_all(
        self, items: list[T], append: Callable[[list[T]], Awaitable[int]], letter: Callable[[T, str], DeadLetter]
    ) -> None:
        remaining = items

        async def attempt() -> None:
            # What the sink refuses for good is dead-lettered at once; only the rest is retried.
            nonlocal remaining
            while remaining:
                try:
                    await append(remaining)
                    remaining = []
                except HandoffRefusedError as refused:
                    await self._dead_letters.add([letter(item, why) for item, why in refused.refused])
                    gone = {id(item) for item, _ in refused.refused}
                    remaining = [item for item in remaining if id(item) not in gone]

        def failed(exc: BaseException, attempt: int) -> None:
            self.retrying = True
            if attempt == 1:
                log.debug("handoff append to %s failed", self.target.source, exc_info=exc)

        await retry(
            attempt,
            what=f"handoff append to {self.target.source}",
            outage=self._outage,
            backoff=Backoff(maximum=self._max_backoff),
            on_failure=failed,
        )

    def _window_letter(self, window: WindowResult, why: str) -> DeadLetter:
        t = self.target
        return DeadLetter(
            HANDOFF_FAILED,
            stream=t.source,
            queue=t.partition,
            value={"key": window.key, "start": window.start, "end": window.end, "value": window.value},
            event_time=window.start,
            detail=f"{t.consumer}: window [{window.start:g}, {window.end:g}) of key {window.key!r} not handed off: {why}",
        )

    def _event_letter(self, outcome: EventOutcome, why: str) -> DeadLetter:
        t = self.target
        token = getattr(outcome.record, "token", None)
        sequence_number, event_index = event_position(outcome.record)  # one letter per event, not per record
        return DeadLetter(
            HANDOFF_FAILED,
            stream=t.source,
            queue=t.partition,
            sequence_number=sequence_number,
            event_index=event_index,
            value=getattr(outcome.record, "value", outcome.record),
            event_time=outcome.timestamp,
            detail=f"{t.consumer}: event not handed off: {why}; token {token}",
        )
