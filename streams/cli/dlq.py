"""``headrace dlq``: list, show and replay dead letters.

Dead letters are what the runtime refused or could not deliver, kept in the store with a
reason (``late_arrival``, ``out_of_order``, ``early_arrival``, ``duplicate``, ``window_closed``,
``invalid_timestamp``, ``invalid_value``, ``delivery_failed``, ``handoff_failed``,
``undecodable``, ...). ``--reason`` refuses a reason the runtime never gives unless a dead
letter in the store has it (an adapter's own). ``replay`` publishes a dead letter's value
again, with its event time, to its stream (or to ``--to``), then marks it
replayed: every consumer of that stream sees it as a new event. On Kafka (``--config`` naming
a Kafka adapter, or ``--app``), the dead letters are the cluster's dead-letter topic, the
same from any machine; a replay is marked there. A dead letter is kept after
its replay; ``replay`` refuses one already replayed unless ``--again``. An ``undecodable``
dead letter is a raw record that never decoded: it has no value to publish and cannot be
replayed (``show`` prints its bytes). A ``window_failed`` dead letter is a window whose
``on_window`` failed: ``replay`` delivers that window to its consumer type's ``on_window``
(``--app`` names the application), once; docs/cli.md says what replay does for each reason.

``headrace dlq replay`` of ``window_failed`` letters: each window delivered once more to
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

import argparse
import contextlib
import inspect
import json
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from streams.cli import CliError
from streams.cli.common import (
    add_config_options,
    add_row,
    console,
    existing_store,
    in_cluster,
    load_app,
    load_cli_config,
    load_provider,
    plural,
    table,
    utc_text,
)
from streams.core.deadletters import DeadLetterArchive, StoredDeadLetter
from streams.core.errors import ConfigurationError
from streams.core.ids import StreamId
from streams.eventtime.results import WindowResult
from streams.runtime.provider import StreamProvider
from streams.runtime.snapshot import DEAD_LETTER_REASONS

EXAMPLES = """examples:
  headrace dlq list --path ./store
  headrace dlq list --config kafka.toml       # a Kafka adapter: the cluster's dead-letter topic
  headrace dlq list --app myapp.streams:provider
  headrace dlq list --path ./store --reason late_arrival --limit 20 --json
  headrace dlq show --path ./store 42
  headrace dlq replay --path ./store 42 43
  headrace dlq replay --path ./store --reason delivery_failed
  headrace dlq replay --path ./store 42 --to sensors/s-1-reprocessed
  headrace dlq replay --path ./store --reason window_failed --app myapp.streams:provider
"""

_PAGE = 500  # dead letters read, and events published, at a time
_PREVIEW = 60  # characters of a value in the list


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="list, show and replay dead letters",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser(
        "list", help="dead letters, oldest first", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_config_options(listing)
    listing.add_argument("--reason", help="only this reason")
    listing.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")
    listing.add_argument("--after", type=int, default=0, metavar="ID", help="only ids above ID (the next page)")
    listing.add_argument("--pending", action="store_true", help="only those not replayed yet")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")

    show = actions.add_parser(
        "show", help="one dead letter in full", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_config_options(show)
    show.add_argument("id", type=int, metavar="ID")
    show.add_argument("--json", action="store_true", help="as one JSON object")

    replay = actions.add_parser(
        "replay",
        help="publish dead letters' values again",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(replay)
    replay.add_argument("ids", type=int, nargs="*", metavar="ID", help="the dead letters to replay")
    replay.add_argument("--reason", help="replay every dead letter of this reason not replayed yet")
    replay.add_argument("--to", metavar="NS/KEY", help="publish to this stream instead of each one's own")
    replay.add_argument("--again", action="store_true", help="also replay dead letters replayed before")
    # --app (with the store options) also names the consumer types window_failed letters go to.


def run(args: argparse.Namespace) -> int:
    anyio.run(_run, args)
    return 0


async def _run(args: argparse.Namespace) -> None:
    async with contextlib.AsyncExitStack() as stack:
        opened = _open(args, stack)
        if args.action == "list":
            await _list(opened.letters, args, opened.kafka)
        elif args.action == "show":
            await _show(opened.letters, args.id, args.json, opened.kafka)
        else:
            await _replay(opened.letters, opened.provider(), args, opened.app())


@dataclass(frozen=True)
class _Opened:
    """What the command line names: the dead letters, the provider a replay publishes with,
    the application whose consumer types replayed windows go to, and whether positions are
    Kafka's (a queue a partition, a position an offset)."""

    letters: DeadLetterArchive
    provider: Callable[[], StreamProvider]
    app: Callable[[], StreamProvider | None]
    kafka: bool


def _open(args: argparse.Namespace, stack: contextlib.AsyncExitStack) -> _Opened:
    app = load_app(args)
    if app is None:
        config = load_cli_config(args)
        worker_app = config.worker.app

        def named() -> StreamProvider | None:  # loaded only for a replay of windows
            return load_provider(worker_app) if worker_app else None

        kafka = config.provider_settings.adapter == "kafka"
        if not in_cluster(config):
            store = stack.enter_context(contextlib.closing(existing_store(config)))
            return _Opened(store.dead_letter_archive(), config.provider, named, kafka)
        provider = config.provider()
    else:
        provider, kafka = app, app.backend.position_names == ("partition", "offset")

        def named() -> StreamProvider | None:
            return app

    try:
        letters = provider.backend.dead_letter_archive()
    except ConfigurationError as exc:
        raise CliError(f"{args.app} {exc}") from None
    stack.push_async_callback(letters.close)
    return _Opened(letters, lambda: provider, named, kafka)


# -- list and show ----------------------------------------------------------------------------


def as_json(stored: StoredDeadLetter) -> dict[str, Any]:
    """A dead letter as plain JSON types (raw bytes as hex)."""
    letter = stored.letter
    return {
        "id": stored.letter_id,
        "reason": letter.reason,
        "stream": letter.stream,
        "queue": letter.queue,
        "sequence_number": letter.sequence_number,
        "event_time": letter.event_time,
        "recorded_at": letter.recorded_at,
        "replayed_at": stored.replayed_at,
        "detail": letter.detail,
        "value": letter.value,
        "payload": None if letter.payload is None else letter.payload.hex(),
    }


def _dumps(obj: Any, **kwargs: Any) -> str:
    # A value may hold bytes (msgpack has them, JSON does not): written as hex.
    return json.dumps(obj, default=lambda x: x.hex() if isinstance(x, bytes) else repr(x), **kwargs)


async def check_reason(letters: DeadLetterArchive, reason: str | None) -> None:
    """Refuse a reason the runtime never gives and no dead letter in the store has: a typo
    would otherwise list nothing, or replay nothing, and look like success."""
    if reason is not None and reason not in DEAD_LETTER_REASONS and not await letters.count(reason):
        raise CliError(f"unknown dead letter reason {reason!r}: the reasons are {', '.join(DEAD_LETTER_REASONS)}")


async def _list(letters: DeadLetterArchive, args: argparse.Namespace, kafka: bool = False) -> None:
    if args.limit < 1:
        raise CliError(f"--limit is at least 1, not {args.limit}")
    await check_reason(letters, args.reason)
    found = await letters.entries(
        args.reason, args.limit + 1, after_id=args.after, replayed=False if args.pending else None
    )
    shown, more = found[: args.limit], len(found) > args.limit
    if args.json:
        for stored in shown:
            print(_dumps(as_json(stored)))
        return
    if not shown:
        print(
            "no dead letters"
            + (f" with reason {args.reason!r}" if args.reason else "")
            + (f" after id {args.after}" if args.after else "")
        )
        return
    where = "partition:offset" if kafka else "queue:seq"
    rows = table("dead letters", "id", "reason", "stream", where, "event time", "replayed", "value")
    for stored in shown:
        letter = stored.letter
        add_row(
            rows,
            str(stored.letter_id),
            letter.reason,
            letter.stream or "-",
            "-" if letter.queue is None else f"{letter.queue}:{_opt(letter.sequence_number)}",
            "-" if letter.event_time is None else utc_text(letter.event_time),
            "-" if stored.replayed_at is None else utc_text(stored.replayed_at),
            _preview(letter.value, letter.payload),
        )
    console().print(rows)
    if more:
        print(f"more after id {shown[-1].letter_id}: --after {shown[-1].letter_id}")


async def _show(letters: DeadLetterArchive, letter_id: int, as_one_json: bool, kafka: bool = False) -> None:
    stored = await _get(letters, letter_id)
    if as_one_json:
        print(_dumps(as_json(stored)))
        return
    letter = stored.letter
    fields = [
        ("id", stored.letter_id),
        ("reason", letter.reason),
        ("stream", letter.stream or "-"),
        ("partition" if kafka else "queue", _opt(letter.queue)),
        ("offset" if kafka else "sequence", _opt(letter.sequence_number)),
        ("event time", "-" if letter.event_time is None else f"{utc_text(letter.event_time)} ({letter.event_time})"),
        ("recorded", utc_text(letter.recorded_at)),
        ("replayed", "no" if stored.replayed_at is None else utc_text(stored.replayed_at)),
        ("detail", letter.detail or "-"),
    ]
    for name, value in fields:
        print(f"{name + ':':<12}{value}")
    if letter.payload is not None:
        print(f"{'raw record:':<12}{len(letter.payload):,} bytes that never decoded (cannot be replayed)")
        print(letter.payload.hex(" ", 1))
    else:
        print("value:")
        print(_dumps(letter.value, indent=2, ensure_ascii=False))


async def _get(letters: DeadLetterArchive, letter_id: int) -> StoredDeadLetter:
    stored = await letters.get(letter_id)
    if stored is None:
        raise CliError(f"no dead letter with id {letter_id} (`headrace dlq list` shows the ids)")
    return stored


# -- replay -----------------------------------------------------------------------------------


async def _replay(
    letters: DeadLetterArchive, provider: StreamProvider, args: argparse.Namespace, app: StreamProvider | None
) -> None:
    if bool(args.ids) == bool(args.reason):
        raise CliError("say what to replay: dead letter ids, or --reason R (not both)")
    await check_reason(letters, args.reason)
    target = StreamId.parse(args.to) if args.to else None
    if args.ids:
        chosen = [await _get(letters, letter_id) for letter_id in dict.fromkeys(args.ids)]
    else:
        chosen = await _all_of_reason(letters, args.reason, again=args.again)
        if not chosen:
            print(
                f"nothing to replay: no dead letters with reason {args.reason!r}"
                + ("" if args.again else " not replayed yet")
            )
            return
    windows = [s for s in chosen if s.letter.reason == WINDOW_FAILED]  # delivered, not published
    chosen = [s for s in chosen if s.letter.reason != WINDOW_FAILED]
    for stored in chosen:
        _check_replayable(stored, target, args.again)
    delivered = await replay_windows(letters, app, windows)
    if delivered:
        print(f"headrace dlq: delivered {plural(delivered, 'window')} to on_window again")
    if not chosen:
        return
    counts: dict[str, int] = {}
    async with provider.client():
        for stream_id, batch in _by_stream(chosen, target):
            await provider.get_stream(stream_id).on_next_batch(
                [s.letter.value for s in batch], event_times=[s.letter.event_time for s in batch]
            )
            counts[str(stream_id)] = counts.get(str(stream_id), 0) + len(batch)
    await letters.mark_replayed([s.letter_id for s in chosen])
    where = ", ".join(f"{n:,} to {stream}" for stream, n in counts.items())
    print(f"headrace dlq: replayed {plural(len(chosen), 'dead letter')}: {where}")


async def _all_of_reason(letters: DeadLetterArchive, reason: str, *, again: bool) -> list[StoredDeadLetter]:
    chosen: list[StoredDeadLetter] = []
    while page := await letters.entries(
        reason, _PAGE, after_id=chosen[-1].letter_id if chosen else 0, replayed=None if again else False
    ):
        chosen.extend(page)
    return chosen


def _check_replayable(stored: StoredDeadLetter, target: StreamId | None, again: bool) -> None:
    letter, n = stored.letter, stored.letter_id
    if letter.payload is not None:
        raise CliError(
            f"dead letter {n} ({letter.reason}) is a raw record that never decoded: there is no value "
            f"to publish, so it cannot be replayed (`headrace dlq show {n}` prints its bytes); nothing was replayed"
        )
    if letter.reason == "handoff_failed" and letter.sequence_number is None:
        raise CliError(
            f"dead letter {n} (handoff_failed) is a window the handoff refused, not an event: publishing it "
            f"would count it as one (`headrace dlq show {n}` prints it); nothing was replayed"
        )
    if stored.replayed_at is not None and not again:
        raise CliError(
            f"dead letter {n} was replayed already, at {utc_text(stored.replayed_at)}: add --again to "
            "replay it once more; nothing was replayed"
        )
    if target is None and letter.stream is None:
        raise CliError(f"dead letter {n} names no stream: give --to NS/KEY; nothing was replayed")


def _by_stream(
    chosen: Sequence[StoredDeadLetter], target: StreamId | None
) -> list[tuple[StreamId, list[StoredDeadLetter]]]:
    """Runs of consecutive dead letters with one destination, at most ``_PAGE`` long: order
    is kept within each stream."""
    runs: list[tuple[StreamId, list[StoredDeadLetter]]] = []
    for stored in chosen:
        stream_id = target or StreamId.parse(stored.letter.stream or "")
        if runs and runs[-1][0] == stream_id and len(runs[-1][1]) < _PAGE:
            runs[-1][1].append(stored)
        else:
            runs.append((stream_id, [stored]))
    return runs


# -- formatting -------------------------------------------------------------------------------


def _opt(n: int | None) -> str:
    return "-" if n is None else str(n)


def _preview(value: Any, payload: bytes | None) -> str:
    text = f"<{len(payload)} raw bytes>" if payload is not None else _dumps(value, ensure_ascii=False)
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


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
    keeps a tuple, is a tuple again). A letter written before windows had revisions holds
    a final result (its ``final`` said whether a final watermark closed it).

    >>> window_of({"key": ["a", 1], "start": 0.0, "end": 10.0, "value": 3, "closed_at": 12.0, "final": False})
    WindowResult(key=('a', 1), start=0.0, end=10.0, value=3, closed_at=12.0, final=True, revision=0)
    >>> window_of({"key": "a", "start": 0.0, "end": 10.0, "value": 3, "closed_at": 9.0, "final": False, "revision": 2})
    WindowResult(key='a', start=0.0, end=10.0, value=3, closed_at=9.0, final=False, revision=2)
    """
    key = value["key"]
    return WindowResult(
        tuple(key) if isinstance(key, list) else key,
        value["start"],
        value["end"],
        value["value"],
        value.get("closed_at"),
        bool(value["final"]) if "revision" in value else True,
        int(value.get("revision", 0)),
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
