"""The status page: one HTTP application for a worker's endpoint and ``headrace status --serve``.

Paths, all read-only (``GET`` and ``HEAD``; any other method answers 405):

- ``/``: the page, one static HTML file with its CSS and script inline (package data,
  ``status_page.html``). It fetches nothing from elsewhere; it polls ``/status.json`` every
  two seconds and draws what it reads.
- ``/status.json``: the JSON ``headrace status --json`` prints, plus a ``page`` object (the
  latest dead letters, ``--advise``'s advice, the serving worker's history); 503 with
  ``{"error": ...}`` when the status cannot be read now.
- ``/metrics``: Prometheus' metrics (a worker's endpoint only); ``/livez`` and ``/readyz``:
  its probes (:mod:`streams.runtime.health`).
- anything else: 404.

>>> app = page_app(lambda: {"store": "demo"})
>>> sent = []
>>> body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/status.json"}, lambda s, h: sent.append(s)))
>>> sent, body
(['200 OK'], b'{"store": "demo"}')
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from functools import cache
from importlib.resources import files

from streams.core.errors import HeadraceError
from streams.runtime.health import LIVE_PATH, READY_PATH, WorkerHealth

log = logging.getLogger("headrace.page")

PAGE_PATH = "/"
STATUS_PATH = "/status.json"
METRICS_PATH = "/metrics"
METHODS = ("GET", "HEAD")  # read-only: nothing served changes the pipeline

StartResponse = Callable[..., object]
WsgiApp = Callable[[dict[str, object], StartResponse], Iterable[bytes]]
StatusDocument = Callable[[], dict[str, object]]  # called on the HTTP server's threads

# The page runs its own inline script and style and talks to its own origin only.
_PAGE_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]


@cache
def page_html() -> bytes:
    """The page's HTML, as shipped with the package."""
    return files("streams.runtime").joinpath("status_page.html").read_bytes()


def page_app(
    status: StatusDocument | None, metrics: WsgiApp | None = None, health: WorkerHealth | None = None
) -> WsgiApp:
    """The application serving the page and ``status()`` as JSON at :data:`STATUS_PATH`
    (both 404 without ``status``), and a worker's ``metrics`` application and ``health``
    probes."""

    def app(environ: dict[str, object], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO") or "/"
        if method not in METHODS:
            return _answer(
                start_response,
                "405 Method Not Allowed",
                b"read-only: GET or HEAD\n",
                "text/plain",
                method,
                [("Allow", ", ".join(METHODS))],
            )
        if path == METRICS_PATH and metrics is not None:
            return metrics(environ, start_response)
        if path in (LIVE_PATH, READY_PATH) and health is not None:
            ok, text = health.live() if path == LIVE_PATH else health.ready()
            code = "200 OK" if ok else "503 Service Unavailable"
            return _answer(start_response, code, (text + "\n").encode(), "text/plain", method)
        if path == PAGE_PATH and status is not None:
            return _answer(start_response, "200 OK", page_html(), "text/html", method, _PAGE_HEADERS)
        if path == STATUS_PATH and status is not None:
            code, document = _status(status)
            body = json.dumps(json_safe(document)).encode()
            return _answer(start_response, code, body, "application/json", method, [("Cache-Control", "no-store")])
        return _answer(start_response, "404 Not Found", f"no page at {path}\n".encode(), "text/plain", method)

    return app


def json_safe(value: object) -> object:
    """``value`` with every NaN or infinite number as None: JSON has none of them.

    >>> json_safe({"p99": float("nan"), "marks": [1.5, float("-inf")]})
    {'p99': None, 'marks': [1.5, None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _status(status: StatusDocument) -> tuple[str, dict[str, object]]:
    try:
        return "200 OK", status()
    except HeadraceError as exc:  # the store or cluster cannot be read now: the page says so
        return "503 Service Unavailable", {"error": str(exc)}
    except Exception:
        log.exception("reading the status for the status page failed")
        return "500 Internal Server Error", {"error": "reading the status failed (the log has the traceback)"}


def _answer(
    start_response: StartResponse,
    code: str,
    body: bytes,
    kind: str,
    method: object,
    headers: list[tuple[str, str]] | None = None,
) -> Iterable[bytes]:
    start_response(
        code,
        [("Content-Type", f"{kind}; charset=utf-8"), ("Content-Length", str(len(body))), *(headers or [])],
    )
    return [] if method == "HEAD" else [body]
