"""The ordering policy: how an event's timestamp is chosen and what happens to disorder.

This is ASA's *event ordering* page in one object: ``TIMESTAMP BY`` (an extractor or a field
name), ``OVER`` (substreams), the out-of-order, late-arrival and early-arrival tolerances and
the action taken on a violation (StreamInsight's ``AdvanceTimePolicy`` plus Atlas' "accept and
let the windows decide").
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from streams.core.errors import ConfigurationError
from streams.core.micros import PER_SECOND, instant_micros


class EventLike(Protocol):
    """What the core reads from an event; :class:`streams.core.batch.Event` is one.

    ``token`` is opaque to the core (a :class:`~streams.core.ids.SequenceToken` in the runtime):
    it is kept so that :meth:`Processor.held_since` can say which position is still held.
    An event that also has ``event_us`` and ``arrival_us`` (the same times in integer
    microseconds, as an ``Event`` has them) is read by those: the core converts the seconds
    of one that has not, per event.
    """

    @property
    def value(self) -> Any: ...

    @property
    def event_time(self) -> float: ...

    @property
    def arrival_time(self) -> float: ...

    @property
    def token(self) -> Any: ...


Extractor = Callable[[Any], Any]
"""A function of the event record (not of its value): ``lambda e: e.value["ts"]``."""


class Action(str, enum.Enum):
    """What to do with an event that breaks a tolerance."""

    ADJUST = "adjust"  # move its timestamp (ASA, StreamInsight "Adjust")
    DROP = "drop"  # discard it, as a dead letter with the reason
    ACCEPT = "accept"  # keep it unchanged; closed windows refuse it (Atlas, Flink)


class Reason(str, enum.Enum):
    """Why an event was adjusted, dropped or dead-lettered."""

    EARLY_ARRIVAL = "early_arrival"
    LATE_ARRIVAL = "late_arrival"
    OUT_OF_ORDER = "out_of_order"
    WINDOW_CLOSED = "window_closed"
    INVALID_TIMESTAMP = "invalid_timestamp"
    INVALID_VALUE = "invalid_value"  # its key or aggregate raised: the event fits no window
    DUPLICATE = "duplicate"  # its dedup key was seen within the horizon (Dedup)


def _check_duration(name: str, value: float | None, *, optional: bool) -> None:
    if value is None and optional:
        return
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or math.isnan(value)
        or math.isinf(value)
        or value < 0
    ):
        what = "a duration in seconds >= 0" + (" or None (off)" if optional else "")
        raise ConfigurationError(f"{name} must be {what}, not {value!r}")


@dataclass(frozen=True, slots=True)
class OrderingPolicy:
    """ASA's event-ordering settings, as one value.

    - ``timestamp_by``: where the event time comes from: ``None`` (the event's own
      ``event_time``, itself the arrival time when the producer gave none), a field name of the
      value (a mapping key or an attribute), or an :data:`Extractor` of the event record.
    - ``over``: the substream key (``TIMESTAMP BY … OVER key``): a field name or an extractor;
      each key then has its own watermark. ``None``: one watermark per partition.
    - ``out_of_order``, ``late_arrival``, ``early_arrival``: tolerances in seconds
      (``late_arrival`` and ``early_arrival`` are off when ``None``).
    - ``action``: :class:`Action` (or its string).
    - ``unit``: what a number read by ``timestamp_by`` counts: ``s`` (POSIX seconds), ``ms``
      or ``us`` (epoch milliseconds, microseconds). ISO-8601 text (with an offset or ``Z``)
      and aware datetimes are read as they are. The event's own ``event_time`` is always
      seconds.

    >>> OrderingPolicy(out_of_order=5, late_arrival=15).action
    <Action.ADJUST: 'adjust'>
    """

    timestamp_by: str | Extractor | None = None
    over: str | Extractor | None = None
    out_of_order: float = 0.0
    late_arrival: float | None = None
    early_arrival: float | None = None
    action: Action | str = Action.ADJUST
    unit: str = "s"

    def __post_init__(self) -> None:
        if self.unit not in _UNITS:
            raise ConfigurationError(f"unit must be one of {', '.join(_UNITS)}, not {self.unit!r}")
        _check_duration("out_of_order", self.out_of_order, optional=False)
        _check_duration("late_arrival", self.late_arrival, optional=True)
        _check_duration("early_arrival", self.early_arrival, optional=True)
        try:
            object.__setattr__(self, "action", Action(self.action))
        except ValueError:
            allowed = ", ".join(a.value for a in Action)
            raise ConfigurationError(f"action must be one of {allowed}, not {self.action!r}") from None
        for name in ("timestamp_by", "over"):
            spec = getattr(self, name)
            if spec is not None and not (isinstance(spec, str) and spec) and not callable(spec):
                raise ConfigurationError(f"{name} must be a field name or a function of the event, not {spec!r}")

    @property
    def substreams(self) -> bool:
        """True when each ``over`` key has its own watermark."""
        return self.over is not None


# The instants a handoff can hold: Spark's timestamps run from year 1 to year 9999.
EARLIEST = -62135596800.0  # 0001-01-01T00:00:00Z
LATEST = 253402300800.0  # 10000-01-01T00:00:00Z, excluded
EARLIEST_US, LATEST_US = int(EARLIEST) * PER_SECOND, int(LATEST) * PER_SECOND

_UNITS = {"s": 1, "ms": 1000, "us": 1_000_000}  # a number read by timestamp_by, divided by


def time_problem(t: Any) -> str:
    """Why ``t`` is not a usable event time (POSIX seconds from year 1 to 9999).

    >>> time_problem(1.7e15)
    "1.7e+15 s is beyond year 9999, which no handoff can hold (epoch milliseconds or microseconds given as seconds? set OrderingPolicy(unit='ms') or unit='us')"
    """
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return f"an event time is POSIX seconds, an aware datetime or ISO-8601 text, not {t!r}"
    if not math.isfinite(t):
        return f"{t!r} is not a finite time"
    if t > 0:  # refused: at or beyond year 10000 (to the microsecond)
        return (
            f"{t:g} s is beyond year 9999, which no handoff can hold (epoch milliseconds or "
            "microseconds given as seconds? set OrderingPolicy(unit='ms') or unit='us')"
        )
    return f"{t:g} s is before year 1, which no handoff can hold"


def micros_of(t: Any, per_second: int = 1) -> int:
    """An event time as integer microseconds (:mod:`streams.core.micros`): a number (of
    seconds, or of 1/``per_second`` seconds: 1000 for epoch milliseconds), an aware
    ``datetime``, or ISO-8601 text with an offset or ``Z``. Raises ``ValueError`` saying why
    for anything else, and for a time outside years 1 to 9999.

    >>> micros_of("2024-05-01T14:00:05.25+02:00"), micros_of(1714564805001, 1000)
    (1714564805250000, 1714564805001000)
    """
    try:
        us = instant_micros(t, per_second)
    except TypeError:
        raise ValueError(time_problem(t)) from None
    except ValueError:
        if isinstance(t, float):  # NaN or infinite: the same words as any unusable number
            raise ValueError(time_problem(t)) from None
        raise
    if not (EARLIEST_US <= us < LATEST_US):
        raise ValueError(time_problem(us / PER_SECOND))
    return us


def field_getter(name: str) -> Callable[[Any], Any]:
    """A function reading field ``name`` of an event's value (a mapping key or an attribute);
    ``None`` when the value has no such field.

    >>> from types import SimpleNamespace as NS
    >>> field_getter("device")(NS(value={"device": "d1"}))
    'd1'
    """

    def get(record: Any) -> Any:
        value = record.value
        if type(value) is dict or isinstance(value, Mapping):  # exact type first: ABC checks are slow
            return value.get(name)
        return getattr(value, name, None)

    get.__name__ = f"field_{name}"
    return get


def key_extractor(spec: str | Extractor | None) -> Callable[[Any], Hashable] | None:
    """The key function for ``over`` or ``group_by``: a field name or a function; None: no key."""
    if spec is None or callable(spec):
        return spec
    return field_getter(spec)


def missing_field(name: str, value: Any) -> str:
    """Why an event's value has no field ``name``, naming the fields it has (a typo in
    ``timestamp_by`` shows at once).

    >>> missing_field("ts", {"user": "u1", "page": "/", "t": 5})
    "field 'ts' missing; fields present: user, page, t"
    >>> missing_field("ts", [1, 2])
    "field 'ts' missing: the event's value is a list, not a mapping or an object with fields"
    """
    if isinstance(value, Mapping):
        names = [str(k) for k in value]
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        names = list(vars(value))
    else:
        return f"field {name!r} missing: the event's value is a {type(value).__name__}, not a mapping or an object with fields"
    shown = ", ".join(names[:_FIELDS_SHOWN]) + (f", ... ({len(names)} in all)" if len(names) > _FIELDS_SHOWN else "")
    return f"field {name!r} missing; fields present: {shown or '(none)'}"


_FIELDS_SHOWN = 20  # a letter's detail names at most these many of a value's fields


def timestamp_extractor(spec: str | Extractor | None, unit: str = "s") -> Callable[[Any], int] | None:
    """The ``TIMESTAMP BY`` function returning integer microseconds; ``None`` means ``event_time``.

    Numbers it reads are in ``unit`` (``s``, ``ms`` or ``us``); ISO-8601 text and datetimes
    name their instant. The result raises ``ValueError`` (or ``KeyError``/``TypeError``)
    when the record has no usable time; the processor dead-letters such a record with
    ``invalid_timestamp``.
    """
    if spec is None:
        return None
    per_second = _UNITS[unit]
    if callable(spec):
        user = spec

        def by_user(record: Any) -> int:
            return micros_of(user(record), per_second)

        by_user.user_code = True  # type: ignore[attr-defined]  # a refusal keeps its traceback
        return by_user
    name = spec

    def by_field(record: Any) -> int:
        value = record.value
        try:
            raw = value[name] if type(value) is dict or isinstance(value, Mapping) else getattr(value, name)
        except (KeyError, AttributeError):
            # The letter's detail: what a typo in the name needs (not KeyError's bare 'ts').
            raise ValueError(missing_field(name, value)) from None
        return micros_of(raw, per_second)

    # What the core's in-order runs read from values alone (streams.eventtime.ingest).
    by_field.field = name  # type: ignore[attr-defined]
    by_field.per_second = per_second  # type: ignore[attr-defined]
    return by_field
