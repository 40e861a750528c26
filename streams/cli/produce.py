"""``headrace produce``: publish JSON lines or CSV rows to a stream.

Each line of a JSON-lines input is one event: its JSON value (an object, usually). Each row
of a CSV input (a header line first) is one event: an object of the row's cells by column
name; a cell that reads as a number becomes one and an empty cell becomes null, unless
``--strings`` keeps every cell as it is written. ``--event-time FIELD`` takes each event's
time from that field: seconds since the epoch, or an ISO-8601 time (UTC unless it says
otherwise); without it an event's time is its arrival time.

``--key-field FIELD`` publishes each event to a stream of its own key: ``--stream`` is then
the namespace and the key is the event's FIELD (``--stream tolls --key-field booth`` sends an
event with ``"booth": "B1"`` to ``tolls/B1``), as ``faust send --key`` and kcat ``-K`` do.

The store at ``--path`` must exist (a worker, or an earlier ``produce``, made it): a path with
no store is refused, since no worker reads it, unless ``--create`` (or ``--queues N``) asks for
a new one. A store the configuration names is made on first use, as a worker of it would.
``--app module:attribute`` publishes through your application's provider (its store, queue
count and co-partitioned namespaces), as a worker of it reads them.

Events go out in batches (``--batch-size``, one queue record each), in input order, sent
without waiting for each write (the provider's pipelined ``send``); the command returns once
all are durable. A line that cannot be read stops the command with exit code 2 after
publishing everything before it, and nothing from it on; the error names the line. The
provider is opened to publish only: no worker starts.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import anyio
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from streams.cli import CliError
from streams.cli.common import add_config_options, load_app, load_cli_config, plural
from streams.core.errors import ConfigurationError, EncodeError, HeadraceError, PublishError, a_type
from streams.core.ids import StreamId
from streams.eventtime.timetext import parse_instant
from streams.runtime.constructors import stored_queue_count
from streams.runtime.provider import StreamProvider

EXAMPLES = """examples:
  headrace produce --path ./store --stream sensors/s-1 readings.jsonl
  headrace produce --app myapp:provider --stream tolls --key-field booth tolls.csv
  headrace produce --path ./new-store --create --queues 4 --stream sensors/s-1 readings.jsonl
  cat readings.jsonl | headrace produce --config headrace.toml --stream sensors/s-1
  headrace produce --path ./store --stream tolls/booth-3 --event-time time tolls.csv
  headrace produce --path ./store --stream tolls/booth-3 --format csv --strings - < tolls.txt
"""

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?\Z")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="publish JSON lines or CSV rows from a file or stdin to a stream",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", default="-", metavar="FILE|-", help="the input (default -: stdin)")
    parser.add_argument(
        "--stream",
        required=True,
        metavar="NS/KEY",
        help="the stream to publish to, namespace/key (NS with --key-field)",
    )
    parser.add_argument(
        "--key-field", metavar="FIELD", help="publish each event to stream NS/<its FIELD>: a stream per key"
    )
    add_config_options(parser, queues=True)
    parser.add_argument(
        "--create", action="store_true", help="make a new store at --path if there is none (default: refuse)"
    )
    parser.add_argument(
        "--format", choices=("jsonl", "csv"), help="the input's format (default: csv for a .csv file, else jsonl)"
    )
    parser.add_argument("--event-time", metavar="FIELD", help="take each event's time from this field")
    parser.add_argument("--strings", action="store_true", help="CSV: keep every cell a string")
    parser.add_argument(
        "--batch-size", type=int, default=500, metavar="N", help="events per queue record (default 500)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


class BadLine(HeadraceError):
    """An input line that cannot become an event."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Record:
    line: int
    value: Any
    event_time: float | None = None


def run(args: argparse.Namespace) -> int:
    target = _target(args.stream, args.key_field)
    if args.batch_size < 1:
        raise CliError(f"--batch-size is at least 1, not {args.batch_size}")
    fmt = args.format or ("csv" if args.file.lower().endswith(".csv") else "jsonl")
    name = "stdin" if args.file == "-" else args.file
    with _open(args.file) as raw:
        provider = _provider_maker(args)()  # after the input opened: a typo makes no store
        source = CountingLines(raw)
        records = parse_records(source, fmt, args.event_time, strings=args.strings)
        total = None if args.file == "-" else Path(args.file).stat().st_size
        show = total is not None and not args.quiet and Console(stderr=True).is_terminal
        with _progress(show, name, total) as advance:
            batcher = Batcher(provider, target, args.batch_size, args.event_time is not None)
            started = time.perf_counter()
            try:
                anyio.run(batcher.publish, records, lambda: advance(source.bytes_read))
            except BadLine as bad:
                raise CliError(
                    f"{name}, line {bad.line}: {bad.problem}; published {plural(batcher.published, 'event')} "
                    "from the lines before it, nothing from this line on"
                ) from None
            except PublishError as exc:
                raise CliError(f"{name}: {exc}") from None
    elapsed = time.perf_counter() - started
    where = (
        str(target)
        if isinstance(target, StreamId)
        else f"{plural(len(batcher.streams), 'stream')} of {target.namespace} (by {target.field})"
    )
    print(
        f"headrace produce: published {plural(batcher.published, 'event')} to {where} "
        f"in {plural(batcher.batches, 'batch', 'batches')} ({elapsed:.1f} s)"
    )
    return 0


@dataclass(frozen=True, slots=True)
class KeyedTarget:
    """Streams ``namespace/<the event's field>``: one per key (``--key-field``)."""

    namespace: str
    field: str

    def stream_of(self, record: Record) -> StreamId:
        value = record.value
        key = value.get(self.field) if isinstance(value, dict) else None
        if key is None or isinstance(key, (dict, list)) or key == "":
            if not isinstance(value, dict):
                raise BadLine(
                    record.line, f"--key-field {self.field} needs an object with that field, not {a_type(value)}"
                )
            raise BadLine(record.line, f"no key: field {self.field!r} is missing, empty or not a single value")
        return StreamId(self.namespace, str(key))


def _target(stream: str, key_field: str | None) -> StreamId | KeyedTarget:
    if key_field is None:
        return StreamId.parse(stream)
    if "/" in stream or not stream:
        raise CliError(f"with --key-field, --stream is the namespace (e.g. tolls), not {stream!r}")
    return KeyedTarget(stream, key_field)


def _provider_maker(args: argparse.Namespace) -> Callable[[], StreamProvider]:
    """How to make the provider to publish with, checked now (before the input is read):
    the application's (``--app``), or the configuration's, whose store must exist unless
    ``--create`` or ``--queues`` asks for a new one."""
    app = load_app(args)
    if app is not None:
        if args.create or args.queues is not None:
            raise CliError("--app publishes to the application's own store and queues: drop --create and --queues")
        if not app.backend.durable:
            raise CliError(
                f"--app {args.app} is on memory queues: events published there vanish when this command ends"
            )
        return lambda: app
    config = load_cli_config(args)
    settings = config.provider_settings
    if settings.adapter == "memory":
        raise CliError(
            "provider.adapter is 'memory': events published there vanish when this command "
            "ends; produce to an embedded store (--path) or to Kafka"
        )
    # A --path typed by hand may be a typo; a configured one is the workers' own.
    if args.path is not None and settings.adapter == "embedded" and not (args.create or args.queues is not None):
        path = config.store_path()
        if stored_queue_count(path) is None:
            raise CliError(
                f"no headrace store at {str(path)!r}: no worker reads it; give the directory your workers "
                "use (or --app), or --create to make a new store there (--queues N: 8 by default)"
            )
    return config.provider


def _open(path: str) -> BinaryIO:
    if path == "-":
        return open(sys.stdin.fileno(), "rb", closefd=False)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _progress(show: bool, name: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar over the input's bytes on stderr (when ``show``); yields ``advance(done)``."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), disable=not show) as bar:
        task = bar.add_task(name, total=total)
        yield lambda done: bar.update(task, completed=done)


# -- reading ----------------------------------------------------------------------------------


class CountingLines:
    """The lines of a binary input as text, counting the bytes read so far."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.bytes_read = 0

    def __iter__(self) -> Iterator[str]:
        for number, chunk in enumerate(self._raw, 1):
            self.bytes_read += len(chunk)
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError:
                raise BadLine(number, "not UTF-8 text") from None
            yield text.removeprefix("\ufeff") if number == 1 else text


def parse_records(lines: Iterable[str], fmt: str, event_time: str | None, *, strings: bool = False) -> Iterator[Record]:
    """The events of JSON-lines or CSV text, each with its line number (and event time, when
    ``event_time`` names a field); :class:`BadLine` at the first line that cannot be one.

    >>> [r.value for r in parse_records(['t,v\\n', '3,x\\n', '4.5,\\n'], "csv", None)]
    [{'t': 3, 'v': 'x'}, {'t': 4.5, 'v': None}]
    """
    rows = _json_lines(lines) if fmt == "jsonl" else _csv_rows(lines, strings)
    for line, value in rows:
        yield Record(line, value, None if event_time is None else _event_time(value, event_time, line))


def _json_lines(lines: Iterable[str]) -> Iterator[tuple[int, Any]]:
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            raise BadLine(number, f"not valid JSON: {exc.msg} (column {exc.colno})") from None


def _csv_rows(lines: Iterable[str], strings: bool) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.reader(lines)
    header: list[str] | None = None
    try:
        for fields in reader:
            if not any(f.strip() for f in fields):
                continue  # a blank line
            if header is None:
                if _is_json(",".join(fields)):
                    raise BadLine(
                        reader.line_num,
                        "this is JSON, not a CSV header: the input reads as JSON lines (--format jsonl)",
                    )
                header = [f.strip() for f in fields]
                if not all(header) or len(set(header)) != len(header):
                    raise BadLine(reader.line_num, "the header needs a distinct, non-empty name for every column")
                continue
            if len(fields) != len(header):
                raise BadLine(reader.line_num, f"{len(fields)} fields for {len(header)} columns")
            yield reader.line_num, {name: cell if strings else _cell(cell) for name, cell in zip(header, fields)}
    except csv.Error as exc:
        raise BadLine(reader.line_num, f"not readable CSV: {exc}") from None


def _is_json(text: str) -> bool:
    """Whether a line is a JSON object or array (what a CSV header never is)."""
    text = text.strip()
    if not text.startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _cell(text: str) -> Any:
    """A number if the cell reads as one, ``None`` if it is empty, else the text."""
    stripped = text.strip()
    if not stripped:
        return None
    if _INT.match(stripped):
        return int(stripped)
    if _FLOAT.match(stripped):
        number = float(stripped)
        return number if math.isfinite(number) else text
    return text


def _event_time(value: Any, name: str, line: int) -> float:
    if not isinstance(value, dict):
        raise BadLine(line, f"--event-time {name} needs an object with that field, not {a_type(value)}")
    t = value.get(name)
    if t is None:
        raise BadLine(line, f"no event time: field {name!r} is missing or empty")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    if isinstance(t, str):
        try:
            return parse_instant(t.strip(), f"field {name!r}")[0]
        except ConfigurationError as exc:
            raise BadLine(line, str(exc)) from None
    raise BadLine(line, f"field {name!r} is not a time (seconds or ISO-8601): {t!r}")


# -- publishing -------------------------------------------------------------------------------


@dataclass
class Batcher:
    """Publishes records to their stream (``target``: one, or one per key) in batches of
    ``size`` per stream, each stream's in input order, counting them."""

    provider: StreamProvider
    target: StreamId | KeyedTarget
    size: int
    timed: bool
    published: int = 0
    batches: int = 0
    streams: set[StreamId] = field(default_factory=set)
    _pending: dict[StreamId, list[Record]] = field(default_factory=dict)

    async def publish(self, records: Iterable[Record], after_batch: Callable[[], None]) -> None:
        """Publish every record; at a :class:`BadLine`, publish what came before, then raise."""
        target = self.target
        async with self.provider.client():
            try:
                for record in records:
                    sid = target if isinstance(target, StreamId) else target.stream_of(record)
                    pending = self._pending.setdefault(sid, [])
                    pending.append(record)
                    if len(pending) >= self.size:
                        await self._flush(sid)
                        after_batch()
            except BadLine:
                await self._flush_all()  # the lines before the bad one
                raise
            await self._flush_all()
            after_batch()

    async def _flush_all(self) -> None:
        for sid in list(self._pending):
            await self._flush(sid)

    async def _flush(self, sid: StreamId) -> None:
        batch = self._pending.pop(sid, [])
        if not batch:
            return
        self.streams.add(sid)
        stream = self.provider.get_stream(sid)
        times = [r.event_time for r in batch] if self.timed else None
        try:
            await stream.send_batch([r.value for r in batch], event_times=times)
        except EncodeError as exc:
            raise BadLine(batch[0].line, f"(in the batch of lines {batch[0].line}-{batch[-1].line}) {exc}") from None
        self.published += len(batch)
        self.batches += 1
