"""Declaring what a consumer hands to Spark, and writing it exactly once.

A windowed consumer type sets ``handoff = Handoff("name", {"column": "type", ...})`` next to
its ``event_time``; the runtime appends every window it closes to the handoff stream ``name``
(partition = the source stream's queue) through a :class:`HandoffSink`. Each append carries,
atomically, a per-key mark of the newest window end handed off; a replay after a crash or a
queue move (the checkpoint is held at the oldest event of an open window) therefore skips
windows already written, and never writes one twice.

A windowless one sets ``handoff = EventHandoff("name", {"field": "type", ...})``: its events
go out in timestamp order once the watermark has passed them
(:class:`~streams.eventtime.release.TimestampOrder`). Their mark is by the position where
every read of the queue finds an event (its token; a one-event record's offset): the
position below which every event is settled, and the positions handed off above it (events
leave in timestamp order, not in queue order).

Each backend's sink keeps rows and marks together: the embedded store's in one SQLite
transaction (:mod:`streams.backends.embedded.handoff_sink`), Kafka's in one Kafka record
(:mod:`streams.backends.kafka.handoff_sink`), memory's in this process
(:mod:`streams.backends.memory.handoff_sink`); this module is what they share: the declarations,
the marks and the conversion to the declared columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack
import pyarrow as pa

from spark_sink.schema import HandoffSchema
from spark_sink.storage import check_stream_name
from streams.core.errors import ConfigurationError, HandoffRefusedError, HandoffSchemaError, a_type
from streams.eventtime.release import Position, replay_position_of
from streams.eventtime.results import EventOutcome, WindowResult
from streams.eventtime.spec import EventTime

T = TypeVar("T")


@dataclass(frozen=True)
class Handoff:
    """Where a windowed consumer's results go: a handoff stream and its columns.

    One aggregate column takes the window's value; several take the entries of a
    ``Combined`` aggregate's result by name.

    Each row carries the stream it came from (``stream_id``, ``namespace/key``), so windows
    of the same key from two streams stay apart, and, last, whether it is the window's
    ``final`` result or an update (``emit=Every(...)``), and its ``revision``: the row with
    the highest revision of a window is its latest result (``docs/spark.md``, "Updates").

    >>> Handoff("tolls", {"count": "bigint", "total": "double"}).schema().ddl()
    'window_start timestamp, window_end timestamp, stream_id string, key string, count bigint, total double, final boolean, revision bigint'
    """

    stream: str
    aggregates: Mapping[str, str] = field(default_factory=lambda: {"value": "double"})
    key: bool = True  # False for global windows: no key column

    def __post_init__(self) -> None:
        check_stream_name(self.stream)
        if not self.aggregates:
            raise ConfigurationError(f"handoff {self.stream!r} needs at least one aggregate column")
        taken = [name for name in self.aggregates if name.lower() in _REVISION_COLUMNS]
        if taken:
            raise ConfigurationError(
                f"handoff {self.stream!r} declares {taken[0]!r}: final and revision are the columns every "
                "window row ends with; name the aggregate otherwise"
            )

    def schema(self) -> HandoffSchema:
        return HandoffSchema.windows({**self.aggregates, **_REVISION_COLUMNS}, key=self.key, stream=True)

    def row(self, source: str, result: WindowResult) -> dict[str, Any]:
        """The row of one window of stream ``source`` (``namespace/key``)."""
        row: dict[str, Any] = {"window_start": result.start, "window_end": result.end, "stream_id": source}
        if self.key:
            row["key"] = None if result.key is None else str(result.key)
        names = list(self.aggregates)
        if len(names) == 1:
            row[names[0]] = result.value
        elif isinstance(result.value, Mapping):
            for name in names:
                row[name] = result.value.get(name)
        else:
            raise ConfigurationError(
                f"handoff {self.stream!r} declares columns {names}, but the window value is "
                f"{type(result.value).__name__}: use a Combined aggregate with those names"
            )
        row["final"], row["revision"] = result.final, result.revision
        return row


# The columns every window row ends with: a window's rows are its updates and its final result.
_REVISION_COLUMNS = {"final": "boolean", "revision": "bigint"}


@dataclass(frozen=True)
class EventHandoff:
    """Where a windowless consumer's events go, in timestamp order once the watermark has
    passed them: a handoff stream and the payload fields it keeps.

    >>> EventHandoff("readings", {"sensor": "string", "value": "double"}).schema().ddl()
    'event_time timestamp, stream_id string, sensor string, value double'
    """

    stream: str
    fields: Mapping[str, str]

    def __post_init__(self) -> None:
        check_stream_name(self.stream)

    def schema(self) -> HandoffSchema:
        return HandoffSchema.events(dict(self.fields))

    def row(self, source: str, outcome: EventOutcome) -> dict[str, Any]:
        """``event_time`` is the event's timestamp after the ordering policy (ASA's
        ``System.Timestamp``); the fields come from its payload, None where it has none."""
        value = getattr(outcome.record, "value", outcome.record)
        if not isinstance(value, Mapping):
            raise HandoffSchemaError(
                f"handoff {self.stream!r} takes fields {list(self.fields)} from each event's "
                f"payload, but an event of {source} carries {a_type(value)}, not a mapping"
            )
        return {"event_time": outcome.timestamp, "stream_id": source, **{f: value.get(f) for f in self.fields}}


def handoff_of(cls: type) -> Handoff | EventHandoff | None:
    spec = getattr(cls, "handoff", None)
    return spec if isinstance(spec, (Handoff, EventHandoff)) else None


def check_handoff(cls: type, handoff: Handoff | EventHandoff) -> None:
    """Refuse a declaration the type's ``event_time`` cannot feed: windows need a window,
    events need none."""
    spec = getattr(cls, "event_time", None)
    if not isinstance(spec, EventTime):
        raise ConfigurationError(
            f"{cls.__qualname__} hands off to Spark ({handoff.stream!r}) but has no event_time: "
            "Spark gets what the watermark finalizes; declare event_time = EventTime(...)"
        )
    if isinstance(handoff, Handoff) and spec.window is None:
        raise ConfigurationError(
            f"{cls.__qualname__} hands off windows ({handoff.stream!r}) but its event_time has no "
            "window: give it one, or hand off its events with EventHandoff(stream, {field: type})"
        )
    if isinstance(handoff, EventHandoff) and spec.window is not None:
        raise ConfigurationError(
            f"{cls.__qualname__} hands off events ({handoff.stream!r}) but its event_time has a "
            "window: hand off the windows with Handoff(stream, {column: type})"
        )


@dataclass(frozen=True)
class EventMark:
    """Which events of one (source, consumer) are handed off: every one below ``below``
    that ever will be, and those in ``above`` beyond it.

    >>> mark = EventMark((5, 0), frozenset({(7, 1)}))
    >>> [mark.done(p) for p in [(4, 9), (5, 0), (7, 1)]]
    [True, False, True]
    """

    below: Position | None = None
    above: frozenset[Position] = frozenset()

    def done(self, position: Position) -> bool:
        return (self.below is not None and position < self.below) or position in self.above

    def to_bytes(self) -> bytes:
        packed: bytes = msgpack.packb([self.below, sorted(self.above)])
        return packed

    @classmethod
    def from_bytes(cls, data: bytes) -> EventMark:
        below, above = msgpack.unpackb(data)
        return cls(None if below is None else tuple(below), frozenset(tuple(p) for p in above))


def fresh_events(
    released: Sequence[EventOutcome], mark: EventMark, below: Position | None
) -> tuple[list[EventOutcome], EventMark]:
    """The released events not handed off yet, and the mark once they are (``below``: the
    position under which the releasing side holds nothing any more).

    >>> from types import SimpleNamespace as NS
    >>> def ev(seq): return NS(record=NS(token=NS(sequence_number=seq, event_index=0)))
    >>> fresh, mark = fresh_events([ev(3), ev(6)], EventMark((4, 0), frozenset({(6, 0)})), (5, 0))
    >>> [replay_position_of(e) for e in fresh], mark
    ([], EventMark(below=(5, 0), above=frozenset({(6, 0)})))
    """
    fresh = [e for e in released if not mark.done(replay_position_of(e))]
    # What was settled stays settled: a replay starts lower than where the mark stands.
    floor = max((p for p in (below, mark.below) if p is not None), default=None)
    above = {p for p in mark.above if floor is None or p >= floor}
    above.update(p for p in map(replay_position_of, fresh) if floor is None or p >= floor)
    return fresh, EventMark(floor, frozenset(above))


def fresh_windows(
    windows: Sequence[WindowResult], marks: Mapping[str, float]
) -> tuple[list[WindowResult], dict[str, float]]:
    """The windows not handed off yet (per key, an end beyond the key's mark), and the
    marks they move. A key's final results come in order of end, and its mark is the end of
    the newest one handed off: a final result at or below it is written already. An update
    (``final=False``) moves no mark: it is written unless its window's final result is
    (a replay may write an update again, with its revision, which changes no window's
    latest result), so a window's final result is written once and always after its updates.

    >>> from streams.eventtime.results import WindowResult
    >>> w = [WindowResult("a", 0, 60, 1, None), WindowResult("a", 60, 120, 2, None)]
    >>> fresh, moved = fresh_windows(w, {"a": 60})
    >>> [r.end for r in fresh], moved
    ([120], {'a': 120})
    >>> early = [WindowResult("a", 0, 60, 1, 5.0, final=False), WindowResult("a", 60, 120, 1, 70.0, final=False)]
    >>> fresh, moved = fresh_windows(early, {"a": 60})
    >>> [(r.end, r.final) for r in fresh], moved
    ([(120, False)], {})
    """
    fresh = []
    moved: dict[str, float] = {}
    for result in windows:
        key = "" if result.key is None else str(result.key)
        if result.end > moved.get(key, marks.get(key, float("-inf"))):  # per key, in order of end
            fresh.append(result)
            if result.final:
                moved[key] = result.end
    return fresh, moved


def conform(
    schema: HandoffSchema, items: Sequence[T], row_of: Callable[[T], Mapping[str, Any]], stream: str
) -> pa.Table:
    """The rows of ``items`` as a table of ``schema``, or :class:`HandoffRefusedError`
    naming each item whose row the schema cannot hold (nothing is then appended: the caller
    dead-letters those and hands off the rest). Rows are checked one by one only when the
    whole fails, so the usual append converts once.

    >>> schema = HandoffSchema.of({"n": "bigint"})
    >>> conform(schema, [1, 2], lambda i: {"n": i}, "s").num_rows
    2
    >>> try:
    ...     conform(schema, [1, "x"], lambda i: {"n": i}, "s")
    ... except HandoffRefusedError as e:
    ...     [item for item, _ in e.refused]
    ['x']
    """
    rows: list[Mapping[str, Any] | None] = []
    refused: list[tuple[Any, str]] = []
    for item in items:
        try:
            rows.append(row_of(item))
        except (HandoffSchemaError, ConfigurationError) as exc:
            rows.append(None)
            refused.append((item, f"handoff {stream!r}: {exc}"))
    whole: HandoffSchemaError | None = None
    if not refused:
        try:
            return schema.to_table(rows)
        except HandoffSchemaError as exc:
            whole = exc  # which rows? each on its own says
    for item, row in zip(items, rows, strict=True):
        if row is not None:
            try:
                schema.to_table([row])
            except HandoffSchemaError as exc:
                refused.append((item, f"handoff {stream!r}: {exc}"))
    if not refused:  # only together do they fail: none can be told apart from the others
        refused = [(item, f"handoff {stream!r}: {whole}") for item in items]
    raise HandoffRefusedError(f"{len(refused)} of {len(items)} rows refused; {refused[0][1]}", refused)
