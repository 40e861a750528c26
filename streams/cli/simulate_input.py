"""``headrace simulate`` on your own data: JSON lines or CSV with fields of your naming.

``--timestamp-by FIELD`` names the field with each event's time (seconds since the epoch or
ISO-8601, as ``OrderingPolicy(timestamp_by=...)`` reads it). ``--arrival-by FIELD`` names
the one with its arrival time; without one the file is taken to be in arrival order and each
event to arrive when the newest time so far was current (no event arrives late, out-of-order
ones are out of order). ``--key-by`` and ``--value-by`` name the key and the value to
aggregate. A JSON-lines file (``*.jsonl``, ``*.json``, or text whose first character is
``{``) holds one object per line; anything else is CSV with a header line.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from streams.cli import CliError
from streams.eventtime.replay import Row


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
