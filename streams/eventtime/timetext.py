"""Times written as text: durations (``250ms``, ``5s``), instants (ISO-8601 or POSIX seconds)
and window specs (``tumbling:1m``, ``session:30s``).

One parser for each, shared by the command line and the configuration file, so a duration
means the same wherever a user writes it. Every error names where the text came from
(``where``: an option, a configuration key, a line) and raises :class:`ConfigurationError`.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from streams.core.errors import ConfigurationError
from streams.eventtime.windows import Hopping, Session, Sliding, Tumbling, WindowSpec

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)?$")


def instant_text(t: float) -> str:
    """An instant in POSIX seconds as log lines and status show it: ISO-8601 in UTC (to the
    millisecond when it has a fraction), and ``-inf`` for a watermark no event has moved yet.

    >>> instant_text(1714565220.0), instant_text(1714565220.25), instant_text(float("-inf"))
    ('2024-05-01T12:07:00Z', '2024-05-01T12:07:00.250Z', '-inf')
    """
    if not math.isfinite(t):
        return "-inf" if t < 0 else "+inf"
    timespec = "seconds" if t == int(t) else "milliseconds"
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_duration(value: str | float | int, where: str) -> float:
    """Seconds from ``250ms``, ``5s``, ``2m``, ``1h``, ``1d``, a plain number of seconds
    (as text or as a number).

    >>> parse_duration("250ms", "--x"), parse_duration("2m", "--x"), parse_duration(1.5, "--x")
    (0.25, 120.0, 1.5)
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigurationError(f"{where}: a duration is finite, not {value!r}")
        if value < 0:
            raise ConfigurationError(f"{where}: a duration cannot be negative: {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigurationError(f"{where}: {value!r} is not a duration (like 250ms, 5s, 2m, 1h or seconds)")
    cleaned = value.strip().lower()
    if cleaned.startswith("-"):
        raise ConfigurationError(f"{where}: a duration cannot be negative: {value!r}")
    match = _DURATION.match(cleaned)
    if not match:
        raise ConfigurationError(f"{where}: {value!r} is not a duration (like 250ms, 5s, 2m, 1h or seconds)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def parse_instant(text: str, where: str) -> tuple[float, datetime | None]:
    """POSIX seconds from a number of seconds or an ISO-8601 time (UTC when it names no
    zone), with the parsed datetime when it was ISO-8601 (``None`` for a number).

    >>> parse_instant("2024-05-01T12:07:00Z", "x")[0], parse_instant("17.5", "x")
    (1714565220.0, (17.5, None))
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds):
            raise ConfigurationError(f"{where}: {text!r} is not a finite time")
        return seconds, None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"{where}: {text!r} is neither a number of seconds nor an ISO-8601 time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp(), moment


def parse_window(text: str, where: str) -> WindowSpec:
    """``tumbling:SIZE``, ``hopping:SIZE:HOP``, ``session:GAP`` or ``sliding:SPAN`` (sizes
    are durations); windows of events: ``tumbling:Nev``, ``hopping:Nev:Mev``.

    >>> parse_window("hopping:10m:1m", "window")
    Hopping(size=600.0, hop=60.0, allowed_lateness=0.0, idle_timeout=None, origin=0.0, events=None, every=None)
    >>> parse_window("session:30s", "window")
    Session(gap=30.0, allowed_lateness=0.0, idle_timeout=None)
    >>> parse_window("hopping:10ev:5ev", "window").every
    5
    >>> parse_window("sliding:5m", "window")
    Sliding(span=300.0, allowed_lateness=0.0)
    """
    kind, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    if parts and all(p.endswith("ev") and p[:-2].isdigit() for p in parts):  # windows of events
        counts = [int(p[:-2]) for p in parts]
        if kind == "tumbling" and len(counts) == 1:
            return Tumbling(events=counts[0])
        if kind == "hopping" and len(counts) == 2:
            return Hopping(events=counts[0], every=counts[1])
    if kind == "session" and len(parts) == 1:
        gap = parse_duration(parts[0], f"{where} gap")
        if gap <= 0:
            raise ConfigurationError(f"{where}: a session gap must be more than 0, not {text!r}")
        return Session(gap)
    if kind == "sliding" and len(parts) == 1:
        span = parse_duration(parts[0], f"{where} span")
        if span <= 0:
            raise ConfigurationError(f"{where}: a sliding span must be more than 0, not {text!r}")
        return Sliding(span)
    if kind == "tumbling" and len(parts) == 1:
        size = hop = parse_duration(parts[0], f"{where} size")
    elif kind == "hopping" and len(parts) == 2:
        size = parse_duration(parts[0], f"{where} size")
        hop = parse_duration(parts[1], f"{where} hop")
    else:
        raise ConfigurationError(
            f"{where} takes tumbling:SIZE, hopping:SIZE:HOP, session:GAP or sliding:SPAN, not {text!r}"
        )
    if size <= 0 or hop <= 0:
        raise ConfigurationError(f"{where}: sizes and hops must be more than 0, not {text!r}")
    return Tumbling(size) if kind == "tumbling" else Hopping(size, hop)
