"""The runtime side of the Kafka handoff log: closed windows appended exactly once.

A worker on Kafka queues hands its windows to ``<prefix>.handoff.<stream>``, partition =
queue. Each append is one record carrying its rows and the marks they move, written at the
offset the sink expects (see :mod:`streams.backends.kafka.handoff_log`). When a record lands elsewhere
(a retry whose first attempt got through, or another worker writing to the same partition
while the queue changes hands), the sink reads the records it missed, drops the windows
they already hold, and appends the rest again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio
import pyarrow as pa

from spark_sink.handoff import EventHandoff, EventMark, Handoff, conform, fresh_events, fresh_windows
from streams.backends.kafka.clients import is_transient
from streams.backends.kafka.handoff_log import KafkaHandoffLog
from streams.backends.kafka.handoff_records import PartitionMarks
from streams.backends.kafka.settings import KafkaSettings
from streams.core.retry import OutageLog, retry
from streams.eventtime.release import Position
from streams.eventtime.results import EventOutcome, WindowResult

log = logging.getLogger("headrace.handoff")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Append:
    """One record's worth: the rows not handed off yet, and the marks they move."""

    rows: pa.Table
    marks: Mapping[str, float]  # windows: per key, the newest end
    events: bytes | None = None  # events: the EventMark once these are handed off


# Records between two snapshots of a partition's marks: about what a new owner reads at
# most (records read at loading count too, so restarts do not let the tail grow).
SNAPSHOT_EVERY = 64


class KafkaHandoffSink:
    """Appends one handoff stream's windows (or events) to Kafka, exactly once per
    (source, consumer, key, window end) (or per event).

    Example (the provider does this for every consumer type that declares a handoff)::

        sink = await KafkaHandoffSink.open(settings, Handoff("tolls", {"total": "double"}))
        await sink.write("tolls/plaza-1", "Totals", 3, windows)
        await sink.close()
    """

    def __init__(
        self, handoff_log: KafkaHandoffLog, handoff: Handoff | EventHandoff, *, give_up_after: float = 60.0
    ) -> None:
        self.log = handoff_log
        self.handoff = handoff
        self.schema = handoff.schema()
        self.give_up_after = give_up_after
        self._states: dict[int, PartitionMarks] = {}
        self._locks: dict[int, anyio.Lock] = defaultdict(anyio.Lock)
        self._outage = OutageLog(handoff_log.server, log)

    @classmethod
    async def open(cls, settings: KafkaSettings, handoff: Handoff | EventHandoff) -> KafkaHandoffSink:
        """A sink on the cluster of ``settings``, with the stream's topics created (one
        partition per queue) and its schema declared."""
        handoff_log = KafkaHandoffLog(
            settings,
            settings.handoff_prefix,
            replication_factor=settings.replication_factor,
            request_timeout=settings.request_timeout,
        )
        sink = cls(handoff_log, handoff, give_up_after=settings.give_up_after)
        try:
            await sink._retry(
                lambda: handoff_log.declare(handoff.stream, sink.schema, settings.queues),
                f"declaring handoff stream {handoff.stream!r}",
            )
        except BaseException:
            await handoff_log.close()
            raise
        return sink

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[WindowResult]) -> int:
        """Append the windows not handed off yet; return how many were."""
        handoff = self.handoff
        assert isinstance(handoff, Handoff)

        def fresh(state: PartitionMarks) -> _Append | None:
            windows_left, moved = fresh_windows(windows, state.of(source, consumer))
            if not windows_left:
                return None
            return _Append(conform(self.schema, windows_left, lambda w: handoff.row(source, w), handoff.stream), moved)

        return await self._write(source, consumer, partition, fresh) if windows else 0

    async def write_events(
        self, source: str, consumer: str, partition: int, released: Sequence[EventOutcome], below: Position | None
    ) -> int:
        """Append the released events not handed off yet; return how many were."""
        handoff = self.handoff
        assert isinstance(handoff, EventHandoff)

        def fresh(state: PartitionMarks) -> _Append | None:
            known = state.events.get((source, consumer))
            events, mark = fresh_events(released, EventMark.from_bytes(known) if known else EventMark(), below)
            if not events:
                return None
            rows = conform(self.schema, events, lambda e: handoff.row(source, e), handoff.stream)
            return _Append(rows, {}, mark.to_bytes())

        return await self._write(source, consumer, partition, fresh) if released else 0

    async def close(self) -> None:
        """Save the marks not in a snapshot yet (a quicker start for the next owner)."""
        try:
            for partition, state in list(self._states.items()):
                if state.unsaved:
                    with anyio.move_on_after(5):
                        await self.log.save_marks(self.handoff.stream, partition, state)
        finally:
            await self.log.close()

    async def _write(
        self, source: str, consumer: str, partition: int, fresh: Callable[[PartitionMarks], _Append | None]
    ) -> int:
        async with self._locks[partition]:
            return await self._retry(
                lambda: self._append(source, consumer, partition, fresh),
                f"handing off to {self.log.topics.data(self.handoff.stream)!r} partition {partition}",
            )

    async def _append(
        self, source: str, consumer: str, partition: int, fresh: Callable[[PartitionMarks], _Append | None]
    ) -> int:
        stream = self.handoff.stream
        state = self._states.pop(partition, None)  # held back until the append is settled
        if state is None:
            state = await self.log.load_marks(stream, partition)
        while True:
            append = fresh(state)
            if append is None:
                self._states[partition] = state
                return 0
            landed = await self.log.append(
                stream,
                partition,
                append.rows,
                expected=state.end,
                source=source,
                consumer=consumer,
                marks=append.marks,
                events=append.events,
            )
            if landed == state.end:
                state.move(source, consumer, append.marks, append.events)
                state.end = landed + 1
                state.unsaved += 1
                self._states[partition] = state
                if state.unsaved >= SNAPSHOT_EVERY:
                    await self.log.save_marks(stream, partition, state)
                    state.unsaved = 0
                rows: int = append.rows.num_rows
                return rows
            # Something was appended since we looked: ours does not count. Read what was.
            log.info(
                "handoff %r partition %d: record landed at %d, not %d; catching up",
                stream,
                partition,
                landed,
                state.end,
            )
            for record in await self.log.records(stream, partition, state.end, landed + 1):
                state.fold(record)

    async def _retry(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        return await retry(
            operation,
            what=what,
            outage=self._outage,
            is_transient=is_transient,
            give_up_after=self.give_up_after,
            attempt_timeout=self.log.request_timeout * 3,
        )
