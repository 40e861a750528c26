"""Topics with schemas: Avro, JSON Schema and Protobuf records in Confluent's wire format,
their schemas in a schema registry.

A record of such a topic is a magic byte ``0``, the schema's id (4 bytes, big-endian), then
the payload (for Protobuf, first the indexes of the message type in its schema file). The
formats here are :class:`~streams.core.records.RecordAwareFormat`\\ s: before a read's records
are decoded, ``prepare`` fetches the schemas of the ids the read holds that are not cached yet,
once per id, over HTTP in a worker thread (the event loop never waits on the registry), and
decoding then does no I/O. A registry that is away, or an id it does not know yet, fails
``prepare``: the receiver reads the records again after a back-off and shows the outage,
and no record is dead-lettered for it. A record that is not in the wire format, or whose
payload does not decode with its schema, is dead-lettered with its partition and offset.

Values come out as the plain Python a consumer gets from the other formats: Avro records and
Protobuf messages as dicts (Protobuf: every field, with its default when unset; enums as
numbers; bytes as bytes), JSON as parsed.

>>> registry = SchemaRegistry("http://127.0.0.1:8081", username="svc", password="s3cret")
>>> registry
SchemaRegistry(url='http://127.0.0.1:8081', username='svc', password=Secret('***'), token=None, ssl_cafile=None, timeout=10.0)
>>> wire_header(b"\\x00\\x00\\x00\\x01\\x07payload")
263
"""

from __future__ import annotations

import base64
import io
import json
import ssl
import struct
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from streams.core.errors import ConfigurationError, HeadraceError
from streams.core.records import RecordInfo
from streams.core.secret import Secret, secret

_HEADER = struct.Struct(">bI")  # the magic byte and the schema id


class SchemaRegistryError(HeadraceError):
    """The registry did not give a schema: away, refusing, or not knowing the id (yet)."""


def wire_header(data: bytes) -> int:
    """The schema id of a record in Confluent's wire format; ``ValueError`` for one that is not."""
    if len(data) < _HEADER.size or data[0] != 0:
        raise ValueError("not in Confluent's wire format (no magic byte 0 and schema id)")
    return int(_HEADER.unpack_from(data)[1])


@dataclass(frozen=True)
class SchemaRegistry:
    """Where a schema registry is and how to reach it: ``url``, and basic auth (``username``
    and ``password``) or a bearer ``token``; ``ssl_cafile`` for a registry behind TLS with a
    CA of its own. Passwords and tokens are :class:`~streams.core.secret.Secret`\\ s."""

    url: str
    username: str | None = None
    password: Secret | None = None
    token: Secret | None = None
    ssl_cafile: str | None = None
    timeout: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "password", secret(self.password))
        object.__setattr__(self, "token", secret(self.token))
        if not self.url.startswith(("http://", "https://")):
            raise ConfigurationError(f"schema_registry url must start with http:// or https://, not {self.url!r}")
        if self.password is not None and self.username is None:
            raise ConfigurationError("schema_registry has a password but no username")

    @classmethod
    def of(cls, value: SchemaRegistry | Mapping[str, Any] | str) -> SchemaRegistry:
        """A registry from its settings (a mapping of the fields, or the URL alone)."""
        if isinstance(value, SchemaRegistry):
            return value
        if isinstance(value, str):
            return cls(value)
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigurationError(
                f"unknown schema_registry setting {unknown[0]!r}; the settings are "
                f"{', '.join(cls.__dataclass_fields__)}"
            )
        return cls(**value)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token.reveal()}"
        elif self.username is not None:
            pair = f"{self.username}:{self.password.reveal() if self.password else ''}"
            headers["Authorization"] = f"Basic {base64.b64encode(pair.encode()).decode()}"
        return headers

    def get(self, path: str) -> Any:
        """``GET url/path`` as JSON (blocking: called in a worker thread)."""
        request = urllib.request.Request(self.url.rstrip("/") + path, headers=self._headers())
        context = ssl.create_default_context(cafile=self.ssl_cafile) if self.url.startswith("https") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as exc:
            try:
                said = json.load(exc).get("message", "")
            except ValueError:
                said = ""
            hint = " (check schema_registry username and password, or token)" if exc.code in (401, 403) else ""
            raise SchemaRegistryError(
                f"schema registry {self.url} answered {exc.code} to GET {path}{': ' + said if said else ''}{hint}"
            ) from None
        except (OSError, ValueError) as exc:
            raise SchemaRegistryError(f"schema registry {self.url} cannot be reached: {exc}") from None


@dataclass
class _Schemas:
    """Parsed schemas by id, each fetched once (in a worker thread: the loop never waits)."""

    registry: SchemaRegistry
    parse: Callable[[dict[str, Any]], Any]  # the registry's answer -> what decoding uses
    query: str = ""
    parsed: dict[int, Any] = field(default_factory=dict)

    async def fetch_one(self, schema_id: int) -> None:
        answer = await anyio.to_thread.run_sync(self.registry.get, f"/schemas/ids/{schema_id}{self.query}")
        try:
            self.parsed[schema_id] = self.parse(answer)
        except Exception as exc:  # the schema library's own errors: any type
            raise SchemaRegistryError(f"schema {schema_id} from {self.registry.url} cannot be used: {exc}") from exc


class RegistryFormat:
    """What the three formats share: the wire format's header, and schemas fetched by id."""

    name = "registry"

    def __init__(self, registry: SchemaRegistry | Mapping[str, Any] | str) -> None:
        self.registry = SchemaRegistry.of(registry)
        self._schemas = _Schemas(self.registry, self._parse, self._query)

    _query = ""

    def _parse(self, answer: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _read(self, schema: Any, data: bytes) -> Any:
        raise NotImplementedError

    async def prepare(self, records: Sequence[tuple[bytes | None, RecordInfo]]) -> int:
        """Fetch the schemas of these records not cached yet, in order; how many records, from
        the first, have theirs (a record not in the wire format has none to fetch: its decode
        dead-letters it). Raises why when the first record's cannot be had."""
        for ready, (data, _) in enumerate(records):
            if data is None or len(data) < _HEADER.size or data[0] != 0:
                continue
            schema_id = int(_HEADER.unpack_from(data)[1])
            if schema_id in self._schemas.parsed:
                continue
            try:
                await self._schemas.fetch_one(schema_id)
            except SchemaRegistryError:
                if ready == 0:
                    raise
                return ready
        return len(records)

    def decode_record(self, data: bytes, record: RecordInfo) -> Any:
        return self.decode(data)

    def decode(self, data: bytes) -> Any:
        schema_id = wire_header(data)
        schema = self._schemas.parsed.get(schema_id)
        if schema is None:  # prepare fetched every id its read holds: only a decode without it
            raise SchemaRegistryError(f"schema {schema_id} is not fetched yet")
        return self._read(schema, data)

    def encode(self, value: Any) -> bytes:
        raise TypeError(f"headrace reads {self.name} records; it does not write them")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.registry.url!r})"


class AvroRecords(RegistryFormat):
    """Avro records, decoded with the schema they were written with (fastavro)."""

    name = "avro"

    def __init__(self, registry: SchemaRegistry | Mapping[str, Any] | str) -> None:
        import fastavro  # the schemas extra: only a worker of such a topic needs it

        self._reader = fastavro.schemaless_reader
        self._parse_schema = fastavro.parse_schema
        super().__init__(registry)

    def _parse(self, answer: dict[str, Any]) -> Any:
        if answer.get("references"):
            raise ValueError("schemas with references are not supported")
        return self._parse_schema(json.loads(answer["schema"]))

    def _read(self, schema: Any, data: bytes) -> Any:
        return self._reader(io.BytesIO(memoryview(data)[_HEADER.size :]), schema, None)


class JsonSchemaRecords(RegistryFormat):
    """JSON documents written against a JSON Schema; the document is the value."""

    name = "json_schema"
    _decode_json = staticmethod(msgspec.json.Decoder().decode)

    def _parse(self, answer: dict[str, Any]) -> Any:
        return json.loads(answer["schema"])

    def _read(self, schema: Any, data: bytes) -> Any:
        return self._decode_json(memoryview(data)[_HEADER.size :])


class ProtobufRecords(RegistryFormat):
    """Protobuf messages, each read as the message type its indexes name in its schema file."""

    name = "protobuf"
    _query = "?format=serialized"  # the schema file as a serialized FileDescriptorProto

    def __init__(self, registry: SchemaRegistry | Mapping[str, Any] | str) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        self._file_proto = descriptor_pb2.FileDescriptorProto
        self._pool = descriptor_pool.DescriptorPool()
        self._message_class = message_factory.GetMessageClass
        super().__init__(registry)

    def _parse(self, answer: dict[str, Any]) -> Any:
        if answer.get("references"):
            raise ValueError("schemas with references (imports) are not supported")
        proto = self._file_proto.FromString(base64.b64decode(answer["schema"]))
        try:
            file = self._pool.FindFileByName(proto.name)
        except KeyError:
            file = self._pool.Add(proto)
            file = self._pool.FindFileByName(proto.name)
        return file

    def _read(self, schema: Any, data: bytes) -> Any:
        indexes, at = _message_indexes(data, _HEADER.size)
        types = schema.message_types_by_name
        descriptor = list(types.values())[indexes[0]]
        for i in indexes[1:]:
            descriptor = descriptor.nested_types[i]
        message = self._message_class(descriptor).FromString(bytes(memoryview(data)[at:]))
        return message_dict(message)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A zig-zag varint at ``at``: its value and where the next begins."""
    shift = raw = 0
    while True:
        if at >= len(data):
            raise ValueError("the message indexes run past the record")
        byte = data[at]
        raw |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def _message_indexes(data: bytes, at: int) -> tuple[list[int], int]:
    """Confluent's message indexes (a count, then the indexes; a lone 0: the first type)."""
    count, at = _varint(data, at)
    if count == 0:
        return [0], at
    if not 0 < count <= 64:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, at = _varint(data, at)
        indexes.append(index)
    return indexes, at


def message_dict(message: Any) -> dict[str, Any]:
    """A Protobuf message as a dict of every field (a default when unset; ints stay ints)."""
    out: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            out[f.name] = {k: message_dict(v) if hasattr(v, "DESCRIPTOR") else v for k, v in value.items()}
        elif f.is_repeated:
            out[f.name] = [message_dict(v) if f.message_type is not None else v for v in value]
        elif f.message_type is not None:
            out[f.name] = message_dict(value) if message.HasField(f.name) else None
        else:
            out[f.name] = value
    return out


REGISTRY_FORMATS: dict[str, type[RegistryFormat]] = {
    "avro": AvroRecords,
    "json_schema": JsonSchemaRecords,
    "protobuf": ProtobufRecords,
}
