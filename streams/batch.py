"""Batch containers: the unit a queue carries.

One queue message holds several events of one stream, msgpack-encoded, each with its event
time. A container is also how punctuation (an explicit watermark) and stream completion travel,
so that they reach consumers in order with the events around them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgpack

from .errors import DecodeError, EncodeError
from .ids import QueueId, StreamId
from .tokens import SequenceToken

MAGIC = "hr1"


class BatchKind(enum.IntEnum):
    DATA = 0
    WATERMARK = 1  # a producer's punctuation (StreamInsight CTI); values = [timestamp]
    COMPLETED = 2  # the producer called on_completed()


class Event:
    """One event as a consumer sees it.

    ``event_time`` and ``arrival_time`` are POSIX seconds (floats); with no event time given
    at ``on_next`` the event time is the arrival time.
    """

    __slots__ = ("value", "event_time", "arrival_time", "token", "stream_id")

    def __init__(
        self,
        value: Any,
        event_time: float,
        arrival_time: float,
        token: SequenceToken,
        stream_id: StreamId,
    ) -> None:
        self.value = value
        self.event_time = event_time
        self.arrival_time = arrival_time
        self.token = token
        self.stream_id = stream_id

    def __repr__(self) -> str:
        return (
            f"Event({self.value!r}, event_time={self.event_time!r}, "
            f"token={self.token}, stream_id={self.stream_id!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.token, self.stream_id, self.value, self.event_time) == (
            other.token,
            other.stream_id,
            other.value,
            other.event_time,
        )

    __hash__ = None  # type: ignore[assignment]


def to_seconds(t: float | int | datetime | None) -> float | None:
    """Normalise an event time: POSIX seconds or an aware ``datetime``."""
    if t is None:
        return None
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise EncodeError("an event time datetime needs a timezone (e.g. tzinfo=UTC)")
        return t.timestamp()
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    raise EncodeError(f"an event time is POSIX seconds or an aware datetime, not {t!r}")


def _unencodable(value: Any, path: str = "value") -> str:
    """Name the first part of ``value`` msgpack cannot encode, for the error message."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int, bytes, float, bool)) and k is not None:
                return f"{path} key of type {type(k).__name__!r}"
            found = _unencodable(v, f"{path}[{k!r}]")
            if found:
                return found
        return ""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _unencodable(v, f"{path}[{i}]")
            if found:
                return found
        return ""
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return ""
    return f"{path} of type {type(value).__name__!r}"


@dataclass(frozen=True, slots=True)
class BatchContainer:
    """The decoded form of one queue message."""

    stream_id: StreamId
    kind: BatchKind
    arrival_time: float
    values: Sequence[Any]
    event_times: Sequence[float | None] | None = None

    def encode(self) -> bytes:
        try:
            return msgpack.packb(
                [
                    MAGIC,
                    int(self.kind),
                    self.stream_id.namespace,
                    self.stream_id.key,
                    self.arrival_time,
                    list(self.values),
                    None if self.event_times is None else list(self.event_times),
                ],
                use_bin_type=True,
            )
        except (TypeError, ValueError, OverflowError) as exc:
            where = _unencodable(list(self.values)) or str(exc)
            raise EncodeError(
                f"cannot encode {where} for stream {self.stream_id}: values must be "
                "msgpack types (None, bool, int, float, str, bytes, list, dict); "
                "nothing was enqueued"
            ) from None

    @staticmethod
    def decode(payload: bytes) -> BatchContainer:
        try:
            obj = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
        except Exception as exc:  # msgpack raises several types for corrupt input
            raise DecodeError(f"not msgpack: {exc}") from None
        if not (isinstance(obj, list) and len(obj) == 7 and obj[0] == MAGIC):
            raise DecodeError("not a headrace batch container (bad header)")
        _, kind, namespace, key, arrival, values, times = obj
        try:
            container = BatchContainer(
                StreamId(namespace, key), BatchKind(kind), float(arrival), values, times
            )
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"malformed batch container: {exc}") from None
        if not isinstance(values, list) or (
            times is not None and (not isinstance(times, list) or len(times) != len(values))
        ):
            raise DecodeError("malformed batch container: values and event times disagree")
        return container

    def events(self, sequence_number: int) -> list[Event]:
        """The container's events, with tokens ``sequence_number:i``."""
        sid, arrival, times = self.stream_id, self.arrival_time, self.event_times
        if times is None:
            return [
                Event(v, arrival, arrival, SequenceToken(sequence_number, i), sid)
                for i, v in enumerate(self.values)
            ]
        return [
            Event(v, arrival if t is None else t, arrival, SequenceToken(sequence_number, i), sid)
            for i, (v, t) in enumerate(zip(self.values, times))
        ]


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """What a receiver returns: one raw record of a queue at its position.

    Decoding happens in the pulling agent, so that a record that is not a batch container is
    dead-lettered in one place, with its raw bytes, queue and offset, whatever the adapter.
    """

    queue: QueueId
    sequence_number: int
    payload: bytes
    enqueued_time: float | None = None

    @property
    def token(self) -> SequenceToken:
        return SequenceToken(self.sequence_number, 0)
