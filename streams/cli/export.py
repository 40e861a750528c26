"""``headrace export``: a sample of a namespace's recent events, as ``headrace simulate`` reads it.

Writes the events of ``--stream`` (a namespace, or one stream ``namespace/key``) that arrived
in the last ``--since`` (``1h``, ``30m``) to a CSV with the columns ``arrival_time``,
``event_time``, ``key`` (the stream's key) and ``value``, in arrival order, times in POSIX
seconds: ``headrace simulate --sweep out_of_order=0s,5s,30s FILE.csv`` then replays your
production data under other tolerances. The events come from the queues' records the store
(or the Kafka topic) still retains; at most ``--limit`` of them, the newest.

An event's time is what an event-time consumer reads: ``--timestamp-by``; else, with
``--app``, the ``timestamp_by`` (and ``unit``) of the app's event-time consumer types of the
namespace; else ``[time] timestamp_by`` (in ``[time] unit``); else the event's own event time
(its arrival time when its producer gave none). The last line says which, and how to replay
the sample as the workers run it: an implicit consumer type has one activation (one
watermark) per stream, so ``headrace simulate --substreams``. ``value`` is the event's ``--value-by`` field, or
the event itself when it is a number; empty otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from streams.adapters.retention import RetainedRecords
from streams.cli import CliError
from streams.cli.common import (
    add_config_options,
    existing_store,
    in_cluster,
    load_app,
    load_cli_config,
    plural,
    utc_text,
)
from streams.core.clock import wall_time
from streams.core.errors import ConfigurationError
from streams.core.micros import to_seconds
from streams.eventtime.policy import OrderingPolicy, timestamp_extractor
from streams.eventtime.spec import EventTime
from streams.eventtime.timetext import parse_duration
from streams.runtime.backends import Backend
from streams.runtime.config import HeadraceConfig, load_config
from streams.runtime.provider import StreamProvider

EXAMPLES = """examples:
  headrace export --path ./store --stream tolls --since 1h sample.csv
  headrace export --config headrace.toml --stream tolls/booth-1 --since 30m --value-by amount booth1.csv
  headrace simulate --sweep out_of_order=0s,5s,30s --window tumbling:1m --group-by-key sample.csv
"""

DEFAULT_LIMIT = 100_000
COLUMNS = ("arrival_time", "event_time", "key", "value")


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One exported event (``value`` None: an empty cell)."""

    arrival_time: float
    event_time: float
    key: str
    value: float | None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a namespace's recent events as a CSV sample for `headrace simulate`",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)
    parser.add_argument("--stream", required=True, metavar="NS[/KEY]", help="a namespace, or one stream of it")
    parser.add_argument(
        "--since", required=True, metavar="DURATION", help="the events that arrived in the last 1h, 30m"
    )
    parser.add_argument("--timestamp-by", metavar="FIELD", help="the field with the event time (default: [time])")
    parser.add_argument(
        "--unit", choices=("s", "ms", "us"), help="what a --timestamp-by number counts (default: [time])"
    )
    parser.add_argument("--value-by", metavar="FIELD", help="the field written as value (a number)")
    parser.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most this many, the newest ({DEFAULT_LIMIT:,})"
    )
    parser.add_argument("file", metavar="FILE.csv", help="where to write the sample")


def run(args: argparse.Namespace) -> int:
    since = parse_duration(args.since, "--since")
    if since <= 0:
        raise CliError(f"--since takes a duration above 0, like 1h or 30m, not {args.since!r}")
    if args.limit < 1:
        raise CliError(f"--limit takes a whole number >= 1, not {args.limit}")
    namespace, _, key = args.stream.partition("/")
    if not namespace:
        raise CliError(f"--stream takes a namespace or namespace/key, not {args.stream!r}")
    app, config, backend = _where(args)
    readers = app_policy(app, namespace) if app is not None else None
    policy = readers[1] if readers is not None else config.time.policy
    spec = args.timestamp_by if args.timestamp_by is not None else policy.timestamp_by
    time_of = timestamp_extractor(spec, args.unit or policy.unit)
    start = wall_time() - since
    source: RetainedRecords
    if backend is not None:
        try:
            source = anyio.run(backend.retained_records)
        except ConfigurationError as exc:
            raise CliError(f"--app {args.app}: {exc}" if app is not None else str(exc)) from None
        rows = sample(source, namespace, key or None, start, time_of, args.value_by, args.limit)
    else:
        with contextlib.closing(existing_store(config)) as store:
            source = anyio.run(store.retained_records)
            rows = sample(source, namespace, key or None, start, time_of, args.value_by, args.limit)
    if not rows:
        raise CliError(_nothing(source, args.stream, namespace, args.since))
    write_sample(args.file, rows)
    print(
        f"headrace export: {plural(len(rows), 'event')} of {args.stream} that arrived from "
        f"{utc_text(rows[0].arrival_time)} to {utc_text(rows[-1].arrival_time)} written to {args.file}"
    )
    print(f"headrace export: {_replay_hint(args, readers, spec)}")
    return 0


def _replay_hint(args: argparse.Namespace, readers: tuple[str, OrderingPolicy] | None, spec: object) -> str:
    """Where the event times came from, and how ``simulate`` replays the sample as the
    workers run it: an implicit consumer type has one activation per stream, each with its
    own watermark, which only ``--substreams`` (one watermark per key) reproduces."""
    if args.timestamp_by is not None:
        source = f"--timestamp-by {args.timestamp_by!r}"
    elif readers is not None:
        source = f"{readers[0]}'s timestamp_by {_named(spec)}"
    else:
        source = f"[time] timestamp_by {_named(spec)}" if spec is not None else "each event's own event time"
    return (
        f"event times from {source}; an @provider.implicit consumer type has one activation per stream, each "
        f"with its own watermark: replay it with `headrace simulate --substreams {args.file}`"
    )


def _named(spec: object) -> str:
    return repr(spec) if isinstance(spec, str) else getattr(spec, "__qualname__", repr(spec))


def app_policy(app: StreamProvider, namespace: str) -> tuple[str, OrderingPolicy] | None:
    """The ordering policy the app's event-time consumer types of ``namespace`` read event
    times with, and their names; None when it has none. Types that read them differently
    are a mistake here: the sample can hold one time per event, so ``--timestamp-by`` chooses.

    >>> from streams import StreamProvider
    >>> from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling
    >>> app = StreamProvider.memory(queues=1)
    >>> @app.implicit("tolls")
    ... class Totals:
    ...     event_time = EventTime(OrderingPolicy(timestamp_by="t", unit="ms"), Tumbling(60), Count())
    ...     def __init__(self, stream_id): ...
    ...     def on_window(self, result): ...
    >>> names, policy = app_policy(app, "tolls")
    >>> names, policy.timestamp_by, policy.unit
    ('Totals', 't', 'ms')
    """
    found: dict[tuple[object, str], list[str]] = {}
    policies: dict[tuple[object, str], OrderingPolicy] = {}
    for cls in app.registry.implicit_types(namespace):
        spec = getattr(cls, "event_time", None)
        if isinstance(spec, EventTime):
            reads = (spec.policy.timestamp_by, spec.policy.unit)
            found.setdefault(reads, []).append(cls.__qualname__)
            policies[reads] = spec.policy
    if not found:
        return None
    if len(found) > 1:
        ways = "; ".join(f"{', '.join(names)}: {_named(t)} in {unit}" for (t, unit), names in found.items())
        raise CliError(
            f"the consumer types of {namespace!r} read event times differently ({ways}): "
            "say which with --timestamp-by (and --unit)"
        )
    [(only, names)] = found.items()
    return ", ".join(names), policies[only]


def _where(args: argparse.Namespace) -> tuple[StreamProvider | None, HeadraceConfig, Backend | None]:
    """The app, the configuration, and the backend to read the records from when they are
    not in a store on this machine (a Kafka cluster, or an app's queues that keep no store)."""
    app = load_app(args)
    if app is not None and app.store is None:
        return app, load_config(args.config), app.backend
    config = load_cli_config(args)
    if in_cluster(config):
        return app, config, config.provider().backend
    return app, config, None


def _nothing(source: RetainedRecords, stream: str, namespace: str, since: str) -> str:
    known = source.namespaces()
    if namespace not in known:
        there = ", ".join(known) if known else "none"
        return f"no events of namespace {namespace!r} are retained (namespaces with events: {there})"
    return f"no events of {stream} arrived in the last {since} (a longer --since reaches older ones)"


def sample(
    source: RetainedRecords,
    namespace: str,
    key: str | None,
    since: float,
    time_of: Callable[[Any], int] | None,
    value_by: str | None,
    limit: int,
) -> list[SampleRow]:
    """The newest ``limit`` events of the source that arrived at or after ``since``, in
    arrival order (then queue order). An event whose time does not read is left out (an
    event-time consumer dead-letters it ``invalid_timestamp``)."""
    newest: list[tuple[float, int, int, int, SampleRow]] = []  # a heap: the oldest kept on top
    for queue, position, container in source.containers(namespace, key):
        for event in container.events(position):
            arrival = event.arrival_time
            if arrival < since:
                continue
            try:
                t = event.event_time if time_of is None else to_seconds(time_of(event))  # it reads microseconds
            except (KeyError, AttributeError, TypeError, ValueError):
                continue
            if not math.isfinite(t):
                continue
            item = (
                arrival,
                queue,
                position,
                event.token.event_index,
                SampleRow(arrival, t, str(event.stream_id.key), _value(event.value, value_by)),
            )
            if len(newest) < limit:
                heapq.heappush(newest, item)
            elif item[:4] > newest[0][:4]:
                heapq.heapreplace(newest, item)
    return [item[4] for item in sorted(newest, key=lambda i: i[:4])]


def _value(value: Any, field: str | None) -> float | None:
    if field is not None:
        value = value.get(field) if isinstance(value, dict) else getattr(value, field, None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def write_sample(path: str, rows: list[SampleRow]) -> None:
    """``rows`` as ``headrace simulate``'s CSV."""
    try:
        with Path(path).open("w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(COLUMNS)
            for r in rows:
                out.writerow(
                    [repr(r.arrival_time), repr(r.event_time), r.key, "" if r.value is None else repr(r.value)]
                )
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
