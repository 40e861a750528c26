"""Dead letters: everything dropped or refused, with its reason and the original record.

Nothing headrace drops is silently lost: a corrupt queue record, an event an ordering policy
drops, an event whose windows have all closed; each becomes a :class:`DeadLetter`.

A store keeps one dead letter per queue position and reason (:func:`letter_key`): a worker
that reads a range again after a restart (a window held the checkpoint) refuses the same
events again, and they are not recorded twice, so a replay publishes each once and the
counts stay true.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

import msgpack

# A ``too_large`` letter keeps this many bytes of its record: enough to tell what it was,
# without a dead-letter store holding what the worker refused to hold.
LETTER_PREFIX = 4096


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dropped or refused record.

    ``reason`` is one of ``early_arrival``, ``late_arrival``, ``out_of_order``,
    ``duplicate`` (a ``Dedup`` key seen within its horizon), ``window_closed``, ``invalid_timestamp``, ``invalid_value``, ``undecodable``,
    ``too_large`` (a record over ``max_event_size``: ``payload`` is its first :data:`LETTER_PREFIX` bytes),
    ``delivery_failed``, ``activation_failed``, ``window_failed``, ``handoff_failed``,
    ``filter_failed`` (a subscription's filter raised on the event; or an adapter's own). A ``handoff_failed``
    window has ``value`` ``{"key", "start", "end", "value"}`` and no queue position. An event's
    letter names its position: ``queue``, ``sequence_number`` (its record) and
    ``event_index`` (its place in the record; ``None`` for a letter about a whole record). A
    letter written for one event must carry its ``event_index``, or stores take the letters of
    a record's several events for one (see :func:`letter_key`).

    ``unit`` names a letter about something that is not one event or record of its queue: a
    window whose ``on_window`` failed (``window_failed``, ``agents.window_hook``) is the
    consumer type, key and bounds. Letters of one queue, reason and unit are one, whatever
    position they name; ``None`` for the letters of events and records.
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
    event_index: int | None = None  # the event's index in its record; None: the whole record
    unit: str | None = None  # what it is about, when not an event or record (a window)


def event_position(event: object) -> tuple[int | None, int | None]:
    """The ``(sequence_number, event_index)`` a letter about one event names: the event's
    ``position``, where it stands on every read of its queue (an event of a topic others
    write: its record's offset, index 0, however the read grouped its records; else its
    token), so that a replay letters nothing twice.

    >>> from types import SimpleNamespace as NS
    >>> event_position(NS(position=NS(sequence_number=719, event_index=0), token=NS(sequence_number=3, event_index=128)))
    (719, 0)
    >>> event_position("not an event")
    (None, None)
    """
    at = getattr(event, "position", None) or getattr(event, "token", None)
    return getattr(at, "sequence_number", None), getattr(at, "event_index", None)


@dataclass(frozen=True, slots=True)
class StoredDeadLetter:
    """A dead letter as the store keeps it: its id, and when it was replayed (if it was)."""

    letter_id: int
    letter: DeadLetter
    replayed_at: float | None = None


class DeadLetterStore(Protocol):
    async def add(self, letters: list[DeadLetter]) -> None: ...

    async def list(self, reason: str | None = None, limit: int = 100) -> list[DeadLetter]: ...

    async def count(self, reason: str | None = None) -> int: ...


class DeadLetterArchive(Protocol):
    """Dead letters with ids and replay marks, as ``headrace dlq`` lists, shows and replays them:
    the embedded store's, or the Kafka topic's. Whoever opens one closes it."""

    async def count(self, reason: str | None = None) -> int: ...

    async def entries(
        self, reason: str | None = None, limit: int = 100, *, after_id: int = 0, replayed: bool | None = None
    ) -> list[StoredDeadLetter]: ...

    async def get(self, letter_id: int) -> StoredDeadLetter | None: ...

    async def mark_replayed(self, letter_ids: Iterable[int], at: float | None = None) -> int: ...

    async def close(self) -> None: ...


def letter_key(letter: DeadLetter) -> Hashable | None:
    """What makes a dead letter the same as another: its queue, its position there (record
    and event index; a whole record's letter has no index) and its reason; for a letter with
    a ``unit``, its queue, reason and unit. ``None`` when its queue or record is not known:
    such a letter is never taken for another.

    >>> letter_key(DeadLetter("late_arrival", queue=2, sequence_number=40, event_index=3))
    (2, 40, 3, 'late_arrival')
    >>> letter_key(DeadLetter("window_failed", queue=2, sequence_number=40, unit="Totals 'a' [0, 10)"))
    (2, 'window_failed', "Totals 'a' [0, 10)")
    """
    if letter.unit is not None:
        return None if letter.queue is None else (letter.queue, letter.reason, letter.unit)
    if letter.queue is None or letter.sequence_number is None:
        return None
    index = -1 if letter.event_index is None else letter.event_index
    return (letter.queue, letter.sequence_number, index, letter.reason)


def packable(letter: DeadLetter) -> DeadLetter:
    """``letter``, or, when msgpack cannot hold its value, a copy with the value's repr
    instead, saying so in its detail (a store keeps what it can rather than nothing).

    >>> packable(DeadLetter("invalid_value", value={1, 2})).value, packable(DeadLetter("x", value=[1])).value
    ('{1, 2}', [1])
    """
    try:
        msgpack.packb(letter.value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        note = "value stored as its repr (not msgpack-encodable)"
        return replace(letter, value=repr(letter.value), detail=f"{letter.detail}; {note}" if letter.detail else note)
    return letter


def letter_fields(letter: DeadLetter) -> dict[str, Any]:
    """Every field of ``letter`` by name: what a store that serializes letters whole keeps,
    so fields added later are kept too.

    >>> letter_fields(DeadLetter("undecodable", recorded_at=1.0))["reason"]
    'undecodable'
    """
    return {f.name: getattr(letter, f.name) for f in fields(DeadLetter)}


def letter_of(values: Mapping[str, Any]) -> DeadLetter:
    """The letter of :func:`letter_fields`; a field this version does not know (a newer
    writer's) is left out, one it lacks takes its default.

    >>> letter_of({"reason": "late_arrival", "queue": 2, "from_the_future": 1}).queue
    2
    """
    known = {f.name for f in fields(DeadLetter)}
    return DeadLetter(**{name: value for name, value in values.items() if name in known})


class QueueDeadLetters:
    """The dead-letter store as one queue's agent uses it: a letter that does not name its
    queue (the event-time core knows streams, not queues) is recorded with this one."""

    def __init__(self, store: DeadLetterStore, queue: int) -> None:
        self.store = store
        self.queue = queue

    async def add(self, letters: list[DeadLetter]) -> None:
        queue = self.queue
        await self.store.add([x if x.queue is not None else replace(x, queue=queue) for x in letters])

    async def list(self, reason: str | None = None, limit: int = 100) -> list[DeadLetter]:
        return await self.store.list(reason, limit)

    async def count(self, reason: str | None = None) -> int:
        return await self.store.count(reason)
