"""Watermarks: one per partition or substream, and the minimum over merged inputs.

A watermark ``W`` is a promise about event time: nothing below it is expected any more. It
moves only forwards, from three sources: the events themselves (the newest timestamp minus the
out-of-order delay, generated at a chosen frequency: StreamInsight's
``AdvanceTimeGenerationSettings``), the processing clock (arrival time minus the late-arrival
tolerance, ASA's rule for a silent partition), and explicit punctuation or an imported
watermark (StreamInsight CTIs).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from streams.core.errors import ConfigurationError
from streams.core.micros import to_micros, to_seconds

NEVER = -math.inf
FOREVER = math.inf

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WatermarkGeneration:
    """How often events generate a watermark (StreamInsight's generation frequency).

    Exactly one of: every ``events`` events (1: every event, the default), or whenever the
    newest event time has moved by ``duration`` seconds since the last generated watermark.
    The generated value is always ``newest timestamp - out_of_order``.

    >>> WatermarkGeneration.every(events=10)
    WatermarkGeneration(events=10, duration=None)
    >>> WatermarkGeneration.every(duration=5.0).events is None
    True
    """

    events: int | None = 1
    duration: float | None = None

    def __post_init__(self) -> None:
        if (self.events is None) == (self.duration is None):
            raise ConfigurationError("watermark generation takes exactly one of events=N or duration=T")
        if self.events is not None and (
            not isinstance(self.events, int) or isinstance(self.events, bool) or self.events < 1
        ):
            raise ConfigurationError(f"generation every N events needs N >= 1, not {self.events!r}")
        if self.duration is not None and not (isinstance(self.duration, (int, float)) and 0 < self.duration < FOREVER):
            raise ConfigurationError(f"generation every T of event time needs T > 0 seconds, not {self.duration!r}")

    @classmethod
    def every(cls, *, events: int | None = None, duration: float | None = None) -> WatermarkGeneration:
        """Every ``events`` events, or every ``duration`` seconds of event time."""
        return cls(events=events, duration=duration)

    @property
    def every_event(self) -> bool:
        return self.events == 1


EVERY_EVENT = WatermarkGeneration()


class _Generating:
    """How a watermark generates, shared by every watermark of a declaration: every
    ``every`` events, or every ``duration`` microseconds of event time, ``delay`` behind the
    newest timestamp."""

    __slots__ = ("every", "duration", "delay")

    def __init__(self, generation: WatermarkGeneration, delay: float) -> None:
        self.every = generation.events
        self.duration = None if generation.duration is None else to_micros(generation.duration)
        self.delay = delay


# One rule per (generation, delay), so the many watermarks of a declaration (a stream's each,
# a substream's each) hold a pointer to it, not four slots of their own.
_RULES: dict[tuple[WatermarkGeneration, float], _Generating] = {}


def _rule_of(generation: WatermarkGeneration | None, delay: float) -> _Generating | None:
    if generation is None:
        return None  # imported: never generated
    rule = _RULES.get((generation, delay))
    if rule is None:
        rule = _RULES[(generation, delay)] = _Generating(generation, delay)
    return rule


class Watermark:
    """The watermark of one partition or one substream, and what it has seen.

    Its times are integer microseconds (:mod:`streams.core.micros`), ``-inf`` before any.
    ``value`` only grows. ``observe(ts)`` records a kept timestamp and returns the candidate
    the generation frequency produces now (``-inf`` when it produces none); the caller takes
    the maximum with its other sources and calls :meth:`raise_to`.

    >>> w = Watermark("p0", WatermarkGeneration.every(events=2), delay=1_000_000)
    >>> w.observe(10_000_000), w.observe(12_000_000)
    (-inf, 11000000)
    >>> w.raise_to(11_000_000), w.raise_to(3_000_000), w.value
    (True, False, 11000000)
    """

    __slots__ = ("name", "value", "max_timestamp", "last_ingest", "generating", "_count", "_mark")

    def __init__(
        self,
        name: Hashable,
        generation: WatermarkGeneration | None = EVERY_EVENT,
        delay: float = 0.0,
        start: float = NEVER,
    ) -> None:
        self.name = name
        self.value = start
        self.max_timestamp = NEVER
        self.last_ingest = NEVER  # arrival time of the last kept event (idle timeouts)
        # Its generation rule, shared by its declaration's watermarks; None: imported, never generated.
        self.generating = _rule_of(generation, delay)
        self._count = 0
        self._mark = NEVER

    @property
    def delay(self) -> float:
        """How far behind the newest timestamp it generates (the out-of-order tolerance)."""
        return 0.0 if self.generating is None else self.generating.delay

    def observe(self, timestamp: float) -> float:
        """Record one kept event's timestamp; the generated candidate, or ``-inf``."""
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        rule = self.generating
        if rule is None:
            return NEVER
        if rule.every is not None:
            self._count += 1
            if self._count < rule.every:
                return NEVER
            self._count = 0
        elif self.max_timestamp < self._mark + rule.duration:  # type: ignore[operator]
            return NEVER
        else:
            self._mark = self.max_timestamp
        return self.max_timestamp - rule.delay

    def raise_to(self, value: float) -> bool:
        """Move to at least ``value``; True when it moved."""
        if value > self.value:
            self.value = value
            return True
        return False

    def __repr__(self) -> str:
        return f"Watermark({self.name!r}, value={self.value})"


class MergedWatermark:
    """The minimum of several inputs' watermarks, and which input holds it back.

    ASA emits nothing at ``t`` until every merged partition has passed ``t``; StreamInsight's
    union and join release up to the oldest CTI. The *holder* is the input with the lowest
    watermark (the first declared, among equals).

    >>> m = MergedWatermark(["p0", "p1"])  # in microseconds, as every watermark of the core
    >>> m.update("p0", 5_000_000), m.value, m.holder
    (False, -inf, 'p1')
    >>> m.update("p1", 7_000_000), m.value, m.holder
    (True, 5000000, 'p0')
    """

    __slots__ = ("_values", "value", "holder", "_reported")

    def __init__(self, inputs: Iterable[Hashable]) -> None:
        self._values: dict[Hashable, float] = {name: NEVER for name in inputs}
        if not self._values:
            raise ConfigurationError("a merged watermark needs at least one input")
        self.value = NEVER
        self.holder: Hashable = next(iter(self._values))
        self._reported: Hashable | None = None

    def update(self, name: Hashable, value: float) -> bool:
        """Input ``name``'s watermark is now ``value``; True when the minimum moved."""
        values = self._values
        was_holder = name == self.holder
        values[name] = value
        if not was_holder:
            if value > self.value:
                self._note_held_back(name)
            return False
        holder = min(values, key=values.__getitem__)  # first minimal in declaration order
        self.holder = holder
        lowest = values[holder]
        if lowest > self.value:
            self.value = lowest
            self._reported = None
            return True
        return False

    def _note_held_back(self, moved: Hashable) -> None:
        # One debug line per episode: the holder held the minimum while another input moved
        # on. Debug: in a worker, agents.merged_inputs.HoldBack says it once it has lasted,
        # with what to do, and one line is what a user should read (metrics().holder has it).
        if self._reported != self.holder:
            self._reported = self.holder
            log.debug(
                "merged watermark held at %s by input %r (input %r is at %s)",
                to_seconds(self.value),
                self.holder,
                moved,
                to_seconds(self._values[moved]),
            )

    def values(self) -> dict[Hashable, float]:
        """Each input's watermark."""
        return dict(self._values)
