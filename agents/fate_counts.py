"""What event time did to the events of each consumer type, counted for ``headrace status``.

Each event-time activation counts the fates of its events (its processor's
:class:`~streams.eventtime.results.Counters`: kept, adjusted, dropped, dead-lettered). An
activation ends (its stream went quiet) but its events' fates should stay counted: a queue's
:class:`FateCounts` keeps the counters of the activations that ended, per consumer type, and
adds the live ones when asked. An activation parked with open windows carries its counters in
its saved state and brings them back when its stream has data again: it is counted once.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from streams.eventtime.results import Counters


class FateCounts:
    """Counters per consumer type name, of activations that ended on one queue.

    >>> counts = FateCounts()
    >>> c = Counters(events=3, adjusted=1)
    >>> counts.ended("Totals", c)
    >>> counts.by_type([("Totals", Counters(events=2))])["Totals"]["events"]
    5
    >>> counts.ended("Totals", Counters(events=4), parked="k")  # parked, then back: once
    >>> counts.restored("k")
    >>> counts.by_type([("Totals", Counters(events=4))])["Totals"]["events"]
    7
    """

    def __init__(self) -> None:
        self._ended: dict[str, dict[str, int]] = {}
        self._parked: dict[Hashable, tuple[str, dict[str, int]]] = {}

    def ended(self, type_name: str, counters: Counters, parked: Hashable | None = None) -> None:
        """An activation of ``type_name`` ended; ``parked``: its state's key, when its state
        was kept here to be restored (its counters then come back with it)."""
        values = counters.as_dict()
        _add(self._ended.setdefault(type_name, {}), values)
        if parked is not None:
            self._parked[parked] = (type_name, values)

    def restored(self, key: Hashable) -> None:
        """The state parked under ``key`` is live again, with its counters."""
        parked = self._parked.pop(key, None)
        if parked is not None:
            type_name, values = parked
            _add(self._ended[type_name], values, sign=-1)

    def by_type(self, live: Iterable[tuple[str, Counters]]) -> dict[str, dict[str, int]]:
        """Counters per type name: the ended activations' plus ``live`` ones'."""
        totals = {name: dict(values) for name, values in self._ended.items()}
        for name, counters in live:
            _add(totals.setdefault(name, {}), counters.as_dict())
        return totals


def _add(into: dict[str, int], values: Mapping[str, int], sign: int = 1) -> None:
    for name, value in values.items():
        into[name] = into.get(name, 0) + sign * value
