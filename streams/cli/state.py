"""``headrace state``: the saved state of a consumer type's activations, for operators.

Each activation of a type with durable fields (``streams.Durable``), timers
(``streams.Timers``) or open windows is saved with its queue's checkpoint: on the embedded
store in its database, on Kafka in the state changelog topic. This lists them (one line per
stream, its fields in short) or shows one in full, decoded as JSON: the position of the last
event the state reflects, the fields, the timers not fired yet, and whether windows are open.
Nothing here changes the state.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from streams.cli import CliError
from streams.cli.common import add_config_options, add_row, console, existing_store, load_app, load_cli_config, table
from streams.core.errors import ConfigurationError
from streams.core.ids import SequenceToken
from streams.core.state import StateError, durable_fields, unit_json
from streams.runtime.provider import StreamProvider

EXAMPLES = """examples:
  headrace state --app myapp:provider ThirdOrderAlert             # every saved activation of the type
  headrace state --app myapp:provider ThirdOrderAlert orders/ann  # one, in full, as JSON
  headrace state --path ./store ThirdOrderAlert --json            # one JSON object per line
"""

_PREVIEW = 70  # characters of the fields in the list


@dataclass(frozen=True, slots=True)
class SavedState:
    """One activation's saved unit, as the store or the changelog holds it."""

    queue: int
    consumer: str
    stream: str
    position: SequenceToken
    state: bytes

    def as_json(self) -> dict[str, Any]:
        try:
            unit = unit_json(self.state)
        except StateError as exc:
            unit = {"error": str(exc)}
        return {
            "consumer": self.consumer,
            "stream": self.stream,
            "queue": self.queue,
            "position": [self.position.sequence_number, self.position.event_index],
            **unit,
        }


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "state",
        help="show the saved state of a consumer type's activations",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)
    parser.add_argument("type", metavar="TYPE", help="the consumer type (its name, or the registry's full name)")
    parser.add_argument("stream", nargs="?", metavar="STREAM", help="namespace/key: show this one in full")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def run(args: argparse.Namespace) -> int:
    app = load_app(args)
    states = anyio.run(_read, args, app)
    declared = _declared_type(app, args.type) if app is not None else None
    if declared is not None:  # the app's type: its state may be empty, and its fields are known
        name, cls = declared
        chosen = [with_defaults(s, cls) for s in states if s.consumer == name]
    elif not states and app is None:
        chosen = []
    else:
        chosen = matching(states, args.type)
    if not chosen and args.stream is None:
        print(f"no saved state of {args.type}: nothing is saved for it", file=sys.stderr if args.json else sys.stdout)
        return 0
    if args.stream is not None:
        found = [s for s in chosen if s.stream == args.stream]
        if not found:
            raise CliError(f"no saved state of {args.type} for {args.stream} ({len(chosen)} saved for the type)")
        for saved in found:
            print(_json(saved.as_json(), indent=None if args.json else 2))
        return 0
    if args.json:
        for saved in chosen:
            print(_json(saved.as_json()))
        return 0
    rows = table(f"saved state of {args.type}: {len(chosen)} activation(s)", "stream", "queue", "position", "fields")
    for saved in chosen:
        unit = saved.as_json()
        fields = _json(unit.get("fields", unit.get("error")))
        preview = fields if len(fields) <= _PREVIEW else fields[: _PREVIEW - 1] + "…"
        position = f"{saved.position.sequence_number}:{saved.position.event_index}"
        add_row(rows, saved.stream, str(saved.queue), position, preview)
    console().print(rows)
    return 0


def matching(states: Iterable[SavedState], name: str) -> list[SavedState]:
    """The states of the consumer type ``name``: its registry name, or the last part of it.

    >>> s = SavedState(0, "app.ThirdOrderAlert", "orders/ann", SequenceToken(3), b"")
    >>> [x.stream for x in matching([s], "ThirdOrderAlert")]
    ['orders/ann']
    >>> matching([s], "Alerts")
    Traceback (most recent call last):
    ...
    streams.cli.CliError: no saved state of a consumer type 'Alerts'; types with saved state: app.ThirdOrderAlert
    """
    states = list(states)
    exact = [s for s in states if s.consumer == name]
    if exact:
        return exact
    short = [s for s in states if s.consumer.rsplit(".", 1)[-1] == name]
    if short:
        return short
    known = sorted({s.consumer for s in states})
    raise CliError(f"no saved state of a consumer type {name!r}; types with saved state: {', '.join(known) or 'none'}")


def with_defaults(saved: SavedState, cls: type) -> SavedState:
    """``saved`` with every durable field ``cls`` declares, those never read or written (so
    not saved) at their default.

    >>> from streams.core.state import Durable
    >>> class Alert:
    ...     orders = Durable(0)
    ...     alerted = Durable(list)
    >>> s = SavedState(0, "app.Alert", "orders/ann", SequenceToken(3), b"")
    >>> with_defaults(s, Alert).as_json()["fields"]
    {'orders': 0, 'alerted': []}
    """
    fields = durable_fields(cls)
    unit = saved.as_json()
    values = unit.get("fields")
    if not fields or not isinstance(values, dict) or fields.keys() <= values.keys():
        return saved
    declared = {name: values[name] if name in values else field.initial() for name, field in fields.items()}
    unit["fields"] = declared | values  # a saved field the type no longer declares is shown too
    return DefaultedState(saved.queue, saved.consumer, saved.stream, saved.position, saved.state, unit)


@dataclass(frozen=True, slots=True)
class DefaultedState(SavedState):
    """A saved state shown with the defaults of the fields it does not hold."""

    unit: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return self.unit


def _declared_type(app: StreamProvider, name: str) -> tuple[str, type] | None:
    """The app's registered consumer type ``name`` (its registry name or the last part of
    it), with its registry name; None if the app registers none of that name."""
    registry = app.registry
    found: list[tuple[str, type]] = []
    for cls in registry.types():
        full = registry.type_name(cls)
        if full is not None and name in (full, full.rsplit(".", 1)[-1]):
            found.append((full, cls))
    exact = [f for f in found if f[0] == name]
    return (exact or found)[0] if found else None


async def _read(args: argparse.Namespace, app: StreamProvider | None) -> list[SavedState]:
    if app is not None and app.store is not None:
        existing_store(load_cli_config(args)).close()  # none there: refused, not made empty
    if app is not None:
        try:
            rows = await app.backend.saved_states()
        except ConfigurationError as exc:
            raise CliError(f"--app {args.app}: {exc}") from None
    else:
        config = load_cli_config(args)
        with contextlib.closing(existing_store(config)) as store:
            rows = await store.saved_states()
    return [SavedState(*row) for row in rows]


def _json(value: object, indent: int | None = None) -> str:
    return json.dumps(_keyed(value), indent=indent, default=_plain)


def _keyed(value: object) -> object:
    """``value`` with each map key JSON has no form for (a tuple's) as its ``repr``.

    >>> _keyed({(1, 2): [{None: 1}]})
    {'(1, 2)': [{None: 1}]}
    """
    if isinstance(value, dict):
        return {k if k is None or isinstance(k, str | int | float) else repr(k): _keyed(v) for k, v in value.items()}
    return [_keyed(v) for v in value] if isinstance(value, list) else value


def _plain(value: object) -> object:
    return value.hex() if isinstance(value, bytes) else repr(value)
