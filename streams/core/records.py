"""Record formats: how the value of one foreign queue record becomes one event, and back
(Orleans' queue data adapter, for records headrace did not write).

A topic other programs write holds one event per record in some serialization; a
:class:`RecordFormat` decodes a record's value into the event's value and encodes a value
into a record's value. The built-in ones are named by a string: ``"json"``, ``"msgpack"``,
``"text"`` (UTF-8) and ``"bytes"`` (the value as it is); ``"headrace"`` means headrace's own
batch containers (no record format). Anything else (Avro, Protobuf) is an object with the
two methods:

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
import json.scanner
from typing import Any, Protocol, runtime_checkable

import msgpack

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


class JsonRecords:
    """UTF-8 JSON, one document per record.

    >>> JsonRecords().decode(b' {"t": 1} '), JsonRecords().encode({"t": 1})
    ({'t': 1}, b'{"t":1}')
    """

    name = "json"

    def __init__(self) -> None:
        self._decoder = json.JSONDecoder()
        # typeshed types make_scanner as the C scanner class, whose argument is the decoder
        self._scan = json.scanner.make_scanner(self._decoder)  # type: ignore[arg-type]
        self._encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

    def decode(self, data: bytes) -> Any:
        # The decoder's scanner, called directly, reads a document that fills the record
        # (the usual case) in 40 % of json.loads' time, which also sniffs the encoding and
        # matches whitespace around it; anything else takes the full path, which reads
        # padded documents and names what is wrong with the rest.
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return json.loads(data)  # UTF-16 or UTF-32, which json detects, or an error
        try:
            value, end = self._scan(text, 0)
        except StopIteration:
            return self._decoder.decode(text)
        if end != len(text):
            return self._decoder.decode(text)
        return value

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
