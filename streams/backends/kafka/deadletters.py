"""Dead letters on Kafka: one record a letter in the cluster's dead-letter topic, read the
same from every machine.

The topic is ``<topic>.dlq`` (``dead_letter_topic`` names another), one partition, created
unless it exists. Each letter is one record:

- value: msgpack ``{"format": 1, "letter": {...}}``, every field of the
  :class:`~streams.core.deadletters.DeadLetter` (reason, detail, stream, queue = partition,
  sequence number = offset, event index, the raw record or the event's value and time,
  ...), whatever fields the letter has;
- key: the stream id, as the source record's key (``None`` for a record that never decoded);
- headers, for tools that read only those (``kafka-console-consumer``, kcat):
  ``headrace.kind`` (``letter``), ``headrace.reason``, ``headrace.stream``,
  ``headrace.topic``, ``headrace.partition``, ``headrace.offset``, ``headrace.event_index``.

A letter's id is its record's offset + 1 (ids count from 1, as on the embedded store). :meth:`KafkaDeadLetterStore.add` returns once Kafka
has the records, and the pulling agent awaits it before the positions the letters name can
be acknowledged, so a committed offset never refers to a letter that could be lost. A range
read again (a restart, a rebalance) letters its records again; reading keeps the first
letter of each queue position, event and reason (:func:`~streams.core.deadletters.letter_key`),
so every letter is counted, listed and replayed once. A replay appends a ``replayed`` record
naming the ids and the time: a second replay sees it, as on the embedded store.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import msgpack

from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.topic_log import Headers, LogRecord, TopicLog
from streams.core.clock import wall_time
from streams.core.deadletters import DeadLetter, StoredDeadLetter, letter_fields, letter_key, letter_of, packable
from streams.core.retry import OutageLog

log = logging.getLogger("headrace.kafka")

FORMAT = 1
KIND = "headrace.kind"
LETTER, REPLAYED = b"letter", b"replayed"


def dead_letter_topic(settings: KafkaSettings) -> str:
    """The dead-letter topic of the provider reading ``settings.topic``.

    >>> dead_letter_topic(KafkaSettings("localhost:9092", "sensors"))
    'sensors.dlq'
    >>> dead_letter_topic(KafkaSettings("localhost:9092", "sensors", dead_letter_topic="errors"))
    'errors'
    """
    return settings.dead_letter_topic or f"{settings.topic}.dlq"


def letter_record(letter: DeadLetter, source_topic: str | None = None) -> LogRecord:
    """The record of ``letter`` in the dead-letter topic.

    >>> record = letter_record(DeadLetter("undecodable", queue=3, sequence_number=17, payload=b"x"), "sensors")
    >>> dict(record.headers)["headrace.offset"], decode_letter(record.value).payload
    (b'17', b'x')
    """
    kept = packable(letter)
    value: bytes = msgpack.packb({"format": FORMAT, "letter": letter_fields(kept)}, use_bin_type=True)
    described = {
        "headrace.reason": kept.reason,
        "headrace.stream": kept.stream,
        "headrace.topic": source_topic,
        "headrace.partition": kept.queue,
        "headrace.offset": kept.sequence_number,
        "headrace.event_index": kept.event_index,
    }
    headers: Headers = ((KIND, LETTER),) + tuple(
        (name, str(text).encode()) for name, text in described.items() if text is not None
    )
    return LogRecord(None if kept.stream is None else kept.stream.encode(), value, headers)


def decode_letter(value: bytes | None) -> DeadLetter:
    """The letter of a ``letter`` record's value (``ValueError`` if it holds none)."""
    data = msgpack.unpackb(value or b"\xc0", raw=False, strict_map_key=False)
    if not isinstance(data, Mapping) or data.get("format") != FORMAT or not isinstance(data.get("letter"), Mapping):
        raise ValueError("not a headrace dead letter")
    return letter_of(data["letter"])


class KafkaDeadLetterStore:
    """A :class:`~streams.core.deadletters.DeadLetterStore` in the dead-letter topic, with ids
    (offsets) and replay marks like :class:`~streams.backends.embedded.deadletters.EmbeddedDeadLetterStore`.

    Example (with a broker at 127.0.0.1:9092)::

        letters = KafkaDeadLetterStore(KafkaSettings("127.0.0.1:9092", "sensors"))
        await letters.add([DeadLetter("undecodable", queue=3, sequence_number=17, payload=b"?")])
        [stored] = await letters.entries()  # from any machine
        await letters.mark_replayed([stored.letter_id])
        await letters.close()
    """

    def __init__(self, settings: KafkaSettings, outage: OutageLog | None = None) -> None:
        self.settings = settings
        self.topic = dead_letter_topic(settings)
        self.log = TopicLog(settings, self.topic, outage=outage)
        self._source = settings.topic if len(settings.namespaces) == 1 else None
        self._letters: dict[int, StoredDeadLetter] = {}  # by id, oldest first
        self._ids: dict[Hashable, int] = {}  # letter_key -> the id of its first letter
        self._written: set[Hashable] = set()  # keys this process wrote: not written twice
        self._next = 0  # the offset the next read starts at

    async def add(self, letters: builtins.list[DeadLetter]) -> None:
        """Append ``letters``; returns once Kafka has every one of them."""
        records = []
        for letter in letters:
            key = letter_key(letter)
            if key is not None:
                if key in self._written or key in self._ids:
                    continue
                self._written.add(key)
            records.append(letter_record(letter, self._source))
        try:
            await self.log.append(records)
        except BaseException:
            self._written.difference_update(letter_key(x) for x in letters)  # written next time
            raise

    async def list(self, reason: str | None = None, limit: int = 100) -> builtins.list[DeadLetter]:
        """The oldest ``limit`` dead letters (of one reason), replayed ones included."""
        return [stored.letter for stored in await self.entries(reason, limit)]

    async def count(self, reason: str | None = None) -> int:
        await self.refresh()
        return sum(1 for s in self._letters.values() if reason is None or s.letter.reason == reason)

    async def counts(self) -> dict[str, tuple[int, int]]:
        """reason -> (letters, of them replayed), every reason there is."""
        await self.refresh()
        counts: dict[str, tuple[int, int]] = {}
        for stored in self._letters.values():
            n, replayed = counts.get(stored.letter.reason, (0, 0))
            counts[stored.letter.reason] = (n + 1, replayed + (stored.replayed_at is not None))
        return dict(sorted(counts.items()))

    async def entries(
        self,
        reason: str | None = None,
        limit: int = 100,
        *,
        after_id: int = 0,
        replayed: bool | None = None,
    ) -> builtins.list[StoredDeadLetter]:
        """Dead letters with their ids, oldest first; page with ``after_id``; ``replayed``
        True or False keeps only those replayed, or not yet replayed."""
        await self.refresh()
        found = []
        for letter_id, stored in self._letters.items():
            if letter_id <= after_id:
                continue
            if reason is not None and stored.letter.reason != reason:
                continue
            if replayed is not None and (stored.replayed_at is not None) != replayed:
                continue
            found.append(stored)
            if len(found) == limit:
                break
        return found

    async def latest(self, limit: int) -> builtins.list[StoredDeadLetter]:
        """The ``limit`` newest dead letters, newest first."""
        await self.refresh()
        newest = sorted(self._letters)[-limit:] if limit > 0 else []
        return [self._letters[letter_id] for letter_id in reversed(newest)]

    async def get(self, letter_id: int) -> StoredDeadLetter | None:
        await self.refresh()
        return self._letters.get(letter_id)

    async def mark_replayed(self, letter_ids: Iterable[int], at: float | None = None) -> int:
        """Mark dead letters as replayed (one record naming them); how many of the ids exist."""
        await self.refresh()
        known = [i for i in dict.fromkeys(letter_ids) if i in self._letters]
        if not known:
            return 0
        when = wall_time() if at is None else at
        value: bytes = msgpack.packb({"format": FORMAT, "replayed": known, "at": when})
        await self.log.append([LogRecord(None, value, ((KIND, REPLAYED),))])
        await self.refresh()
        return len(known)

    async def refresh(self) -> None:
        """Read what was written since the last read, by any worker."""
        for record in await self.log.read(self._next):
            self._next = max(self._next, record.offset + 1)
            kind = dict(record.headers).get(KIND)
            try:
                if kind == LETTER:
                    self._take_letter(record)
                elif kind == REPLAYED:
                    self._take_replayed(record)
                else:
                    raise ValueError(f"no {KIND} header")
            except Exception as exc:  # another program's record, or a newer format
                log.warning(
                    "dead-letter topic %r: offset %d is not a headrace record (%s); skipped",
                    self.topic,
                    record.offset,
                    exc,
                )

    def _take_letter(self, record: LogRecord) -> None:
        letter = decode_letter(record.value)
        key = letter_key(letter)
        if key is not None:
            if key in self._ids:
                return  # the same position letters the same again: kept once
            self._ids[key] = record.offset + 1
        self._letters[record.offset + 1] = StoredDeadLetter(record.offset + 1, letter)

    def _take_replayed(self, record: LogRecord) -> None:
        data: Any = msgpack.unpackb(record.value or b"\xc0")
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError("not a headrace replay mark")
        for letter_id in data["replayed"]:
            stored = self._letters.get(letter_id)
            if stored is not None:
                self._letters[letter_id] = StoredDeadLetter(letter_id, stored.letter, float(data["at"]))

    async def close(self) -> None:
        await self.log.close()
