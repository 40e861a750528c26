"""``headrace simulate``: replay a sample of observations through the event-time core.

Reads a CSV with a header (columns ``arrival_time``, ``event_time``, optional ``key`` and
``value``; a row with an empty ``event_time`` is a tick: the clock moved, nothing arrived)
and prints one JSON object per line: each event's fate, each closed window, each watermark
step. Times are all numbers (seconds) or all ISO-8601; the output uses the same form. The
last line, on stderr, sums it up: events kept, adjusted, dropped and dead-lettered, windows,
and the mean delay until an event's result is final.

With ``--timestamp-by FIELD`` it reads your own data instead, JSON lines or CSV (see
:mod:`streams.cli.simulate`): ``--arrival-by``, ``--key-by`` and ``--value-by`` name the
other fields, and each window line then has the ``sum`` of its values.

``headrace simulate`` on your own data: JSON lines or CSV with fields of your naming.

``--timestamp-by FIELD`` names the field with each event's time (seconds since the epoch or
ISO-8601, as ``OrderingPolicy(timestamp_by=...)`` reads it). ``--arrival-by FIELD`` names
the one with its arrival time; without one the file is taken to be in arrival order and each
event to arrive when the newest time so far was current (no event arrives late, out-of-order
ones are out of order). ``--key-by`` and ``--value-by`` name the key and the value to
aggregate. A JSON-lines file (``*.jsonl``, ``*.json``, or text whose first character is
``{``) holds one object per line; anything else is CSV with a header line.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TextIO

from streams.cli import CliError
from streams.core.errors import HeadraceError
from streams.eventtime.policy import OrderingPolicy
from streams.eventtime.replay import ReplayOptions, Row, Summary, replay, row_dedup, summarize
from streams.eventtime.results import EventOutcome, TraceItem, WatermarkAdvance, WindowResult
from streams.eventtime.timetext import parse_duration, parse_instant, parse_window
from streams.eventtime.windows import with_timing

if TYPE_CHECKING:
    from streams.cli.simulate_plot import Panel

COLUMNS = ("arrival_time", "event_time", "key", "value")
SWEEPABLE = ("out_of_order", "late_arrival", "early_arrival", "allowed_lateness", "idle_timeout")

EXAMPLES = """examples:
  headrace simulate sample.csv
  headrace simulate --out-of-order 5s --late-arrival 15s sample.csv
  headrace simulate --window tumbling:5m --allowed-lateness 2m --action accept --flush sample.csv
  headrace simulate --window hopping:20s:5s --group-by-key --plot sample.png sample.csv
  headrace simulate --sweep out_of_order=0s,30s,1m sample.csv
  headrace simulate --dedup-within 1m --dedup-by value sample.csv
  headrace simulate --timestamp-by ts --key-by sensor --value-by temp --window tumbling:1m readings.jsonl
"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a CSV sample through the event-time core (what-if for tolerances)",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Values are parsed in run(), so that every mistake is reported the same way: one line.
    parser.error = _one_line_error  # type: ignore[method-assign]
    d = "a duration: 250ms, 5s, 2m, 1h or seconds"
    parser.add_argument("file", metavar="FILE.csv", help="the sample to replay")
    parser.add_argument("--out-of-order", default="0", metavar="D", help=f"out-of-order tolerance ({d}; default 0)")
    parser.add_argument("--late-arrival", metavar="D", help="late-arrival tolerance (default off)")
    parser.add_argument("--early-arrival", metavar="D", help="early-arrival tolerance (default off)")
    parser.add_argument("--action", default="adjust", metavar="ACTION", help="adjust | drop | accept (default adjust)")
    parser.add_argument("--substreams", action="store_true", help="one watermark per key (TIMESTAMP BY … OVER key)")
    parser.add_argument("--group-by-key", action="store_true", help="windows per key (always, with --substreams)")
    parser.add_argument(
        "--window",
        metavar="SPEC",
        help="tumbling:SIZE, hopping:SIZE:HOP, session:GAP or sliding:SPAN; of events: tumbling:5ev",
    )
    parser.add_argument("--allowed-lateness", metavar="D", help="keep windows open D after the watermark passes")
    parser.add_argument("--idle-timeout", metavar="D", help="close an idle source's windows after D of processing time")
    parser.add_argument("--flush", action="store_true", help="close every open window at the end of input")
    parser.add_argument(
        "--dedup-within", metavar="D", help="drop an event whose --dedup-by was seen within D (Dedup; default off)"
    )
    parser.add_argument(
        "--dedup-by", default="value", choices=("key", "value"), help="what makes two events duplicates (default value)"
    )
    parser.add_argument("--plot", metavar="FILE.png", help="also draw event time against arrival time")
    parser.add_argument(
        "--sweep", metavar="NAME=V1,V2,…", help=f"print a table over values of one of: {', '.join(SWEEPABLE)}"
    )
    add_input_options(parser)


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """Reading the user's own JSON lines or CSV (:mod:`streams.cli.simulate`)."""
    mine = parser.add_argument_group("your own data (JSON lines or CSV)")
    mine.add_argument("--timestamp-by", metavar="FIELD", help="each event's time is this field (reads FILE as yours)")
    mine.add_argument("--arrival-by", metavar="FIELD", help="its arrival time (default: the file is in arrival order)")
    mine.add_argument("--key-by", metavar="FIELD", help="its key (with --group-by-key or --substreams)")
    mine.add_argument("--value-by", metavar="FIELD", help="the value each window sums")


_DURATION_OPTIONS = (
    "--out-of-order",
    "--late-arrival",
    "--early-arrival",
    "--allowed-lateness",
    "--idle-timeout",
    "--dedup-within",
)


def _one_line_error(message: str) -> NoReturn:
    # argparse reads "--out-of-order -5s" as a missing value followed by an unknown flag.
    missing = re.match(r"argument (--[a-z-]+): expected one argument", message)
    if missing and missing.group(1) in _DURATION_OPTIONS:
        message += " (a duration like 250ms, 5s, 2m, 1h; it cannot be negative)"
    print(f"headrace simulate: error: {message} (see --help)", file=sys.stderr)
    raise SystemExit(2)


def run(args: argparse.Namespace) -> int:
    options = _options(args)
    sweep = parse_sweep(args.sweep) if args.sweep else None
    if sweep and sweep[0] in ("allowed_lateness", "idle_timeout") and options.window is None:
        raise CliError(f"--sweep {sweep[0]} needs --window")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise CliError(f"--plot takes a .png file name, not {args.plot!r}")
    form = TimeForm()
    rows = read_input(args, form)
    trace = replay(rows, options)
    if args.plot:
        try:
            from streams.cli.simulate_plot import draw  # matplotlib only when asked for
        except ImportError:
            raise CliError("--plot needs matplotlib: pip install 'headrace[plot]'") from None
        try:
            draw(args.plot, rows, plot_panels(rows, options, trace, sweep), form, sweep[0] if sweep else None)
        except OSError as exc:
            raise CliError(f"cannot write {args.plot}: {exc.strerror or exc}") from None
    if sweep:
        print_sweep(sys.stdout, rows, options, *sweep)
    else:
        write_lines(sys.stdout, trace, form, summed=rows if args.value_by is not None else None)
        print(summary_line(summarize(rows, trace, options)), file=sys.stderr)
    if args.plot:
        print(f"headrace simulate: plot written to {os.path.abspath(args.plot)}", file=sys.stderr)
    return 0


def read_input(args: argparse.Namespace, form: TimeForm) -> list[Row]:
    """The sample: the user's own records with ``--timestamp-by``, else the CSV of
    ``arrival_time, event_time, key, value``."""
    mine = (args.arrival_by, args.key_by, args.value_by)
    if args.timestamp_by is None:
        if any(f is not None for f in mine):
            raise CliError("--arrival-by, --key-by and --value-by read your own data: give --timestamp-by FIELD too")
        return read_rows(args.file, form)
    return read_records(args.file, Fields(args.timestamp_by, *mine), form)


def summary_line(s: Summary) -> str:
    """The last line of a replay, on stderr: what the settings did, in one line.

    >>> summary_line(Summary(83, 31, 0, 2, 12, 4.25))
    'headrace simulate: 83 events: 50 kept, 31 adjusted, 0 dropped, 2 dead-lettered; 12 windows; mean delay 4.250 s'
    >>> summary_line(Summary(5, 0, 2, 0, 1, 1.0, duplicates=2))
    'headrace simulate: 5 events: 3 kept, 0 adjusted, 2 dropped (2 duplicate), 0 dead-lettered; 1 windows; mean delay 1.000 s'
    """
    kept = s.events - s.adjusted - s.dropped - s.dead_lettered
    delay = "-" if math.isnan(s.mean_delay) else f"{s.mean_delay:.3f} s"
    duplicates = f" ({s.duplicates} duplicate)" if s.duplicates else ""
    return (
        f"headrace simulate: {s.events} events: {kept} kept, {s.adjusted} adjusted, {s.dropped} dropped{duplicates}, "
        f"{s.dead_lettered} dead-lettered; {s.windows} windows; mean delay {delay}"
    )


# ---------------------------------------------------------------------- options


def _optional(text: str | None, option: str) -> float | None:
    return None if text is None else parse_duration(text, option)


def parse_sweep(text: str) -> tuple[str, list[tuple[str, float | None]]]:
    """``NAME=V1,V2,…``: the setting a sweep varies and its values (``off`` turns an
    optional tolerance off).

    >>> parse_sweep("out_of_order=0s,30s,1m")
    ('out_of_order', [('0s', 0.0), ('30s', 30.0), ('1m', 60.0)])
    """
    name, sep, values = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in SWEEPABLE:
        raise CliError(f"--sweep takes NAME=V1,V2,… with NAME one of {', '.join(SWEEPABLE)}, not {text!r}")
    labels = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not v for v in labels):
        raise CliError(f"--sweep {name}: give values separated by commas, like {name}=0s,30s,1m")
    parsed: list[tuple[str, float | None]] = []
    for label in labels:
        if label == "off":
            if name in ("out_of_order", "allowed_lateness"):
                raise CliError(f"--sweep {name}: 'off' applies to late_arrival, early_arrival, idle_timeout")
            parsed.append((label, None))
        else:
            parsed.append((label, parse_duration(label, f"--sweep {name}")))
    return name, parsed


def _options(args: argparse.Namespace) -> ReplayOptions:
    window = parse_window(args.window, "--window") if args.window else None
    lateness = _optional(args.allowed_lateness, "--allowed-lateness")
    idle = _optional(args.idle_timeout, "--idle-timeout")
    if window is None and (lateness is not None or idle is not None):
        raise CliError("--allowed-lateness and --idle-timeout need --window")
    if window is not None:
        window = with_timing(window, lateness or 0.0, idle)
    if args.action not in ("adjust", "drop", "accept"):
        raise CliError(f"--action takes adjust, drop or accept, not {args.action!r}")
    policy = OrderingPolicy(
        over="key" if args.substreams else None,
        out_of_order=parse_duration(args.out_of_order, "--out-of-order"),
        late_arrival=_optional(args.late_arrival, "--late-arrival"),
        early_arrival=_optional(args.early_arrival, "--early-arrival"),
        action=args.action,
    )
    within = _optional(args.dedup_within, "--dedup-within")
    if within == 0:
        raise CliError("--dedup-within takes a duration > 0 (leave it out for no dedup)")
    dedup = None if within is None else row_dedup(args.dedup_by, within)
    return ReplayOptions(policy, window, group_by_key=args.group_by_key, flush=args.flush, dedup=dedup)


# ---------------------------------------------------------------------- input


class TimeForm:
    """How a sample writes its times (numbers of seconds, or ISO-8601), learnt from the
    first one; the output writes times the same way.

    >>> f = TimeForm(); f.parse("2024-05-01T12:07:00Z", "x"), f.format(1714565220.0)
    (1714565220.0, '2024-05-01T12:07:00Z')
    """

    def __init__(self) -> None:
        self.iso: bool | None = None
        self._tz: tzinfo | None = None
        self._zulu = False

    def parse(self, text: str, where: str) -> float:
        seconds, moment = parse_instant(text, where)
        self._learn(moment is not None, text, where, None if moment is None else moment.tzinfo)
        return seconds

    def _learn(self, iso: bool, text: str, where: str, tz: tzinfo | None = None) -> None:
        if self.iso is None:
            self.iso, self._tz, self._zulu = iso, tz, text.upper().endswith("Z")
        elif self.iso != iso:
            first = "ISO-8601 times" if self.iso else "numbers of seconds"
            raise CliError(f"{where}: {text!r} breaks the form of the earlier times ({first}): use one form")

    def format(self, t: float) -> float | int | str:
        if not self.iso:
            # Exact: every time the core gives back is a whole microsecond (streams.core.micros),
            # whose float prints as its decimal (0.3, not 0.30000000000000004).
            return int(t) if t.is_integer() else t
        moment = datetime.fromtimestamp(t, tz=UTC)
        if self._tz is None:
            return moment.replace(tzinfo=None).isoformat()
        text = moment.astimezone(self._tz).isoformat()
        return text[:-6] + "Z" if self._zulu and text.endswith("+00:00") else text

    def to_datetime(self, t: float) -> datetime:
        """A naive UTC datetime, for plotting."""
        return datetime.fromtimestamp(t, tz=UTC).replace(tzinfo=None)


def read_rows(path: str, form: TimeForm) -> list[Row]:
    """The sample's rows, checked: known columns, well-formed times, arrival never going
    backwards. Every error names the line and row."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return _rows(csv.reader(f), form, path)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise CliError(f"{path} is not a readable CSV file: {exc}") from None


def _rows(reader: Any, form: TimeForm, path: str) -> list[Row]:
    header = next(reader, None)
    if header is None:
        raise CliError(f"{path} is empty: the first line names the columns ({', '.join(COLUMNS)})")
    names = [name.strip() for name in header]
    for name in names:
        if name not in COLUMNS:
            raise CliError(f"{path}: unknown column {name!r} (the columns are {', '.join(COLUMNS)})")
    if len(set(names)) != len(names):
        raise CliError(f"{path}: a column appears twice in the header")
    for needed in ("arrival_time", "event_time"):
        if needed not in names:
            raise CliError(f"{path}: the header has no {needed} column")
    rows: list[Row] = []
    previous = -math.inf
    for fields in reader:
        line = reader.line_num
        if not any(field.strip() for field in fields):
            continue  # blank line
        where = f"line {line} (row {len(rows)})"
        if len(fields) > len(names):
            raise CliError(f"{where}: {len(fields)} fields for {len(names)} columns")
        cells = dict(zip(names, (field.strip() for field in fields)))
        arrival_text = cells.get("arrival_time", "")
        if not arrival_text:
            raise CliError(f"{where}: arrival_time is empty")
        arrival = form.parse(arrival_text, f"{where}, arrival_time")
        if arrival < previous:
            raise CliError(f"{where}: arrival_time {arrival_text} goes backwards (arrival times never decrease)")
        previous = arrival
        event_text = cells.get("event_time", "")
        event_time = form.parse(event_text, f"{where}, event_time") if event_text else None
        rows.append(Row(len(rows), arrival, event_time, cells.get("key") or None, cells.get("value") or None))
    return rows


# ---------------------------------------------------------------------- output


def to_json(item: TraceItem, form: TimeForm) -> dict[str, Any] | None:
    """The output object for one trace item (None for the final +infinity watermark)."""
    t: Callable[[float], Any] = form.format
    if isinstance(item, EventOutcome):
        row = item.record
        assert isinstance(row, Row)  # what replay() fed the processor
        return {
            "type": "event",
            "index": row.index,
            "key": row.key,
            "event_time": t(row.event_time),
            "arrival_time": t(row.arrival_time),
            "timestamp": None if item.timestamp is None else t(item.timestamp),
            "status": item.status,
            "reason": item.reason,
        }
    if isinstance(item, WindowResult):
        return {
            "type": "window",
            "key": item.key,
            "start": t(item.start),
            "end": t(item.end),
            "count": len(item.value),
            "events": item.value,
            "closed_at": None if item.closed_at is None else t(item.closed_at),
            # As these lines always had it: closed by the final watermark (--flush).
            "final": item.closed_at is None,
        }
    if isinstance(item, WatermarkAdvance) and item.arrival_time is not None and math.isfinite(item.watermark):
        return {
            "type": "watermark",
            "arrival_time": t(item.arrival_time),
            "substream": item.substream,
            "watermark": t(item.watermark),
        }
    return None


def write_lines(
    out: TextIO, trace: Sequence[TraceItem], form: TimeForm, *, summed: Sequence[Row] | None = None
) -> None:
    """One JSON object per line; with ``summed`` (the rows replayed), each window's ``sum``
    of its events' numeric values."""
    for item in trace:
        obj = to_json(item, form)
        if obj is not None:
            if summed is not None and isinstance(item, WindowResult):
                obj["sum"] = window_sum([summed[index].value for index in item.value])
            out.write(json.dumps(obj) + "\n")


def window_sum(values: Sequence[object]) -> float:
    """The sum of a window's numeric values (others are not counted).

    >>> window_sum([2, 3.5, None, "x"])
    5.5
    """
    return float(sum(v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)))


def plot_panels(
    rows: Sequence[Row],
    options: ReplayOptions,
    trace: Sequence[TraceItem],
    sweep: tuple[str, list[tuple[str, float | None]]] | None,
) -> list[Panel]:
    """What ``--plot`` draws: the replay, or with ``--sweep`` one panel per value, each
    titled with its setting and what it did."""
    from streams.cli.simulate_plot import Panel

    if sweep is None:
        return [Panel("", trace, options)]
    name, values = sweep
    panels = []
    for label, value in values:
        varied = _varied(options, name, label, value)
        varied_trace = replay(rows, varied)
        s = summarize(rows, varied_trace, varied)
        delay = "no result final" if math.isnan(s.mean_delay) else f"mean delay {s.mean_delay:.1f} s"
        title = f"{name}={label}: {delay}\n{s.adjusted} adjusted, {s.dropped} dropped, {s.dead_lettered} dead-lettered"
        panels.append(Panel(title, varied_trace, varied))
    return panels


def print_sweep(
    out: TextIO, rows: Sequence[Row], options: ReplayOptions, name: str, values: list[tuple[str, float | None]]
) -> None:
    """One line per value: how many events it adjusts, drops and dead-letters, and the
    mean processing delay until an event's result is final."""
    header = (name, "events", "adjusted", "dropped", "dead_lettered", "windows", "mean_delay_s")
    lines: list[tuple[object, ...]] = [header]
    for label, value in values:
        varied = _varied(options, name, label, value)
        s = summarize(rows, replay(rows, varied), varied)
        delay = "-" if math.isnan(s.mean_delay) else f"{s.mean_delay:.3f}"
        lines.append((label, s.events, s.adjusted, s.dropped, s.dead_lettered, s.windows, delay))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        out.write("  ".join(cells) + "\n")


def _varied(options: ReplayOptions, name: str, label: str, value: float | None) -> ReplayOptions:
    """``options`` with the swept setting ``name`` at ``value`` (given as ``label``)."""
    try:
        return options.with_setting(name, value)
    except (HeadraceError, ValueError) as exc:
        raise CliError(f"--sweep {name}={label}: {exc}") from None


class Times(Protocol):
    """How times are read (``streams.cli.simulate.TimeForm``)."""

    def parse(self, text: str, where: str) -> float: ...


@dataclass(frozen=True, slots=True)
class Fields:
    """The fields of the user's records that hold what a sample row needs."""

    timestamp: str
    arrival: str | None = None
    key: str | None = None
    value: str | None = None


def read_records(path: str, fields: Fields, form: Times) -> list[Row]:
    """The rows of the user's file, in file order; every error names the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not UTF-8 text") from None
    rows: list[Row] = []
    newest = -math.inf
    for line, record in _records(path, text):
        where = f"{path}, line {line}"
        timestamp = _time(record, fields.timestamp, form, where, "--timestamp-by")
        if fields.arrival is not None:
            arrival = _time(record, fields.arrival, form, where, "--arrival-by")
            if rows and arrival < rows[-1].arrival_time:
                raise CliError(f"{where}: arrival {fields.arrival!r} goes backwards (arrival times never decrease)")
        else:
            newest = max(newest, timestamp)
            arrival = newest  # in arrival order: it arrives when the newest time was current
        key = record.get(fields.key) if fields.key is not None else None
        value = _value(record.get(fields.value)) if fields.value is not None else None
        rows.append(Row(len(rows), arrival, timestamp, None if key is None else str(key), value))
    return rows


def _records(path: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    jsonl = path.lower().endswith((".jsonl", ".json")) or text.lstrip().startswith("{")
    if jsonl:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CliError(f"{path}, line {number}: not valid JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(value, dict):
                raise CliError(f"{path}, line {number}: an event is a JSON object, not {type(value).__name__}")
            yield number, value
        return
    reader = csv.DictReader(text.splitlines())
    try:
        for record in reader:
            if any((cell or "").strip() for cell in record.values() if isinstance(cell, str)):
                yield reader.line_num, {k.strip(): v for k, v in record.items() if isinstance(k, str)}
    except csv.Error as exc:
        raise CliError(f"{path} is not a readable CSV file: {exc}") from None


def _time(record: dict[str, Any], field: str, form: Times, where: str, option: str) -> float:
    value = record.get(field)
    if value is None or value == "":
        raise CliError(f"{where}: no field {field!r} ({option})")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return form.parse(repr(value), f"{where}, {field}")
    return form.parse(str(value).strip(), f"{where}, {field}")


def _value(value: Any) -> object:
    """A number when the cell reads as one (CSV cells are text), else as it is."""
    if isinstance(value, str):
        try:
            return float(value) if value.strip() else None
        except ValueError:
            return value
    return value
