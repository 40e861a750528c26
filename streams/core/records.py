"""Record formats: how the value of one foreign queue record becomes one event, and back
(Orleans' queue data adapter, for records headrace did not write).

A topic other programs write holds one event per record in some serialization; a
:class:`RecordFormat` decodes a record's value into the event's value and encodes a value
into a record's value. The built-in ones are named by a string: ``"json"``, ``"msgpack"``,
``"text"`` (UTF-8) and ``"bytes"`` (the value as it is); ``"headrace"`` means headrace's own
batch containers (no record format); ``"avro"``, ``"json_schema"`` and ``"protobuf"`` are
Confluent's schema-registry formats (``streams.backends.kafka.registry``). Anything else is
an object with the two methods (or a :class:`RecordAwareFormat`, which sees the record and may
await a lookup):

>>> import zlib
>>> class Deflated:
...     name = "deflated text"
...     def decode(self, data: bytes) -> str:
...         return zlib.decompress(data).decode()
...     def encode(self, value: str) -> bytes:
...         return zlib.compress(value.encode())
>>> fmt = record_format(Deflated())
>>> fmt.decode(fmt.encode("hello"))
'hello'
>>> record_format("json").decode(b'{"t": 1}')
{'t': 1}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgpack
import msgspec

from streams.core.errors import ConfigurationError


@runtime_checkable
class RecordFormat(Protocol):
    """Decodes a record's value into an event's value, and encodes one back.

    ``decode`` raises (any exception) for bytes it cannot read: the record is then
    dead-lettered with its raw bytes, and reading goes on. ``encode`` raises for a value it
    cannot write: nothing is sent.
    """

    name: str

    def decode(self, data: bytes) -> Any: ...

    def encode(self, value: Any) -> bytes: ...


@dataclass(frozen=True, slots=True)
class RecordInfo:
    """Where a record stands and what it carries besides its value: what a
    :class:`RecordAwareFormat` is told of each record it decodes."""

    topic: str
    partition: int
    offset: int
    headers: Sequence[tuple[str, bytes]] = ()


@runtime_checkable
class RecordAwareFormat(RecordFormat, Protocol):
    """A format that sees the record it decodes, and may wait before it can.

    ``prepare`` is awaited once per read of a partition, before any of its records is
    decoded, with every record's value and :class:`RecordInfo`, and returns how many of them,
    from the first, it is ready to decode: the place for I/O (a schema registry's lookup of the
    schema ids the read holds, once per id). What retrying can fix (the registry is away, an id
    it does not know yet) stops it there: the records from that one on are read again later,
    never dead-lettered, and when it is the first, ``prepare`` raises why (the queue backs off
    and shows the outage). ``decode_record`` then decodes one record, without I/O;
    it raises, as ``decode`` does, for bytes it cannot read (the record is dead-lettered).
    The plain formats are not record-aware: their reads have no prepare step, and decoding them
    costs one test a record more.

    >>> class Tagged:
    ...     name = "tagged"
    ...     async def prepare(self, records):
    ...         return len(records)
    ...     def decode_record(self, data, record):
    ...         return {"value": data.decode(), "offset": record.offset, **dict(record.headers)}
    ...     def decode(self, data):
    ...         return data.decode()
    ...     def encode(self, value):
    ...         return value.encode()
    >>> isinstance(Tagged(), RecordAwareFormat), isinstance(JsonRecords(), RecordAwareFormat)
    (True, False)
    >>> Tagged().decode_record(b"x", RecordInfo("t", 0, 7, [("h", b"1")]))
    {'value': 'x', 'offset': 7, 'h': b'1'}
    """

    async def prepare(self, records: Sequence[tuple[bytes | None, RecordInfo]]) -> int: ...

    def decode_record(self, data: bytes, record: RecordInfo) -> Any: ...


# One decoder for every JSON record: msgspec keeps no state between documents.
_msgspec_decode = msgspec.json.Decoder().decode


def first_decoder(record_format: RecordFormat) -> Callable[[bytes], Any]:
    """What a reader calls first on each record of ``record_format``: its ``decode_first``
    (a faster decoder whose refusals ``decode`` then reads again), only where the class that
    offers it also gives the ``decode`` in use; a subclass or an instance with a ``decode``
    of its own has every record go through that.

    >>> class Strict(JsonRecords):
    ...     def decode(self, data):
    ...         return {"strict": super().decode(data)}
    >>> first_decoder(JsonRecords()) is JsonRecords.decode_first, first_decoder(Strict())(b"1")
    (True, {'strict': 1})
    """
    decode = record_format.decode
    if "decode" not in getattr(record_format, "__dict__", ()):  # no decode of its own
        for cls in type(record_format).__mro__:
            if "decode" in vars(cls):
                if "decode_first" in vars(cls):
                    first: Callable[[bytes], Any] = record_format.decode_first  # type: ignore[attr-defined]
                    return first
                break
    return decode


class JsonRecords:
    """UTF-8 JSON, one document per record.

    >>> JsonRecords().decode(b' {"t": 1} '), JsonRecords().encode({"t": 1})
    ({'t': 1}, b'{"t":1}')
    >>> JsonRecords().decode(b'{"t": NaN}')  # what only Python's json reads, it reads
    {'t': nan}
    """

    name = "json"
    # What a reader may call first, a record at a time: msgspec's decoder itself, with no
    # Python call around it. What it refuses, decode has the last word on.
    decode_first = staticmethod(_msgspec_decode)

    def __init__(self) -> None:
        self._encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

    @staticmethod
    def decode(data: bytes) -> Any:
        # msgspec reads a record (parsing and building the dict) in about a tenth of
        # json.loads' time (bench/kafka.py sensors). What it refuses, Python's json has the
        # last word on: it reads NaN, Infinity, numbers past a double, lone surrogates and
        # UTF-16 or UTF-32 documents, and names what is wrong with the rest.
        try:
            return _msgspec_decode(data)
        except msgspec.MsgspecError:
            return json.loads(data)

    def encode(self, value: Any) -> bytes:
        return self._encoder.encode(value).encode()


class MsgpackRecords:
    """One msgpack object per record."""

    name = "msgpack"

    @staticmethod
    def decode(data: bytes) -> Any:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)

    @staticmethod
    def encode(value: Any) -> bytes:
        encoded: bytes = msgpack.packb(value, use_bin_type=True)
        return encoded


class TextRecords:
    """A UTF-8 string per record."""

    name = "text"

    @staticmethod
    def decode(data: bytes) -> str:
        return data.decode()

    @staticmethod
    def encode(value: Any) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"a text record's value is a str, not {type(value).__name__}")
        return value.encode()


class BytesRecords:
    """The record's value, untouched."""

    name = "bytes"

    @staticmethod
    def decode(data: bytes) -> bytes:
        return data

    @staticmethod
    def encode(value: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"a bytes record's value is bytes, not {type(value).__name__}")
        return bytes(value)


_BUILT_IN: dict[str, type] = {
    "json": JsonRecords,
    "msgpack": MsgpackRecords,
    "text": TextRecords,
    "bytes": BytesRecords,
}

HEADRACE = "headrace"


def record_format(records: str | RecordFormat) -> RecordFormat | None:
    """The format named by ``records`` (``None`` for ``"headrace"``: batch containers)."""
    if records == HEADRACE:
        return None
    if isinstance(records, str):
        made = _BUILT_IN.get(records)
        if made is None:
            names = ", ".join(repr(n) for n in (HEADRACE, *_BUILT_IN))
            raise ConfigurationError(f"records is one of {names} or a RecordFormat object, not {records!r}")
        return made()  # type: ignore[no-any-return]
    if not isinstance(records, RecordFormat):
        raise ConfigurationError(
            f"records is a format name or an object with name, decode(bytes) and "
            f"encode(value), not {type(records).__name__}"
        )
    return records
