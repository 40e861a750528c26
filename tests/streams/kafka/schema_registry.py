"""A small schema registry for the tests: the registry's REST answers to ``GET /schemas/ids/{id}``
(what headrace's lookups ask) and ``POST /subjects/{subject}/versions`` (what headrace's writers
register), served over HTTP on the loopback from confluent-kafka's own in-memory registry
client, which the tests' serializers and deserializers use. No registry server can be installed
here (Confluent's is a Java service outside the package registries this machine reaches), so
this stands in for those two endpoints, answering as it does: the schema, its type (none for
Avro) and references; the id of a registered schema (the same id for a schema the subject holds
already); 404 with error code 40403 for an unknown id; 409 for an Avro schema incompatible with
the subject's latest version, under the registry's default BACKWARD rule as far as records go
(a field the new version adds needs a default, a field both have keeps its type); 401 without
the right basic-auth credentials; 503 while ``down``."""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError


class SchemaRegistryServer:
    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.client = MockSchemaRegistryClient({"url": "mock://tests"})
        self.credentials = credentials
        self.down = False
        self.asked: Counter[int] = Counter()  # GETs per schema id
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                registry._answer(self)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                registry._register(self)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SchemaRegistryServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _refused(self, request: BaseHTTPRequestHandler) -> bool:
        """Whether the registry is down or the credentials are wrong (answered so)."""
        if self.down:
            self._send(request, 503, {"error_code": 50301, "message": "the registry is down"})
            return True
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if request.headers.get("Authorization") != expected:
                self._send(request, 401, {"error_code": 40101, "message": "Unauthorized"})
                return True
        return False

    def _register(self, request: BaseHTTPRequestHandler) -> None:
        body = json.loads(request.rfile.read(int(request.headers["Content-Length"])))
        if self._refused(request):
            return None
        parts = request.path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
            return self._send(request, 404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        subject = unquote(parts[1])
        schema = Schema(body["schema"], body.get("schemaType", "AVRO"))
        try:
            latest = self.client.get_latest_version(subject)
        except SchemaRegistryError:
            latest = None
        if (
            latest is not None
            and schema.schema_type == "AVRO"
            and not _backward(latest.schema.schema_str, schema.schema_str)
        ):
            return self._send(
                request,
                409,
                {"error_code": 409, "message": "Schema being registered is incompatible with an earlier schema"},
            )
        return self._send(request, 200, {"id": self.client.register_schema(subject, schema)})

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?")[0]
        if self._refused(request):
            return None
        parts = path.strip("/").split("/")
        if len(parts) != 3 or parts[:2] != ["schemas", "ids"] or not parts[2].isdigit():
            return self._send(request, 404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        schema_id = int(parts[2])
        self.asked[schema_id] += 1
        try:
            schema = self.client.get_schema(schema_id)
        except SchemaRegistryError:
            return self._send(request, 404, {"error_code": 40403, "message": f"Schema {schema_id} not found"})
        answer: dict[str, Any] = {"schema": schema.schema_str}
        if schema.schema_type != "AVRO":
            answer["schemaType"] = schema.schema_type
        if schema.references:
            answer["references"] = [
                {"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references
            ]
        return self._send(request, 200, answer)

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


def _backward(old: str, new: str) -> bool:
    """Whether Avro record schema ``new`` reads what ``old`` wrote (BACKWARD, for records)."""
    before, after = json.loads(old), json.loads(new)
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return before == after
    types = {f["name"]: f["type"] for f in before.get("fields", [])}
    return all(types[f["name"]] == f["type"] if f["name"] in types else "default" in f for f in after.get("fields", []))
