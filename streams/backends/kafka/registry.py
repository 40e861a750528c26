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

Writing: a format given a ``value_schema`` registers it under the topic's subject
(``<topic>-value``, Confluent's TopicNameStrategy, unless ``subject`` names another) before the
first record is written (:meth:`RegistryFormat.register`), and then writes each value as the
wire format with the id the registry gave; a schema the registry refuses raises one
:class:`SchemaRegistryError` naming the subject, and nothing is written.

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
import os
import ssl
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from streams.core.errors import ConfigurationError, HeadraceError
from streams.core.records import RecordInfo
from streams.core.secret import Secret, secret

_HEADER = struct.Struct(">bI")  # the magic byte and the schema id


class SchemaRegistryError(HeadraceError):
    """The registry did not give a schema, or did not take one: away, refusing, or not knowing
    the id (yet). ``status``: the HTTP status it answered (None: it could not be reached)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        """Whether asking again later may succeed: the registry away, or failing (5xx)."""
        return self.status is None or self.status >= 500


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
        return self._call(urllib.request.Request(self.url.rstrip("/") + path, headers=self._headers()))

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """``POST url/path`` of ``body`` as JSON, the answer as JSON (blocking: in a worker thread)."""
        headers = {**self._headers(), "Content-Type": "application/vnd.schemaregistry.v1+json"}
        data = json.dumps(body).encode()
        return self._call(urllib.request.Request(self.url.rstrip("/") + path, data, headers, method="POST"))

    def _call(self, request: urllib.request.Request) -> Any:
        context = ssl.create_default_context(cafile=self.ssl_cafile) if self.url.startswith("https") else None
        what = f"{request.get_method()} {request.selector}"
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
                f"schema registry {self.url} answered {exc.code} to {what}{': ' + said if said else ''}{hint}",
                status=exc.code,
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
    """What the three formats share: the wire format's header, schemas fetched by id, and
    writing with ``value_schema``, registered under ``subject`` (by default the topic's
    ``<topic>-value``: Confluent's TopicNameStrategy)."""

    name = "registry"

    def __init__(
        self,
        registry: SchemaRegistry | Mapping[str, Any] | str,
        value_schema: Any = None,
        subject: str | None = None,
    ) -> None:
        self.registry = SchemaRegistry.of(registry)
        self._schemas = _Schemas(self.registry, self._parse, self._query)
        self.value_schema = value_schema
        self.subject = subject
        self._writer: tuple[str, Any, str | None] | None = None  # schema text, what writing uses, its type
        if value_schema is not None:
            self._writer = self._writer_schema(value_schema)
        self._written: dict[str, int] = {}  # topic -> the id its subject gave value_schema

    _query = ""

    def _parse(self, answer: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _read(self, schema: Any, data: bytes) -> Any:
        raise NotImplementedError

    def _writer_schema(self, value_schema: Any) -> tuple[str, Any, str | None]:
        raise NotImplementedError

    def _write(self, writer: Any, value: Any) -> bytes:
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

    def subject_of(self, topic: str) -> str:
        """The subject the schema of ``topic``'s records is registered under.

        >>> JsonSchemaRecords("http://r").subject_of("readings"), JsonSchemaRecords("http://r", subject="s").subject_of("t")
        ('readings-value', 's')
        """
        return self.subject or f"{topic}-value"

    async def register(self, topic: str) -> int:
        """Register ``value_schema`` under ``topic``'s subject (the registry gives the id it
        has when the subject holds it already), in a worker thread; its id. A schema the
        registry refuses (incompatible with the subject's versions, or invalid) raises
        :class:`SchemaRegistryError` naming the subject, and nothing is written."""
        if self._writer is None:
            raise ConfigurationError(f"records={self.name!r} writes records only with a value_schema")
        text, _, schema_type = self._writer
        subject = self.subject_of(topic)
        body = {"schema": text} if schema_type is None else {"schema": text, "schemaType": schema_type}
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        try:
            answer = await anyio.to_thread.run_sync(self.registry.post, path, body)
        except SchemaRegistryError as exc:
            if exc.status not in (409, 422):
                raise
            fix = (
                "make value_schema compatible with the subject's latest version (a new field needs a "
                "default), or change the subject's compatibility level in the registry"
                if exc.status == 409
                else "check value_schema"
            )
            raise SchemaRegistryError(
                f"the schema registry refuses value_schema for subject {subject!r}: {exc}; {fix}; nothing was written",
                status=exc.status,
            ) from None
        self._written[topic] = schema_id = int(answer["id"])
        return schema_id

    def encode_to(self, topic: str, value: Any) -> bytes:
        """``value`` as a record of ``topic``: the wire format's header with the id
        :meth:`register` got, then the payload written with ``value_schema``."""
        schema_id = self._written.get(topic)
        if schema_id is None or self._writer is None:
            why = "is not registered yet" if self._writer is not None else "is not set"
            raise TypeError(
                f"records={self.name!r} writes to {topic!r} with a value_schema registered under subject "
                f"{self.subject_of(topic)!r}; value_schema {why}"
            )
        return _HEADER.pack(0, schema_id) + self._write(self._writer[1], value)

    def encode(self, value: Any) -> bytes:
        """``value`` as a record of the (first) topic registered."""
        topic = next(iter(self._written), "")
        return self.encode_to(topic, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.registry.url!r})"


class AvroRecords(RegistryFormat):
    """Avro records, decoded with the schema they were written with (fastavro)."""

    name = "avro"

    def __init__(
        self, registry: SchemaRegistry | Mapping[str, Any] | str, value_schema: Any = None, subject: str | None = None
    ) -> None:
        import fastavro  # the schemas extra: only a worker of such a topic needs it
        import fastavro.validation

        self._reader = fastavro.schemaless_reader
        self._writer_of = fastavro.schemaless_writer
        self._validate = fastavro.validation.validate
        self._invalid = fastavro.validation.ValidationError
        self._parse_schema = fastavro.parse_schema
        super().__init__(registry, value_schema, subject)

    def _parse(self, answer: dict[str, Any]) -> Any:
        if answer.get("references"):
            raise ValueError("schemas with references are not supported")
        return self._parse_schema(json.loads(answer["schema"]))

    def _read(self, schema: Any, data: bytes) -> Any:
        return self._reader(io.BytesIO(memoryview(data)[_HEADER.size :]), schema, None)

    def _writer_schema(self, value_schema: Any) -> tuple[str, Any, str | None]:
        schema = schema_document(value_schema)
        try:
            return json.dumps(schema), self._parse_schema(schema), None
        except Exception as exc:  # fastavro's own errors: any type
            raise ConfigurationError(f"value_schema is not an Avro schema: {exc}") from None

    def _write(self, writer: Any, value: Any) -> bytes:
        try:
            self._validate(value, writer, raise_errors=True)  # names the field, where writing would not
        except self._invalid as exc:
            raise ValueError("; ".join(exc.errors)) from None
        out = io.BytesIO()
        self._writer_of(out, writer, value)
        return out.getvalue()


class JsonSchemaRecords(RegistryFormat):
    """JSON documents written against a JSON Schema; the document is the value."""

    name = "json_schema"
    _decode_json = staticmethod(msgspec.json.Decoder().decode)
    _encode_json = staticmethod(msgspec.json.Encoder().encode)

    def _parse(self, answer: dict[str, Any]) -> Any:
        return json.loads(answer["schema"])

    def _read(self, schema: Any, data: bytes) -> Any:
        return self._decode_json(memoryview(data)[_HEADER.size :])

    def _writer_schema(self, value_schema: Any) -> tuple[str, Any, str | None]:
        from jsonschema import exceptions, validators

        schema = schema_document(value_schema)
        try:
            validator = validators.validator_for(schema)
            validator.check_schema(schema)
        except exceptions.SchemaError as exc:
            raise ConfigurationError(f"value_schema is not a JSON Schema: {exc.message}") from None
        return json.dumps(schema), validator(schema), "JSON"

    def _write(self, writer: Any, value: Any) -> bytes:
        error = next(iter(writer.iter_errors(value)), None)  # as Confluent's serializer, it validates
        if error is not None:
            at = "/".join(map(str, error.absolute_path))
            raise ValueError(f"the value does not match value_schema{' at ' + at if at else ''}: {error.message}")
        encoded: bytes = self._encode_json(value)
        return encoded


class ProtobufRecords(RegistryFormat):
    """Protobuf messages, each read as the message type its indexes name in its schema file."""

    name = "protobuf"
    _query = "?format=serialized"  # the schema file as a serialized FileDescriptorProto

    def __init__(
        self, registry: SchemaRegistry | Mapping[str, Any] | str, value_schema: Any = None, subject: str | None = None
    ) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

        self._file_proto = descriptor_pb2.FileDescriptorProto
        self._pool = descriptor_pool.DescriptorPool()
        self._message_class = message_factory.GetMessageClass
        self._parse_dict = json_format.ParseDict
        super().__init__(registry, value_schema, subject)

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

    def _writer_schema(self, value_schema: Any) -> tuple[str, Any, str | None]:
        descriptor = getattr(value_schema, "DESCRIPTOR", None)
        if not isinstance(value_schema, type) or descriptor is None or not hasattr(descriptor, "file"):
            raise ConfigurationError(
                f"protobuf's value_schema is a generated message class (Python), not {type(value_schema).__name__}"
            )
        if descriptor.file.dependencies:
            raise ConfigurationError(
                "value_schema's .proto file imports others: schemas with references are not supported"
            )
        text = base64.b64encode(descriptor.file.serialized_pb).decode()
        return text, (value_schema, _zigzag_indexes(message_indexes_of(descriptor))), "PROTOBUF"

    def _write(self, writer: Any, value: Any) -> bytes:
        message_class, indexes = writer
        if not isinstance(value, message_class):
            value = self._parse_dict(value, message_class())  # a dict of its fields, as reading gives
        return bytes(indexes) + bytes(value.SerializeToString())


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


def message_indexes_of(descriptor: Any) -> list[int]:
    """Where a message type stands in its file: the index of its top-level type, then of
    each nested one down to it (what Confluent's wire format writes before the payload)."""
    path = []
    while descriptor.containing_type is not None:
        parent = descriptor.containing_type
        path.append(list(parent.nested_types).index(descriptor))
        descriptor = parent
    path.append(list(descriptor.file.message_types_by_name.values()).index(descriptor))
    return path[::-1]


def _zigzag_indexes(indexes: list[int]) -> bytes:
    """Message indexes in the wire format: a lone 0 for the first type, else a count and each
    index, as zig-zag varints.

    >>> _zigzag_indexes([0]), _zigzag_indexes([1, 2])
    (b'\\x00', b'\\x04\\x02\\x04')
    """
    if indexes == [0]:
        return b"\x00"
    out = bytearray()
    for n in (len(indexes), *indexes):
        n = (n << 1) ^ (n >> 63)
        while n > 0x7F:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def schema_document(value_schema: Any) -> Any:
    """A schema given as a document (a dict), JSON text, or the path of a file of it.

    >>> schema_document('{"type": "string"}'), schema_document({"type": "int"})
    ({'type': 'string'}, {'type': 'int'})
    """
    if isinstance(value_schema, Mapping):
        return dict(value_schema)
    if isinstance(value_schema, (str, os.PathLike)):
        text = str(value_schema)
        if not text.lstrip().startswith(("{", "[", '"')):
            try:
                text = Path(text).expanduser().read_text()
            except OSError as exc:
                raise ConfigurationError(
                    f"value_schema {str(value_schema)!r} cannot be read: {exc.strerror or exc}"
                ) from None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"value_schema is not JSON: {exc}") from None
    raise ConfigurationError(
        f"value_schema is a schema (a dict, JSON text or a file's path), not {type(value_schema).__name__}"
    )


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
