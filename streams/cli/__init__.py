"""The ``headrace`` command: one entry point, a subcommand per job.

Each subcommand lives in its own module with ``add_parser(subparsers)`` and ``run(args)``.
A user's mistake ends as one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn

from streams.core.errors import HeadraceError

# name -> module under streams.cli; each module has add_parser(subparsers) and run(args) -> int
SUBCOMMANDS = ("demo", "simulate", "worker", "produce", "status", "dlq", "state", "export", "broker")

EXIT_USAGE = 2


class CliError(HeadraceError):
    """A user mistake on the command line: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # argparse leaves a subcommand's unknown arguments to the top parser, whose error then
        # says `headrace:`; the innermost parser refuses them itself, so the line names it.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _user_error_in(group: BaseExceptionGroup) -> BaseException:
    """The HeadraceError inside a task group's error (one line for the user), or the group."""
    errors: BaseException | None = group.subgroup(HeadraceError)
    while isinstance(errors, BaseExceptionGroup):
        errors = errors.exceptions[0]
    return errors if errors is not None else group


def package_version() -> str:
    """The installed package's version (``0.1.0``), or ``unknown`` when run from a checkout
    that was never installed."""
    try:
        return version("headrace")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="headrace",
        description="Persistent streams on asyncio, with event-time consumers that feed Spark.",
    )
    parser.add_argument("--version", action="version", version=f"headrace {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        module.add_parser(subparsers)
    _plain_help(subparsers)
    return parser


def _plain_help(subparsers: argparse._SubParsersAction[Any]) -> None:
    """The subcommands' descriptions are their modules' docstrings, written for Sphinx;
    ``--help`` shows them as plain text (and every nested parser's, ``dlq replay``'s too)."""
    for parser in subparsers.choices.values():
        if parser.description:
            parser.description = plain_text(parser.description)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _plain_help(action)


def plain_text(doc: str) -> str:
    """reStructuredText inline markup as plain text.

    >>> plain_text("run ``headrace worker`` (see :class:`~streams.runtime.provider.StreamProvider`, :func:`load`)")
    'run headrace worker (see StreamProvider, load)'
    """
    doc = re.sub(r":\w+:`~(?:[\w.]*\.)?([^`]+)`", r"\1", doc)
    doc = re.sub(r":\w+:`([^`]+)`", r"\1", doc)
    return doc.replace("``", "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    module = importlib.import_module(f"{__name__}.{args.command}")
    try:
        try:
            return int(module.run(args) or 0)
        except BaseExceptionGroup as group:  # a task group's: report the user's mistake in it
            raise _user_error_in(group) from None
    except BrokenPipeError:
        # The reader went away (`headrace simulate … | head`): stop quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (HeadraceError, ValueError, OSError) as exc:
        print(f"headrace {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
