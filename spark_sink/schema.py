"""The declared output of a handoff stream, and its exact Spark and Arrow forms.

A consumer declares what it hands to Spark (window results, or events released in timestamp
order); the declaration is stored with the stream, Spark's schema is derived from it, and every
row written is conformed to it. The Arrow types are exactly those Spark expects from a Python
DataSource (``timestamp('us', tz='UTC')``, ``string`` not ``large_string``), so the record
batches read back go to Spark untouched.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, TypeAlias, cast

import pyarrow as pa

from streams.core.errors import HandoffSchemaError
from streams.core.micros import PER_SECOND

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(value: Any) -> int | None:
    """A timestamp cell: POSIX seconds (headrace's event times, exact microseconds as
    :func:`~streams.core.micros.to_seconds` gives them: read back to the same microsecond) or
    an aware datetime."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise HandoffSchemaError(f"timestamp {value!r} has no timezone (use tzinfo=UTC)")
        return (value - _EPOCH) // _MICROSECOND
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return round(value * PER_SECOND)  # to_micros, multiplied here: once a cell
    raise HandoffSchemaError(f"a timestamp is POSIX seconds or an aware datetime, not {value!r}")


def _whole(value: Any) -> Any:
    """An integer cell: Arrow would silently truncate a float with a fraction (2.5 -> 2)."""
    if type(value) is float and not value.is_integer():
        raise HandoffSchemaError(f"{value!r} is not a whole number (declare the column double)")
    return value


@dataclass(frozen=True, slots=True)
class _ColumnKind:
    """One supported column type: its Arrow type as Spark expects it, and Spark's JSON name."""

    name: str
    arrow: pa.DataType
    spark: str
    convert: Callable[[Any], Any] | None = None  # cell conversion for Python rows


_KINDS = {
    kind.name: kind
    for kind in (
        _ColumnKind("string", pa.string(), "string"),
        _ColumnKind("boolean", pa.bool_(), "boolean"),
        _ColumnKind("int", pa.int32(), "integer", _whole),
        _ColumnKind("bigint", pa.int64(), "long", _whole),
        _ColumnKind("float", pa.float32(), "float"),
        _ColumnKind("double", pa.float64(), "double"),
        _ColumnKind("binary", pa.binary(), "binary"),
        _ColumnKind("timestamp", pa.timestamp("us", tz="UTC"), "timestamp", _micros),
    )
}
_ALIASES = {
    "integer": "int",
    "int32": "int",
    "long": "bigint",
    "int64": "bigint",
    "bool": "boolean",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class HandoffColumn:
    """One output column: a name and a Spark SQL type name (``string``, ``bigint``, ``double``,
    ``timestamp``, ``int``, ``float``, ``boolean``, ``binary``; ``long`` is ``bigint``).

    >>> HandoffColumn("count", "long")
    HandoffColumn(name='count', type='bigint')
    """

    name: str
    type: str

    def __init__(self, name: str, type: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise HandoffSchemaError(f"column name {name!r} is not an identifier (letters, digits, '_')")
        canonical = _ALIASES.get(type.lower(), type.lower()) if isinstance(type, str) else None
        if canonical not in _KINDS:
            raise HandoffSchemaError(f"column {name!r} has type {type!r}; declare one of: {', '.join(_KINDS)}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "type", canonical)

    @property
    def kind(self) -> _ColumnKind:
        return _KINDS[self.type]


Rows: TypeAlias = Sequence[Mapping[str, Any] | Sequence[Any]]
HandoffData: TypeAlias = pa.RecordBatch | pa.Table | Rows


@dataclass(frozen=True)
class HandoffSchema:
    """The declared output of a handoff stream: an ordered list of typed columns.

    >>> s = HandoffSchema.windows({"count": "bigint", "mean": "double"})
    >>> s.ddl()
    'window_start timestamp, window_end timestamp, key string, count bigint, mean double'
    >>> s.to_table([{"window_start": 0.0, "window_end": 60.0, "key": "a",
    ...              "count": 2, "mean": 1.5}]).num_rows
    1
    """

    columns: tuple[HandoffColumn, ...]

    def __post_init__(self) -> None:
        if not self.columns:
            raise HandoffSchemaError("a handoff schema needs at least one column")
        seen: set[str] = set()
        for column in self.columns:
            folded = column.name.lower()  # Spark resolves names case-insensitively
            if folded in seen:
                raise HandoffSchemaError(f"column {column.name!r} is declared twice")
            seen.add(folded)

    @classmethod
    def of(cls, columns: Mapping[str, str] | Iterable[tuple[str, str]]) -> HandoffSchema:
        """Columns in order, from ``{name: type}`` or ``[(name, type), ...]``."""
        pairs = columns.items() if isinstance(columns, Mapping) else columns
        return cls(tuple(HandoffColumn(name, type) for name, type in pairs))

    @classmethod
    def windows(cls, aggregates: Mapping[str, str], *, key: bool = True, stream: bool = False) -> HandoffSchema:
        """Window results: ``window_start``, ``window_end``, ``stream_id`` (``ns/key``, with
        ``stream=True``, as a consumer's :class:`~spark_sink.handoff.Handoff` declares it),
        ``key`` (omitted for global windows with ``key=False``), then the aggregates in order.

        >>> HandoffSchema.windows({"n": "bigint"}, stream=True).ddl()
        'window_start timestamp, window_end timestamp, stream_id string, key string, n bigint'
        """
        head = [("window_start", "timestamp"), ("window_end", "timestamp")]
        if stream:
            head.append(("stream_id", "string"))
        if key:
            head.append(("key", "string"))
        return cls.of([*head, *aggregates.items()])

    @classmethod
    def events(cls, fields: Mapping[str, str]) -> HandoffSchema:
        """Events released in timestamp order: ``event_time``, ``stream_id`` (``ns/key``),
        then the payload fields in order."""
        return cls.of([("event_time", "timestamp"), ("stream_id", "string"), *fields.items()])

    @cached_property
    def arrow(self) -> pa.Schema:
        """The Arrow schema Spark requires of the record batches a DataSource yields.

        Every column is nullable, as in the schema Spark derives from :meth:`spark_json`.
        """
        return pa.schema([pa.field(c.name, c.kind.arrow, nullable=True) for c in self.columns])

    def spark_json(self) -> dict[str, Any]:
        """Spark's JSON form of the schema (``StructType.fromJson`` reads it)."""
        return {
            "type": "struct",
            "fields": [{"name": c.name, "type": c.kind.spark, "nullable": True, "metadata": {}} for c in self.columns],
        }

    def ddl(self) -> str:
        """The schema as a Spark DDL string, e.g. for ``.schema(...)`` and error messages."""
        return ", ".join(f"{c.name} {c.type}" for c in self.columns)

    def to_json(self) -> str:
        """The stored form (in the store's ``handoff_streams`` table)."""
        return json.dumps([[c.name, c.type] for c in self.columns])

    @classmethod
    def from_json(cls, text: str) -> HandoffSchema:
        return cls.of(json.loads(text))

    def to_table(self, data: HandoffData) -> pa.Table:
        """Conform rows or Arrow data to this schema, exactly.

        ``data`` is a ``pyarrow.RecordBatch`` or ``Table`` with these column names in this
        order (types are cast safely when they differ), or Python rows: mappings by column
        name or sequences in column order. Timestamps in rows are POSIX seconds or aware
        datetimes. Anything else raises :class:`HandoffSchemaError`.
        """
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if isinstance(data, pa.Table):
            return self._conform(data)
        return pa.Table.from_arrays(self._columns_of(data), schema=self.arrow)

    def _conform(self, table: pa.Table) -> pa.Table:
        if table.schema.equals(self.arrow):
            return table
        if table.schema.names != self.arrow.names:
            raise HandoffSchemaError(
                f"columns {table.schema.names} do not match the declared output "
                f"({self.ddl()}): hand off the declared columns, in order"
            )
        for given, wanted in zip(table.schema, self.arrow, strict=True):
            # Arrow would read plain numbers as microseconds: too easy to get wrong silently.
            if pa.types.is_timestamp(wanted.type) and not pa.types.is_timestamp(given.type):
                raise HandoffSchemaError(
                    f"column {given.name!r} is {given.type}, not a timestamp: hand off "
                    "Arrow timestamps, or rows with POSIX seconds or aware datetimes"
                )
        try:
            return table.cast(self.arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise HandoffSchemaError(
                f"cannot convert {table.schema.to_string(show_schema_metadata=False)!r} "
                f"to the declared output ({self.ddl()}): {exc}"
            ) from None

    def _columns_of(self, rows: Rows) -> list[pa.Array]:
        names = [c.name for c in self.columns]
        try:
            if rows and isinstance(rows[0], Mapping):
                mappings = cast(Sequence[Mapping[str, Any]], rows)
                cells = [[row[name] for row in mappings] for name in names]
            else:
                if any(len(row) != len(names) for row in rows):
                    raise HandoffSchemaError(f"a row does not have the {len(names)} declared columns ({self.ddl()})")
                cells = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in names]
        except KeyError as missing:
            raise HandoffSchemaError(f"a row lacks column {missing}; the declared output is ({self.ddl()})") from None
        arrays = []
        for column, values in zip(self.columns, cells, strict=True):
            kind = column.kind
            if kind.convert is not None:
                try:
                    values = [kind.convert(v) for v in values]
                except HandoffSchemaError as exc:
                    raise HandoffSchemaError(
                        f"column {column.name!r} ({column.type}) got a value it cannot hold: {exc}"
                    ) from None
            try:
                arrays.append(pa.array(values, type=kind.arrow))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raise HandoffSchemaError(
                    f"column {column.name!r} ({column.type}) got a value it cannot hold: {exc}"
                ) from None
        return arrays
