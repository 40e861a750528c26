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
from datetime import datetime
from typing import Any, Protocol

from ..errors import ConfigurationError


class EventLike(Protocol):
    """What the core reads from an event; :class:`streams.batch.Event` is one.

    ``token`` is opaque to the core (a :class:`~streams.tokens.SequenceToken` in the runtime):
    it is kept so that :meth:`Processor.held_since` can say which position is still held.
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

    >>> OrderingPolicy(out_of_order=5, late_arrival=15).action
    <Action.ADJUST: 'adjust'>
    """

    timestamp_by: str | Extractor | None = None
    over: str | Extractor | None = None
    out_of_order: float = 0.0
    late_arrival: float | None = None
    early_arrival: float | None = None
    action: Action | str = Action.ADJUST

    def __post_init__(self) -> None:
        _check_duration("out_of_order", self.out_of_order, optional=False)
        _check_duration("late_arrival", self.late_arrival, optional=True)
        _check_duration("early_arrival", self.early_arrival, optional=True)
        try:
            object.__setattr__(self, "action", Action(self.action))
        except ValueError:
            allowed = ", ".join(a.value for a in Action)
            raise ConfigurationError(
                f"action must be one of {allowed}, not {self.action!r}"
            ) from None
        for name in ("timestamp_by", "over"):
            spec = getattr(self, name)
            if spec is not None and not (isinstance(spec, str) and spec) and not callable(spec):
                raise ConfigurationError(
                    f"{name} must be a field name or a function of the event, not {spec!r}"
                )

    @property
    def substreams(self) -> bool:
        """True when each ``over`` key has its own watermark."""
        return self.over is not None


def seconds(t: Any) -> float:
    """An event time as POSIX seconds: a number, or an aware ``datetime``."""
    if isinstance(t, float):
        return t
    if isinstance(t, int) and not isinstance(t, bool):
        return float(t)
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise ValueError("a datetime event time needs a timezone (e.g. tzinfo=UTC)")
        return t.timestamp()
    raise ValueError(f"an event time is POSIX seconds or an aware datetime, not {t!r}")


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


def timestamp_extractor(spec: str | Extractor | None) -> Callable[[Any], float] | None:
    """The ``TIMESTAMP BY`` function returning POSIX seconds; ``None`` means ``event_time``.

    The result raises ``ValueError`` (or ``KeyError``/``TypeError``) when the record has no
    usable time; the processor dead-letters such a record with ``invalid_timestamp``.
    """
    if spec is None:
        return None
    if callable(spec):
        user = spec
        return lambda record: seconds(user(record))
    name = spec

    def by_field(record: Any) -> float:
        value = record.value
        raw = value[name] if type(value) is dict or isinstance(value, Mapping) else getattr(value, name)
        return seconds(raw)

    return by_field
