"""What several subcommands share: finding the configuration and the store.

``--config FILE`` reads a configuration (default: ``$HEADRACE_CONFIG``, else
``./headrace.toml`` when there is one); ``--path STORE`` (and ``--queues N``) win over it, so
``headrace status --path /var/lib/headrace`` needs no file at all.
"""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from streams.cli import CliError
from streams.config import HeadraceConfig, load_config
from streams.core.store import EmbeddedStore


def add_config_options(parser: argparse.ArgumentParser, *, queues: bool = False, app: bool = False) -> None:
    group = parser.add_argument_group("where the streams are")
    group.add_argument(
        "--config",
        metavar="FILE.toml",
        help="the configuration (default: $HEADRACE_CONFIG, else ./headrace.toml if there is one); "
        "with an embedded store or a Kafka adapter",
    )
    group.add_argument("--path", metavar="STORE", help="the embedded store's directory (wins over the configuration)")
    if app:
        group.add_argument(
            "--app", metavar="MODULE:ATTR", help="the application's provider, as `headrace worker --app` runs it"
        )
    if queues:
        group.add_argument(
            "--queues", type=int, metavar="N", help="queues of a new store (default: an existing store's count, else 8)"
        )


def load_cli_config(args: argparse.Namespace) -> HeadraceConfig:
    """The configuration, with the command line's ``--path`` and ``--queues`` on top."""
    overrides: dict[str, object] = {}
    if args.path is not None:
        overrides["provider.path"] = args.path
    if getattr(args, "queues", None) is not None:
        overrides["provider.queues"] = args.queues
    return load_config(args.config, overrides=overrides)


def in_cluster(config: HeadraceConfig) -> bool:
    """Whether the configuration's workers keep their shared state in a Kafka cluster (a
    Kafka adapter with no local store), not in an embedded store."""
    settings = config.provider_settings
    return settings.adapter == "kafka" and settings.path is None


def existing_store(config: HeadraceConfig) -> EmbeddedStore:
    """The store the configuration names; an error (not a new empty store) if there is none."""
    path = config.store_path()
    if not os.path.isfile(path / EmbeddedStore.FILE_NAME):
        raise CliError(
            f"no headrace store at {str(path)!r} (no {EmbeddedStore.FILE_NAME} there): give the "
            "directory your workers and producers use"
        )
    return EmbeddedStore(path)


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``plural(1, "event")`` is ``'1 event'``; ``plural(1200, "event")`` is ``'1,200 events'``."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def utc_text(t: float) -> str:
    """``2024-05-01T12:07:00Z`` for POSIX seconds ``1714565220``."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def console() -> Console:
    """Rich output on stdout; piped, it is as wide as it needs (rich would wrap at 80)."""
    out = Console()
    return out if out.is_terminal else Console(width=_WIDTH_WHEN_PIPED)


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
