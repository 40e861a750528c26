"""What several subcommands share: finding the configuration and the store.

``--config FILE`` reads a configuration (default: ``$HEADRACE_CONFIG``, else
``./headrace.toml`` when there is one); ``--path STORE`` (and ``--queues N``) win over it, so
``headrace status --path /var/lib/headrace`` needs no file at all; ``--app module:attribute``
names the store of your application's provider, as ``headrace worker --app`` runs it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from streams.cli import CliError
from streams.core.errors import ConfigurationError, HeadraceError, a_type, did_you_mean
from streams.runtime.backends import LocalSide
from streams.runtime.config import HeadraceConfig, load_config
from streams.runtime.constructors import open_local_store
from streams.runtime.provider import StreamProvider


def add_config_options(parser: argparse.ArgumentParser, *, queues: bool = False) -> None:
    group = parser.add_argument_group("where the streams are")
    group.add_argument(
        "--config",
        metavar="FILE.toml",
        help="the configuration (default: $HEADRACE_CONFIG, else ./headrace.toml if there is one); "
        "with an embedded store or a Kafka adapter",
    )
    group.add_argument("--path", metavar="STORE", help="the embedded store's directory (wins over the configuration)")
    group.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="your application's provider (e.g. myapp:provider), as `headrace worker --app` runs it: its store "
        "or Kafka cluster (and, for dlq replay, the consumer types window_failed letters go to)",
    )
    if queues:
        group.add_argument(
            "--queues", type=int, metavar="N", help="queues of a new store (default: an existing store's count, else 8)"
        )


def load_cli_config(args: argparse.Namespace) -> HeadraceConfig:
    """The configuration, with the command line's ``--path`` and ``--queues`` on top."""
    overrides: dict[str, object] = {}
    app = load_app(args)
    if app is not None:
        if app.store is None:
            raise CliError(f"--app {args.app}: its provider keeps no local store (memory queues): nothing to read")
        overrides["provider.path"] = str(app.store.path)
    if args.path is not None:
        overrides["provider.path"] = args.path
    if getattr(args, "queues", None) is not None:
        overrides["provider.queues"] = args.queues
    return load_config(args.config, overrides=overrides)


def load_app(args: argparse.Namespace) -> StreamProvider | None:
    """The provider ``--app module:attribute`` names (imported as a worker imports it), or
    None without ``--app``; with ``--path`` too, a mistake."""
    spec = getattr(args, "app", None)
    if spec is None:
        return None
    if getattr(args, "path", None) is not None:
        raise CliError("give --app or --path, not both: the application's provider names its store")
    return load_provider(spec)


def in_cluster(config: HeadraceConfig) -> bool:
    """Whether the configuration's workers keep their shared state in a Kafka cluster (a
    Kafka adapter with no local store), not in an embedded store."""
    settings = config.provider_settings
    return settings.adapter == "kafka" and settings.path is None


def existing_store(config: HeadraceConfig) -> LocalSide:
    """The store the configuration names, to read what is not on the queues (the caller
    closes it); an error (not a new empty store) if there is none."""
    path = config.store_path()
    try:
        return open_local_store(path)
    except ConfigurationError as exc:
        raise CliError(f"{exc}: give the directory your workers and producers use") from None


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``plural(1, "event")`` is ``'1 event'``; ``plural(1200, "event")`` is ``'1,200 events'``."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def utc_text(t: float) -> str:
    """``2024-05-01T12:07:00Z`` for POSIX seconds ``1714565220``."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def console() -> Console:
    """Rich output on stdout; piped, it is as wide as it needs (rich would wrap at 80). Lines
    end at their last character: no padding of table cells runs on to the line's end."""
    out = _TrimmedConsole()
    return out if out.is_terminal else _TrimmedConsole(width=_WIDTH_WHEN_PIPED)


class _TrimmedConsole(Console):
    """A console whose lines carry no trailing spaces (a table pads its last column)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        rendered = super()._render_buffer(buffer)
        return "\n".join(line.rstrip(" ") for line in rendered.split("\n"))


def table(title: str, *columns: str) -> Table:
    """A table of unwrapped columns, as every subcommand prints them."""
    result = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in columns:
        result.add_column(column, no_wrap=True)
    return result


def add_row(rows: Table, *cells: str) -> None:
    """Add cells as plain text: a ``[`` in a value is not rich markup."""
    rows.add_row(*(Text(cell) for cell in cells))


_WIDTH_WHEN_PIPED = 1000  # wide enough for any table: piped output is never cut


def port_number(text: str) -> int:
    """A TCP port from the command line, checked before anything starts."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port number is 0 to 65535, not {text!r}")
    return int(text)


def tls_files(certfile: object, keyfile: object, endpoint: str, options: str) -> tuple[str, str] | None:
    """The certificate and key an HTTPS ``endpoint`` serves with (None: both absent, plain
    HTTP); one without the other is a mistake, said naming the ``options`` that give them.

    >>> tls_files("server.pem", "server.key", "the page", "--certfile and --keyfile")
    ('server.pem', 'server.key')
    >>> tls_files(None, None, "the page", "--certfile and --keyfile") is None
    True
    """
    if (certfile is None) != (keyfile is None):
        raise CliError(f"{endpoint} serves TLS with a certificate and its key: give both {options}")
    return None if certfile is None or keyfile is None else (str(certfile), str(keyfile))


def load_provider(spec: str) -> StreamProvider:
    """The provider named by ``module:attribute`` (a provider, or a function of no
    arguments returning one), e.g. ``load_provider("myapp.streams:provider")``."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"--app is module:attribute (e.g. myapp:provider), not {spec!r}")
    if module_name.endswith(".py") or "/" in module_name:  # a file's name, as for `python app.py`
        module = module_name.removesuffix(".py").replace("/", ".").strip(".")
        raise CliError(f"--app takes a module, not a file: --app {module}:{attribute} (drop .py; dots for folders)")
    if os.getcwd() not in sys.path:  # like `python -m`: the application is found from here
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            hint = did_you_mean(part, [n for n in dir(target) if not n.startswith("_")])
            raise CliError(f"module {module_name!r} has no attribute {attribute!r}{hint}") from None
    if callable(target) and not isinstance(target, StreamProvider):
        try:
            target = target()
        except HeadraceError:
            raise
        except Exception as exc:
            raise CliError(f"{spec}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(target, StreamProvider):
        raise CliError(f"{spec} is {a_type(target)}, not a StreamProvider")
    return target
