"""``headrace worker``: run one long-running worker of a stream provider.

The provider is a module attribute of your application, ``module:attribute`` (a
StreamProvider, or a function of no arguments that returns one), found from the current
directory. Its consumers are registered as the module is imported. Start as many workers
as you like on one embedded store (or one Kafka topic): they share the queues. The worker
runs until SIGTERM or SIGINT, then leaves gracefully: its agents finish their in-flight
deliveries and checkpoint, and it hands its queues back at once instead of letting their
leases expire. A second signal ends it at once.

A config file (TOML) may hold the same settings: ``app``, ``name``, ``log_level``; options
given on the command line win.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import anyio

from ..errors import HeadraceError
from ..provider import StreamProvider
from . import EXIT_USAGE, CliError

log = logging.getLogger("headrace.worker")

EXAMPLES = """examples:
  headrace worker --app myapp.streams:provider
  headrace worker --app myapp.streams:provider --name worker-1
  headrace worker --config worker.toml        # app = "myapp.streams:provider", name = "worker-1"
"""

CONFIG_KEYS = ("app", "name", "log_level")
LOG_LEVELS = ("debug", "info", "warning", "error")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run one worker of a stream provider until SIGTERM or SIGINT",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.error = _one_line_error  # type: ignore[method-assign]
    parser.add_argument("--app", metavar="MODULE:ATTR", help="the provider to run, e.g. myapp:provider")
    parser.add_argument("--name", help="this worker's name, unique among live workers (default: hostname-pid)")
    parser.add_argument("--config", metavar="FILE.toml", help="read app, name and log_level from a TOML file")
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="default info")


def _one_line_error(message: str) -> NoReturn:
    print(f"headrace worker: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def run(args: argparse.Namespace) -> int:
    settings = {**_read_config(args.config), **{k: v for k, v in vars(args).items() if v is not None}}
    if not settings.get("app"):
        raise CliError("say which provider to run: --app module:attribute (or app = ... in --config)")
    level = settings.get("log_level", "info")
    if level not in LOG_LEVELS:
        raise CliError(f"log_level is one of {', '.join(LOG_LEVELS)}, not {level!r}")
    provider = load_provider(settings["app"])
    if "name" in settings:
        if not isinstance(settings["name"], str) or not settings["name"]:
            raise CliError(f"a worker name is a non-empty string, not {settings['name']!r}")
        provider.worker_name = settings["name"]
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        anyio.run(serve, provider)
    except BaseExceptionGroup as group:
        raise _single_headrace_error(group) from None
    return 0


def _read_config(path: str | None) -> Mapping[str, Any]:
    if path is None:
        return {}
    try:
        config = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CliError(f"cannot read the config file {path!r}: {exc}") from None
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise CliError(f"unknown key {unknown[0]!r} in {path!r}; known keys: {', '.join(CONFIG_KEYS)}")
    return config


def load_provider(spec: str) -> StreamProvider:
    """The provider named by ``module:attribute`` (a provider, or a function of no
    arguments returning one), e.g. ``load_provider("myapp.streams:provider")``."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"--app is module:attribute (e.g. myapp:provider), not {spec!r}")
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
            raise CliError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(target) and not isinstance(target, StreamProvider):
        try:
            target = target()
        except HeadraceError:
            raise
        except Exception as exc:
            raise CliError(f"{spec}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(target, StreamProvider):
        raise CliError(f"{spec} is a {type(target).__name__}, not a StreamProvider")
    return target


async def serve(provider: StreamProvider) -> None:
    """Run ``provider`` as a worker until SIGTERM or SIGINT, then leave gracefully (a second
    signal ends the process at once)."""
    async with anyio.create_task_group() as tg:
        leave = anyio.Event()
        await tg.start(_watch_signals, leave)
        async with provider:
            queues = sorted(agent.queue.number for agent in provider.agents)
            print(
                f"headrace worker {provider.worker_name}: running, reading queues {queues} "
                f"of {len(provider.mapper.get_all_queues())}",
                flush=True,
            )
            await leave.wait()
            log.info("%s: leaving; handing back %d queues", provider.worker_name, len(provider.agents))
        tg.cancel_scope.cancel()
    print(f"headrace worker {provider.worker_name}: left", flush=True)


async def _watch_signals(
    leave: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            if leave.is_set():
                log.warning("second signal: ending now; this worker's leases will expire instead")
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)  # ends the process as the signal normally does
            leave.set()


def _single_headrace_error(group: BaseExceptionGroup) -> BaseException:
    """The HeadraceError inside a task group's error (a user mistake, reported in one line),
    or the group itself."""
    errors = group.subgroup(HeadraceError)
    while errors is not None and isinstance(errors, BaseExceptionGroup):
        errors = errors.exceptions[0]  # type: ignore[assignment]
    return errors if errors is not None else group
