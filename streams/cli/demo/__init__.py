"""``headrace demo``: the whole pipeline on toll traffic, in one process, for about a minute.

Toll plaza producers publish car passages (a realistic share late, out of order or with a
wrong clock, and a few corrupt records) to durable queues; this process's worker delivers
them to one windowed consumer per plaza, which hands the windows its watermark finalizes to
Spark; a Spark streaming query prints each micro-batch. A status line shows events in and
out, the watermark and every fate while it runs; at the end, the counts must reconcile:
published = kept + adjusted + dropped + dead-lettered (exit code 0; 1 if they do not).

The queues live in an embedded store in a temporary directory (or --path), or on Kafka
with --kafka; the handoff log to Spark is where the queues are.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import anyio

from streams.cli.common import console
from streams.cli.demo.settings import DemoSettings
from streams.eventtime.timetext import parse_duration

EXAMPLES = """examples:
  headrace demo                                   # about a minute, then a summary
  headrace demo --duration 20s --rate 300 --streams 10
  headrace demo --no-spark                        # no Java: windows read from the handoff log
  headrace demo --path ./demo-store               # keep the store to look at afterwards
  headrace demo --kafka 127.0.0.1:9092            # queues and handoff log on Kafka (new
                                                  # topics per run)
  headrace demo --kafka 127.0.0.1:9092 --kafka-option idempotent=false   # a broker without producer ids
  headrace demo --metrics-port 9464 --log-format json
"""

DEFAULTS = DemoSettings()


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole pipeline (producers → queues → worker → Spark) and reconcile the counts",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_workload(parser.add_argument)
    _add_places(parser.add_argument)


def _add_workload(add: Callable[..., object]) -> None:
    """The options of what the demo's producers publish, and how it is windowed."""
    add(
        "--duration",
        default=f"{DEFAULTS.duration:g}s",
        metavar="D",
        help=f"how long the producers publish: 30s, 2m, or seconds (default {DEFAULTS.duration:g}s)",
    )
    add(
        "--rate",
        type=float,
        default=DEFAULTS.rate,
        metavar="N",
        help=f"toll reports per second, all plazas together (default {DEFAULTS.rate:g})",
    )
    add(
        "--streams",
        type=int,
        default=DEFAULTS.streams,
        metavar="N",
        help=f"toll plazas, one stream each (default {DEFAULTS.streams})",
    )
    add(
        "--booths", type=int, default=DEFAULTS.booths, metavar="N", help=f"booths per plaza (default {DEFAULTS.booths})"
    )
    add("--queues", type=int, default=DEFAULTS.queues, metavar="N", help=f"queues (default {DEFAULTS.queues})")
    add(
        "--window",
        default=f"{DEFAULTS.window:g}s",
        metavar="D",
        help=f"tumbling window size (default {DEFAULTS.window:g}s)",
    )


def _add_places(add: Callable[..., object]) -> None:
    """The options of where the queues, windows, metrics and logs go."""
    add(
        "--path",
        type=Path,
        metavar="DIR",
        help="the embedded store, a new or empty directory kept afterwards (default: a temporary one)",
    )
    add(
        "--kafka",
        metavar="HOST:PORT",
        help="put the queues on this Kafka cluster (a new topic per run); the handoff log to Spark, "
        "the dead letters and pub-sub stay in the local store",
    )
    add(
        "--kafka-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka adapter setting (KafkaSettings field), e.g. idempotent=false; repeatable",
    )
    add(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="read the windows from the handoff log instead of a Spark query (no Java needed)",
    )
    add(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the status page and Prometheus metrics on 127.0.0.1:PORT (default: a free port, printed)",
    )
    add("--log-format", choices=("text", "json"), default="text", help="log lines on stderr (default text)")


def run(args: argparse.Namespace) -> int:
    from streams.cli.demo.pipeline import work_directory  # Spark's side loads only when the demo runs

    settings = _settings(args)
    with work_directory(settings.path) as (store, work):
        return anyio.run(_run, settings, store, work)


async def _run(settings: DemoSettings, store: Path, work: Path) -> int:
    from streams.cli.demo.pipeline import DemoPipeline

    return await DemoPipeline(settings, store, work, console()).run()


def _settings(args: argparse.Namespace) -> DemoSettings:
    duration, window = parse_duration(args.duration, "--duration"), parse_duration(args.window, "--window")
    if duration <= 0 or args.rate <= 0 or window <= 0:
        raise ValueError("--duration, --rate and --window must be positive")
    if args.streams < 1 or args.booths < 1 or args.queues < 1:
        raise ValueError("--streams, --booths and --queues must be positive")
    if args.metrics_port is not None and not 0 < args.metrics_port < 65536:
        raise ValueError(f"--metrics-port is a port number from 1 to 65535, not {args.metrics_port}")
    if args.path is not None and args.path.exists() and (not args.path.is_dir() or any(args.path.iterdir())):
        raise ValueError(f"--path {args.path} is not a new or empty directory (the demo reconciles everything in it)")
    if args.kafka_option and args.kafka is None:
        raise ValueError("--kafka-option applies only with --kafka HOST:PORT")
    return DemoSettings(
        duration=duration,
        rate=args.rate,
        streams=args.streams,
        booths=args.booths,
        queues=args.queues,
        window=window,
        path=args.path,
        kafka=args.kafka,
        kafka_options=dict(_kafka_option(text) for text in args.kafka_option),
        spark=args.spark,
        metrics_port=args.metrics_port,
        log_format=args.log_format,
    )


def _kafka_option(text: str) -> tuple[str, bool | int | float | str]:
    """``NAME=VALUE``, the value read as a bool, a number or else a string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--kafka-option is NAME=VALUE, not {text!r}")
    if value.lower() in ("true", "false"):
        return name, value.lower() == "true"
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value
