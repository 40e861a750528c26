"""The merged inputs of a processor: each one's clock, watermark and idle bookkeeping, and
which input follows (imports) another's watermark.

>>> check_acyclic({"prices": "tolls"})
>>> check_acyclic({"a": "b", "b": "a"})
Traceback (most recent call last):
...
streams.core.errors.ConfigurationError: imports form a cycle through input 'a'
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from streams.core.errors import ConfigurationError
from streams.eventtime.joins import JoinStore
from streams.eventtime.sessions import SessionStore
from streams.eventtime.watermark import FOREVER, NEVER, Watermark, WatermarkGeneration
from streams.eventtime.windows import WindowStore

Store = WindowStore | SessionStore | JoinStore
"""The open windows governed by one watermark: fixed windows' panes, sessions, or the state
of an interval join."""

Lane = tuple[Watermark, Store | None]
"""A substream's watermark and its windows (None without a window)."""


class Input:
    """One merged input (a partition or a stream): its clock and watermark.

    With substreams, ``mark`` is the partition's *floor*: what every substream has passed.
    """

    __slots__ = ("name", "clock", "mark", "idle_check", "completed", "importers", "imported", "floor_close")

    def __init__(self, name: Hashable, generation: WatermarkGeneration | None, delay: float) -> None:
        self.name = name
        self.clock = NEVER  # processing clock: the newest arrival time seen
        self.mark = Watermark(name, generation, delay)
        self.idle_check = FOREVER  # lower bound of the next idle timeout due
        self.completed = False
        self.importers: tuple[Input, ...] = ()  # the inputs following this one's watermark
        self.imported = generation is None
        # Substreams: at most the earliest close time of any substream's windows. A rise of
        # the floor (mark) below it closes nothing, so it need not visit every substream.
        self.floor_close = FOREVER


def check_acyclic(imports: Mapping[Hashable, Hashable]) -> None:
    """Refuse imports that follow each other round in a cycle."""
    for start in imports:
        seen, node = {start}, imports[start]
        while node in imports:
            if node in seen:
                raise ConfigurationError(f"imports form a cycle through input {node!r}")
            seen.add(node)
            node = imports[node]
