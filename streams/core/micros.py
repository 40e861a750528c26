"""Exact time: every instant and duration inside the event-time core is an integer number of
microseconds (Spark's resolution); users give and read seconds.

A value enters once, here: an integer of seconds, milliseconds or microseconds exactly, an
aware ``datetime`` or ISO-8601 text exactly to the microsecond, a float of seconds rounded to
the nearest microsecond. From then on every comparison and every window assignment is on
integers, so an event on a window's edge belongs where the half-open rule says. What a user
reads back is :func:`to_seconds` of the integer: the float nearest to the exact decimal value,
so a 100 ms window holding 0.3 s starts at ``0.3``.

The sentinels ``-inf`` (no watermark yet) and ``+inf`` (completed, never due) pass through
both ways unchanged.

>>> to_micros(0.3), to_micros(1714564805), to_seconds(300_000), to_seconds(1_500_000)
(300000, 1714564805000000, 0.3, 1.5)
>>> to_seconds(to_micros(35.02) - to_micros(5.0)) == 30.02
True
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

PER_SECOND = 1_000_000
"""Microseconds in a second."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(seconds: float) -> int:
    """A finite time or duration in seconds as integer microseconds (an int exactly, a float
    rounded to the nearest microsecond).

    >>> to_micros(0.1) * 3 == to_micros(0.3), to_micros(-0.0000005), to_micros(2)
    (True, 0, 2000000)
    """
    return round(seconds * PER_SECOND)


# Floats of seconds beyond these are no time in any unit (years 1 to 9999 lie well inside):
# event_micros gives NOT_A_TIME for them, where round() would overflow or keep a huge int.
_BEYOND = 1e300
NOT_A_TIME = math.nan
"""An event time that is none (not a finite number): every comparison with it is false."""


def event_micros(t: object) -> int | float:
    """An event's own time (seconds, as an :class:`~streams.core.batch.Event` holds it) as
    integer microseconds, made once where the event is made: an int exactly, a float rounded
    to the nearest microsecond, anything else :data:`NOT_A_TIME` (never raises: the
    event-time core refuses such an event, saying why from its seconds).

    >>> event_micros(0.3), event_micros(2), event_micros(float("nan")) != event_micros(float("nan"))
    (300000, 2000000, True)
    """
    if type(t) is float:
        return round(t * PER_SECOND) if -_BEYOND < t < _BEYOND else NOT_A_TIME
    if isinstance(t, int) and not isinstance(t, bool):
        return t * PER_SECOND
    if isinstance(t, float) and -_BEYOND < t < _BEYOND:
        return round(t * PER_SECOND)
    return NOT_A_TIME


def bound_micros(seconds: float) -> float:
    """:func:`to_micros`, passing the sentinels ``-inf`` and ``+inf`` through (a watermark or
    a due time that may be infinite).

    >>> bound_micros(1.5), bound_micros(float("inf"))
    (1500000, inf)
    """
    if seconds == math.inf or seconds == -math.inf:
        return seconds
    return round(seconds * PER_SECOND)


def to_seconds(micros: float) -> float:
    """Integer microseconds as seconds (the float nearest the exact value); ``±inf`` as is.

    >>> to_seconds(2_300_000), to_seconds(-1), to_seconds(float("-inf"))
    (2.3, -1e-06, -inf)
    """
    return micros / PER_SECOND


def instant_micros(t: object, per_second: int = 1) -> int:
    """An event time as integer microseconds: an integer of 1/``per_second`` seconds (1000:
    epoch milliseconds) exactly, a float of them rounded to the microsecond, an aware
    ``datetime`` or ISO-8601 text with an offset or ``Z`` exactly. Raises ``ValueError`` saying
    why for anything else (the bounds of years 1 to 9999 are the caller's:
    :func:`streams.eventtime.policy.micros_of`).

    >>> instant_micros(1714564805001, 1000), instant_micros("1970-01-01T00:00:00.3Z")
    (1714564805001000, 300000)
    """
    if isinstance(t, int) and not isinstance(t, bool):
        if PER_SECOND % per_second == 0:
            return t * (PER_SECOND // per_second)
        return round(t * PER_SECOND / per_second)
    if type(t) is float or isinstance(t, float):
        if not math.isfinite(t):
            raise ValueError(f"{t!r} is not a finite time")
        return round(t * (PER_SECOND // per_second))
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise ValueError("a datetime event time needs a timezone (e.g. tzinfo=UTC)")
        return (t - _EPOCH) // _MICROSECOND
    if isinstance(t, str):
        try:
            moment = datetime.fromisoformat(t)
        except ValueError:
            raise ValueError(f"{t!r} is not an ISO-8601 time (like 2024-05-01T12:00:01Z)") from None
        if moment.tzinfo is None:
            raise ValueError(f"{t!r} has no UTC offset: add Z or +hh:mm (an ISO-8601 time names its zone)")
        return (moment - _EPOCH) // _MICROSECOND
    raise TypeError(type(t).__name__)


def optional_seconds(micros: float | None) -> float | None:
    """:func:`to_seconds`, with None (no clock known) as is.

    >>> optional_seconds(250_000), optional_seconds(None)
    (0.25, None)
    """
    return None if micros is None else micros / PER_SECOND
