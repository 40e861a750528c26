"""A small schema registry for the tests: the registry's REST answer to ``GET /schemas/ids/{id}``
(what headrace's lookups ask), served over HTTP on the loopback from the schemas registered in
confluent-kafka's own in-memory registry client, which the serializers of the tests use. No
registry server can be installed here (Confluent's is a Java service outside the package
registries this machine reaches), so this stands in for its one read endpoint, answering as
it does: the schema, its type (none for Avro) and references; 404 with error code 40403 for an
unknown id; 401 without the right basic-auth credentials; 503 while ``down``."""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

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

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?")[0]
        if self.down:
            return self._send(request, 503, {"error_code": 50301, "message": "the registry is down"})
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if request.headers.get("Authorization") != expected:
                return self._send(request, 401, {"error_code": 40101, "message": "Unauthorized"})
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
