"""``headrace worker``: run one long-running worker of a stream provider.

The provider is a module attribute of your application, ``module:attribute`` (a
StreamProvider, or a function of no arguments that returns one), found from the current
directory. Its consumers are registered as the module is imported. Start as many workers
as you like on one embedded store (or one Kafka topic): they share the queues. The worker
runs until SIGTERM or SIGINT, then leaves gracefully: its agents finish their in-flight
deliveries and checkpoint, and it hands its queues back at once instead of letting their
leases expire. A second signal ends it at once.

A worker stopped while its store cannot be written (a full disk) says so in one line and
exits 74; its queues replay from the last checkpoint written.

Logs go to stderr, each record with the worker, queue and stream it concerns: readable
text on a terminal (a consumer's traceback on lines of its own), ``key=value`` lines
(logfmt) otherwise, or JSON with ``--log-format json``. With ``--metrics-port`` the worker
serves Prometheus metrics at ``http://HOST:PORT/metrics``; HOST is ``--metrics-host``, by
default 127.0.0.1 (this machine only: give 0.0.0.0 to let a Prometheus elsewhere scrape it),
and its probes: ``/livez`` (the event loop answers) and ``/readyz`` (joined, not leaving, every
queue read), each 200 or 503 with one line (:mod:`streams.runtime.health`).

Everything that can be checked is checked before the worker joins the cluster: the settings,
the application, and the metrics address (a port in use is refused there). A mistake is one
line and exit code 2, with no lease taken.

The worker publishes its agents' status (cache fill, pressure, watermarks) every
``status_interval`` for ``headrace status`` to show: to its store, or on Kafka to the
cluster's status topic (``<group_id>.status.<topic>``).

The configuration (``--config``, else ``$HEADRACE_CONFIG``, else ``./headrace.toml`` when
there is one) may hold these settings in its ``[worker]`` section: ``app``, ``name``,
``log_level``, ``log_format``, ``metrics_host``, ``metrics_port``, ``status_interval`` (default 5s); options
on the command line win. The worker exports the file's path as ``HEADRACE_CONFIG``, so an
application that builds its provider with ``load_config().provider()`` reads the same file.
A provider the application builds in code takes the ``[agent]`` and ``[cache]`` settings of
the file and the environment all the same (they win over the code's, and the worker logs
which); ``[provider]`` and ``[balancer]`` do not apply to it, and a warning names them.

What a worker says as it starts: which application, which store, which consumer types.

``headrace worker`` logs these lines before it joins the cluster, so the log of every run
says what ran: the ``--app`` it imported, where its queues are, and its consumer types by
namespace. A worker with no consumer type registered reads its queues and delivers to
nothing, which is almost always a mistake (the module that registers them was not the one
imported): that is a warning.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import cast

import anyio

from agents.gc_policy import POLICY as GC_POLICY
from balancer.base import BalancerOptions
from streams.adapters.status import StatusBoard
from streams.cli import CliError
from streams.cli.common import load_provider, port_number, tls_files
from streams.cli.page import PageSource, store_options
from streams.core.errors import StoreError
from streams.observability import configure_logging, serve_metrics
from streams.runtime.config import apply_options, load_config
from streams.runtime.config_schema import CONFIG_ENV
from streams.runtime.health import WorkerHealth
from streams.runtime.history import StatusHistory
from streams.runtime.logs import FORMATS, LEVELS, LogFormat
from streams.runtime.provider import StreamProvider
from streams.runtime.status import StatusReporter

log = logging.getLogger("headrace.worker")

# sysexits' EX_IOERR: the store could not be written (a full disk), not a usage mistake
EXIT_STORE = 74

EXAMPLES = """examples:
  headrace worker --app myapp.streams:provider
  headrace worker --app myapp.streams:provider --name worker-1
  headrace worker --config headrace.toml     # [worker] app = "myapp.streams:provider", name = "worker-1"
  headrace worker --app myapp.streams:provider --log-format json --metrics-port 9464
  headrace worker --app myapp.streams:provider --metrics-host 0.0.0.0 --metrics-port 9464
"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run one worker of a stream provider until SIGTERM or SIGINT",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--app", metavar="MODULE:ATTR", help="the provider to run, e.g. myapp:provider")
    parser.add_argument("--name", help="this worker's name, unique among live workers (default: hostname-pid)")
    parser.add_argument(
        "--config",
        metavar="FILE.toml",
        help="the configuration; its [worker] section may hold these settings (see above)",
    )
    parser.add_argument("--log-level", choices=LEVELS, help="default info")
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        help="text (readable, tracebacks on lines of their own), logfmt (key=value) or json; "
        "default text when stderr is a terminal, else logfmt",
    )
    parser.add_argument(
        "--metrics-port", type=port_number, metavar="PORT", help="serve Prometheus metrics on PORT (0: any free one)"
    )
    parser.add_argument(
        "--metrics-host",
        metavar="HOST",
        help="the address the metrics endpoint binds (default 127.0.0.1, this machine only; 0.0.0.0: every interface)",
    )
    parser.add_argument(
        "--metrics-certfile",
        metavar="PEM",
        help="serve the metrics and probes over HTTPS with this certificate (chain), and --metrics-keyfile",
    )
    parser.add_argument("--metrics-keyfile", metavar="PEM", help="the key of --metrics-certfile")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    settings = config.worker
    app = args.app or settings.app
    if not app:
        raise CliError("say which provider to run: --app module:attribute (or app = ... in [worker] of the config)")
    name = args.name if args.name is not None else settings.name
    if name is not None and not name:
        raise CliError("a worker name is a non-empty string")
    port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
    host = args.metrics_host or settings.metrics_host
    certfile = args.metrics_certfile or settings.metrics_certfile
    keyfile = args.metrics_keyfile or settings.metrics_keyfile
    tls = tls_files(certfile, keyfile, "the metrics endpoint", "--metrics-certfile and --metrics-keyfile")
    if config.file is not None:
        os.environ[CONFIG_ENV] = str(config.file.resolve())
    provider = load_provider(app)
    if name is not None:
        provider.worker_name = name
    log_format = cast(LogFormat | None, args.log_format or settings.log_format)  # configure_logging checks it
    configure_logging(args.log_level or settings.log_level, log_format, worker=provider.worker_name)
    for level, line in apply_options(config, provider):  # the file and HEADRACE_* win (docs/configuration.md)
        log.log(level, "%s: %s", provider.worker_name, line)
    GC_POLICY.own_process()  # this process runs nothing else: the collector is the worker's to tune
    running: list[bool] = []
    try:
        anyio.run(serve, provider, port, settings.status_interval, host, app, lambda: running.append(True), tls)
    except (StoreError, BaseExceptionGroup) as exc:
        failed = store_error_in(exc)
        if failed is None:
            raise
        if not running:
            print(f"headrace worker: error: cannot start: {failed}", file=sys.stderr)
        else:  # its agents could not write what they had finished (a full disk)
            print(
                f"headrace worker {provider.worker_name}: stopped without writing its last checkpoint: {failed}; "
                f"its queues replay from the last checkpoint written (exit code {EXIT_STORE})",
                file=sys.stderr,
            )
        return EXIT_STORE
    return 0


def store_error_in(error: BaseException) -> StoreError | None:
    """The store's error a run ended with, alone or among a task group's; None when it
    ended for another reason too (that one is not the store's to explain).

    >>> store_error_in(ExceptionGroup("stop", [StoreError("disk full"), StoreError("disk full")]))
    StoreError('disk full')
    >>> store_error_in(ExceptionGroup("stop", [StoreError("disk full"), ValueError("bug")])) is None
    True
    """
    if isinstance(error, StoreError):
        return error
    if not isinstance(error, BaseExceptionGroup):
        return None
    matched, rest = error.split(StoreError)
    if matched is None or rest is not None:
        return None
    found: BaseException = matched
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found if isinstance(found, StoreError) else None


async def serve(
    provider: StreamProvider,
    metrics_port: int | None = None,
    status_interval: float = 5.0,
    metrics_host: str = "127.0.0.1",
    app: str | None = None,
    on_running: Callable[[], object] | None = None,
    metrics_tls: tuple[str, str] | None = None,
) -> None:
    """Run ``provider`` as a worker until SIGTERM or SIGINT, then leave gracefully (a second
    signal ends the process at once); with ``metrics_port``, serve its Prometheus metrics on
    ``metrics_host`` (over TLS with ``metrics_tls``, a PEM certificate file and its key's);
    publish its agents' status (to its store, or to the Kafka status topic)
    every ``status_interval`` seconds. With ``app`` (the ``--app`` it came from), log the
    start-up lines (:mod:`streams.cli.worker`); ``on_running`` is called once it has
    joined."""
    health = WorkerHealth()  # /livez and /readyz beside the metrics (streams.runtime.health)
    history = StatusHistory()  # the status page's plots: the last hour, sampled
    async with contextlib.AsyncExitStack() as metrics:
        if metrics_port is not None:  # bound before joining: a port in use takes no lease
            page = _page_source(provider, history, app)
            metrics.push_async_callback(page.close)
            server = metrics.enter_context(
                serve_metrics(provider, metrics_port, metrics_host, health, metrics_tls, page.serve)
            )
            shown = f"[{metrics_host}]" if ":" in metrics_host else metrics_host
            scheme = "http" if metrics_tls is None else "https"
            log.info("%s: status page at %s://%s:%d/", provider.worker_name, scheme, shown, server.port)
        await _run(provider, status_interval, app, on_running, health, history if metrics_port is not None else None)


def _page_source(provider: StreamProvider, history: StatusHistory, app: str | None) -> PageSource:
    """What the worker's status page shows: its store's or cluster's status, as
    ``headrace status`` reads it, and its own history (on memory queues, that nothing
    can be read: no status is published there)."""
    options = provider.balancer_options or BalancerOptions()
    path = None if provider.store is None else str(provider.store.path)
    config = None if path else os.environ.get(CONFIG_ENV)
    where = store_options(path, config, None if path or config else app)
    return PageSource(provider.backend, options.suspicion_timeout, where, history, provider.worker_name)


async def _run(
    provider: StreamProvider,
    status_interval: float,
    app: str | None,
    on_running: Callable[[], object] | None,
    health: WorkerHealth,
    history: StatusHistory | None = None,
) -> None:
    async with anyio.create_task_group() as tg:
        leave = anyio.Event()
        await tg.start(_watch_signals, leave)
        async with provider:
            if app is not None:  # joined: every check has passed, so a mistake stays one line
                log_startup(provider, app)
            async with anyio.create_task_group() as reporting:
                board = status_board(provider)
                if board is not None:
                    await reporting.start(StatusReporter(provider, board, status_interval).run)
                if history is not None:
                    reporting.start_soon(history.run, provider)
                queues = sorted(agent.queue.number for agent in provider.agents)
                print(
                    f"headrace worker {provider.worker_name}: running, reading queues {queues} "
                    f"of {len(provider.mapper.get_all_queues())}",
                    flush=True,
                )
                health.joined()
                if on_running is not None:
                    on_running()
                await leave.wait()
                health.leaving()  # readiness fails at once, while it drains and hands back
                reporting.cancel_scope.cancel()
            log.info("%s: leaving; handing back %d queues", provider.worker_name, len(provider.agents))
        tg.cancel_scope.cancel()
    print(f"headrace worker {provider.worker_name}: left", flush=True)


def status_board(provider: StreamProvider) -> StatusBoard | None:
    """Where the worker publishes its status: its local store, or on Kafka the cluster's
    status topic; ``None`` for memory queues (nobody else could read it)."""
    return provider.backend.status_board()


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


log = logging.getLogger("headrace.worker")

NO_CONSUMERS = (
    "no consumer types are registered: this worker reads its queues and delivers to nothing; "
    "register them with @provider.implicit(...) in the module --app imports"
)


def startup_lines(provider: StreamProvider, app: str) -> list[tuple[int, str]]:
    """``(level, message)`` of each start-up line.

    >>> provider = StreamProvider.memory(queues=2)
    >>> @provider.implicit("sensors")
    ... class Average:
    ...     def __init__(self, stream_id): ...
    ...     def on_next(self, batch): ...
    >>> for level, line in startup_lines(provider, "myapp:provider"):
    ...     print(logging.getLevelName(level), line)
    INFO app myapp:provider: memory queues (2), no local store
    INFO consumer types: sensors: Average
    """
    kind = type(provider.backend).__name__.removesuffix("Backend").lower() or "custom"
    queues = len(provider.mapper.get_all_queues())
    where = f"store {provider.store.path.resolve()}" if provider.store is not None else "no local store"
    lines = [(logging.INFO, f"app {app}: {kind} queues ({queues}), {where}")]
    registry = provider.registry
    by_namespace = [
        f"{namespace}: {', '.join(cls.__qualname__ for cls in registry.implicit_types(namespace))}"
        for namespace in registry.implicit_namespaces()
    ]
    implicit = {cls for namespace in registry.implicit_namespaces() for cls in registry.implicit_types(namespace)}
    durable = [cls.__qualname__ for cls in registry.types() if cls not in implicit]
    if durable:
        by_namespace.append(f"for subscriptions: {', '.join(durable)}")
    if by_namespace:
        lines.append((logging.INFO, f"consumer types: {'; '.join(by_namespace)}"))
    else:
        lines.append((logging.WARNING, NO_CONSUMERS))
    return lines


def log_startup(provider: StreamProvider, app: str) -> None:
    """Log :func:`startup_lines` (the metrics address is logged as its server binds)."""
    for level, line in startup_lines(provider, app):
        log.log(level, "%s: %s", provider.worker_name, line)
