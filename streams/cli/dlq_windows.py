"""``headrace dlq replay`` of ``window_failed`` letters: each window delivered once more to
its consumer type's ``on_window``, in this process.

A ``window_failed`` letter is a window, not events: publishing anything to its stream would
count its events a second time in every window they fall in. So a replay builds the consumer
type the letter names (``cls(stream_id)``, from the application ``--app`` names, as the
worker does) and calls its ``on_window`` with the window as it closed: key, bounds, value,
when it closed and whether it was final. A window is delivered once: a replayed letter is
refused, ``--again`` or not. What ``on_window`` raises is the consumer's: its traceback is
printed and the letter stays unreplayed.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from streams.cli import CliError
from streams.cli.common import utc_text
from streams.core.deadletters import StoredDeadLetter
from streams.core.errors import ConfigurationError
from streams.core.ids import StreamId
from streams.eventtime.results import WindowResult
from streams.runtime.provider import StreamProvider

WINDOW_FAILED = "window_failed"
_NEEDED = ("consumer", "key", "start", "end", "value")


def check_window(stored: StoredDeadLetter) -> None:
    """Refuse a window letter that cannot be delivered once: replayed already, or without
    what a window needs."""
    letter, n = stored.letter, stored.letter_id
    if stored.replayed_at is not None:
        raise CliError(
            f"dead letter {n} is a window delivered already by a replay, at {utc_text(stored.replayed_at)}: "
            "a window is delivered once (again would count its events twice); nothing was replayed"
        )
    value = letter.value
    if not isinstance(value, dict) or any(k not in value for k in _NEEDED) or letter.stream is None:
        raise CliError(f"dead letter {n} ({WINDOW_FAILED}) does not hold a whole window; nothing was replayed")
    if "not msgpack-encodable" in letter.detail:
        raise CliError(
            f"dead letter {n} keeps its window's value as text only (it was not msgpack-encodable): "
            "it cannot be delivered as it was; nothing was replayed"
        )


def window_of(value: dict[str, Any]) -> WindowResult:
    """The window a ``window_failed`` letter's value holds (a key kept as a list, as msgpack
    keeps a tuple, is a tuple again).

    >>> window_of({"key": ["a", 1], "start": 0.0, "end": 10.0, "value": 3, "closed_at": 12.0, "final": False})
    WindowResult(key=('a', 1), start=0.0, end=10.0, value=3, closed_at=12.0, final=False)
    """
    key = value["key"]
    return WindowResult(
        tuple(key) if isinstance(key, list) else key,
        value["start"],
        value["end"],
        value["value"],
        value.get("closed_at"),
        bool(value.get("final", False)),
    )


class ReplayMarks(Protocol):
    """Where replayed letters are marked: the embedded store, or the Kafka dead-letter topic."""

    async def mark_replayed(self, letter_ids: Iterable[int], at: float | None = None) -> int: ...


async def replay_windows(
    letters: ReplayMarks, provider: StreamProvider | None, chosen: Sequence[StoredDeadLetter]
) -> int:
    """Deliver each window of ``chosen`` to its consumer type's ``on_window``, marking each
    replayed as soon as it is delivered; returns how many were."""
    if not chosen:
        return 0
    if provider is None:
        raise CliError(
            "replaying a window_failed dead letter delivers the window to its consumer type: "
            "give the application with --app module:attribute (or app = ... in [worker]); nothing was replayed"
        )
    types = {}
    for stored in chosen:
        check_window(stored)
        name = stored.letter.value["consumer"]
        try:
            types[name] = provider.registry.get_type(name)
        except ConfigurationError as exc:
            raise CliError(f"dead letter {stored.letter_id}: {exc}; nothing was replayed") from None
    for stored in chosen:
        letter = stored.letter
        assert letter.stream is not None
        consumer = letter.value["consumer"]
        try:
            instance = types[consumer](StreamId.parse(letter.stream))
            result = instance.on_window(window_of(letter.value))
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # the consumer's bug: its traceback, and the letter stays
            traceback.print_exc(file=sys.stderr)
            raise CliError(
                f"on_window of {consumer} raised {exc!r} for dead letter {stored.letter_id}; it stays unreplayed"
            ) from None
        await letters.mark_replayed([stored.letter_id])
    return len(chosen)
