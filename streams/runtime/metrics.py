"""Prometheus metrics of a worker, read from its live state at scrape time.

ASA's job metrics (early, late, out-of-order and dead-lettered events, watermark delay per
partition) and Orleans' stream metrics (agents running, cache size and pressure, delivery
failures, queue read latency), plus what goes in and out of each queue. Nothing is counted
twice: a scrape takes a :func:`~streams.runtime.snapshot.take_snapshot` on the worker's
event loop and turns it into metric families, so the runtime's hot path carries no metrics
code. Names and meanings: ``docs/observability.md``.

>>> import anyio, urllib.request
>>> from streams import StreamProvider
>>> async def main():
...     async with StreamProvider.memory(queues=2) as provider:
...         with serve_metrics(provider, port=0) as server:  # 0: any free port
...             url = f"http://127.0.0.1:{server.port}/metrics"
...             body = await anyio.to_thread.run_sync(lambda: urllib.request.urlopen(url).read())
...     return b"headrace_agents_running" in body
>>> anyio.run(main)
True
"""

from __future__ import annotations

import logging
import math
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import anyio.from_thread
import anyio.lowlevel
from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from agents.counters import HistogramSnapshot
from streams.core.errors import ConfigurationError, HeadraceError
from streams.eventtime.lateness import SHOWN
from streams.runtime.health import WorkerHealth
from streams.runtime.page import StatusDocument, page_app
from streams.runtime.provider import StreamProvider
from streams.runtime.snapshot import WorkerSnapshot, dead_letter_counts, take_snapshot

log = logging.getLogger("headrace.metrics")

_ACTIONS = ("adjusted", "dropped", "accepted")


class HeadraceCollector(Collector):
    """A prometheus-client collector of one provider's worker.

    Make it on the provider's event loop; Prometheus calls :meth:`collect` from its HTTP
    server's thread, and the collector reads the worker's state on the loop through it.
    """

    def __init__(self, provider: StreamProvider) -> None:
        self.provider = provider
        self._token = anyio.lowlevel.current_token()  # raises outside an event loop
        self._loop_thread = threading.get_ident()

    def describe(self) -> list[Metric]:
        return []  # registering must not read the worker

    def collect(self) -> Iterator[Metric]:
        if threading.get_ident() == self._loop_thread:
            raise HeadraceError(
                "HeadraceCollector.collect() reads the worker through its event loop: call it "
                "from another thread (the metrics HTTP server does)"
            )
        try:
            snapshot, letters = anyio.from_thread.run(self._read, token=self._token)
        except Exception as exc:  # the loop has ended: the worker has nothing to report
            log.debug("metrics scrape with no running worker: %r", exc)
            return
        yield from metric_families(snapshot, letters)

    async def _read(self) -> tuple[WorkerSnapshot, dict[str, int]]:
        return take_snapshot(self.provider), await dead_letter_counts(self.provider.dead_letters)


# Every metric: its family type and help text (docs/observability.md says more).
METRICS: dict[str, tuple[type, str]] = {
    "headrace_agents_running": (GaugeMetricFamily, "Pulling agents running on this worker (one per queue it owns)"),
    "headrace_queue_records_read": (
        CounterMetricFamily,
        "Records (producer batches) read from the queue: what came in",
    ),
    "headrace_queue_read_failures": (CounterMetricFamily, "Failed reads of the queue (each retried with back-off)"),
    "headrace_queue_failed": (
        GaugeMetricFamily,
        "1 once the queue cannot be read on (its agent stopped; the log and `headrace status` say why)",
    ),
    "headrace_queue_read_seconds": (HistogramMetricFamily, "Time of each read of the queue, retries included"),
    "headrace_cache_pressure_skips": (CounterMetricFamily, "Reads skipped because the cache was full (backpressure)"),
    "headrace_cache_batches": (GaugeMetricFamily, "Batches in the queue cache"),
    "headrace_cache_max_batches": (GaugeMetricFamily, "Batches the queue cache holds at most"),
    "headrace_cache_under_pressure": (GaugeMetricFamily, "1 while the cache is full and reads are held back"),
    "headrace_streams_active": (GaugeMetricFamily, "Streams with an activation on this queue"),
    "headrace_consumers": (GaugeMetricFamily, "Consumers (subscriptions and activations) reading from the cache"),
    "headrace_batches_delivered": (CounterMetricFamily, "Batches delivered to consumers: what went out"),
    "headrace_delivery_failures": (CounterMetricFamily, "Deliveries that raised or timed out (dead-lettered)"),
    "headrace_subscriptions_faulted": (GaugeMetricFamily, "Subscriptions faulted by a failure (fault_on_error)"),
    "headrace_eventtime_events": (CounterMetricFamily, "Events into event-time consumers"),
    "headrace_eventtime_early_events": (CounterMetricFamily, "Events dropped for arriving too early (early_arrival)"),
    "headrace_eventtime_late_events": (CounterMetricFamily, "Events later than late_arrival, by action"),
    "headrace_eventtime_out_of_order_events": (CounterMetricFamily, "Events below the watermark, by action"),
    "headrace_eventtime_adjusted_events": (CounterMetricFamily, "Events whose timestamp was moved, each once"),
    "headrace_eventtime_duplicate_events": (CounterMetricFamily, "Events dropped as duplicates (Dedup)"),
    "headrace_eventtime_dead_lettered_events": (
        CounterMetricFamily,
        "Events the event-time core dead-lettered, by reason",
    ),
    "headrace_eventtime_windows_emitted": (CounterMetricFamily, "Windows closed and emitted"),
    "headrace_eventtime_early_results": (
        CounterMetricFamily,
        "Updates emitted before windows' final results (emit=Every)",
    ),
    "headrace_eventtime_joins_emitted": (CounterMetricFamily, "Interval join results emitted"),
    "headrace_eventtime_activations": (GaugeMetricFamily, "Event-time consumer activations"),
    "headrace_eventtime_open_windows": (GaugeMetricFamily, "Windows open (holding data) in the activations"),
    "headrace_eventtime_watermark_timestamp_seconds": (
        GaugeMetricFamily,
        "Lowest watermark among the queue's streams (POSIX s)",
    ),
    "headrace_eventtime_watermark_delay_seconds": (
        GaugeMetricFamily,
        "Highest watermark delay among the queue's streams",
    ),
    "headrace_eventtime_input_watermark_timestamp_seconds": (
        GaugeMetricFamily,
        "Lowest watermark of each merged input among the queue's activations with several inputs (POSIX s)",
    ),
    "headrace_eventtime_input_holding": (
        GaugeMetricFamily,
        "Activations whose merged watermark this input holds back (lowest, behind another input)",
    ),
    "headrace_eventtime_sampled_events": (
        GaugeMetricFamily,
        "Events sampled over the last hour for observed lateness and disorder, per consumer type",
    ),
    "headrace_eventtime_lateness_seconds": (
        GaugeMetricFamily,
        "Observed lateness (arrival - event time) over the last hour, sampled, by quantile (0.5, 0.99, 0.999)",
    ),
    "headrace_eventtime_disorder_seconds": (
        GaugeMetricFamily,
        "Observed disorder (newest event time of the lane - event time) over the last hour, sampled, by quantile",
    ),
    "headrace_dead_letters": (GaugeMetricFamily, "Dead letters kept in the store, by reason (shared by its workers)"),
}


def metric_families(snapshot: WorkerSnapshot, dead_letters: Mapping[str, int]) -> list[Metric]:
    """The metric families of one snapshot and the store's dead-letter counts."""
    out = _Families()
    out.add("headrace_agents_running", {"worker": snapshot.worker}, len(snapshot.queues))
    for q in snapshot.queues:
        at = {"worker": snapshot.worker, "queue": str(q.queue)}
        out.add("headrace_queue_records_read", at, q.records_read)
        out.add("headrace_queue_read_failures", at, q.read_failures)
        out.add("headrace_queue_failed", at, int(q.failed is not None))
        out.add("headrace_queue_read_seconds", at, q.read_latency)
        out.add("headrace_cache_pressure_skips", at, q.pressure_skips)
        out.add("headrace_cache_batches", at, q.cache_size)
        out.add("headrace_cache_max_batches", at, q.cache_max_size)
        out.add("headrace_cache_under_pressure", at, int(q.under_pressure))
        out.add("headrace_streams_active", at, q.streams)
        out.add("headrace_consumers", at, q.consumers)
        out.add("headrace_batches_delivered", at, q.delivered_batches)
        out.add("headrace_delivery_failures", at, q.delivery_failures)
        out.add("headrace_subscriptions_faulted", at, q.faulted)

        et, c = q.event_time, q.event_time.counters
        out.add("headrace_eventtime_events", at, c["events"])
        out.add("headrace_eventtime_early_events", at, c["early_arrival"])
        for action in _ACTIONS:
            out.add("headrace_eventtime_late_events", {**at, "action": action}, c[f"late_arrival_{action}"])
            out.add("headrace_eventtime_out_of_order_events", {**at, "action": action}, c[f"out_of_order_{action}"])
        out.add("headrace_eventtime_adjusted_events", at, c["adjusted"])
        out.add("headrace_eventtime_duplicate_events", at, c["duplicate"])
        for reason in ("window_closed", "invalid_timestamp", "invalid_value"):
            out.add("headrace_eventtime_dead_lettered_events", {**at, "reason": reason}, c[reason])
        out.add("headrace_eventtime_windows_emitted", at, c["windows_emitted"])
        out.add("headrace_eventtime_early_results", at, c["early_results"])
        out.add("headrace_eventtime_joins_emitted", at, c["joins_emitted"])
        out.add("headrace_eventtime_activations", at, et.activations)
        out.add("headrace_eventtime_open_windows", at, et.open_windows)
        if et.watermark is not None:  # no running stream: no watermark to report
            out.add("headrace_eventtime_watermark_timestamp_seconds", at, et.watermark)
        if et.delay is not None:
            out.add("headrace_eventtime_watermark_delay_seconds", at, et.delay)
        for name, mark in et.inputs.items():  # inputs are namespaces: a bounded label set
            if math.isfinite(mark):
                out.add("headrace_eventtime_input_watermark_timestamp_seconds", {**at, "input": name}, mark)
            out.add("headrace_eventtime_input_holding", {**at, "input": name}, et.holding.get(name, 0))
        for type_name, seen in q.observed.items():  # consumer types: a bounded label set
            of_type = {**at, "consumer_type": type_name}
            out.add("headrace_eventtime_sampled_events", of_type, seen.samples)
            for which in ("lateness", "disorder"):
                for share, v in zip(SHOWN, seen.quantiles(which)):
                    out.add(f"headrace_eventtime_{which}_seconds", {**of_type, "quantile": str(share)}, v)
    for reason, n in dead_letters.items():
        out.add("headrace_dead_letters", {"reason": reason}, n)
    return out.families()


class _Families:
    """Metric families by name (see :data:`METRICS`), filled one sample at a time."""

    def __init__(self) -> None:
        self._by_name: dict[str, Any] = {}

    def add(self, name: str, labels: Mapping[str, str], value: float | HistogramSnapshot) -> None:
        family = self._by_name.get(name)
        if family is None:
            kind, doc = METRICS[name]
            family = self._by_name[name] = kind(name, doc, labels=list(labels))
        if isinstance(value, HistogramSnapshot):
            buckets = [(_le(bound), n) for bound, n in zip(value.bounds, value.cumulative)]
            family.add_metric(list(labels.values()), buckets, value.sum)
        else:
            family.add_metric(list(labels.values()), value)

    def families(self) -> list[Metric]:
        return list(self._by_name.values())


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class MetricsServer:
    """Prometheus' HTTP endpoint (``/metrics``) for one worker; ``close()`` stops it."""

    def __init__(self, registry: CollectorRegistry, server: WSGIServer, thread: threading.Thread) -> None:
        self.registry = registry
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve_metrics(
    provider: StreamProvider,
    port: int,
    host: str = "127.0.0.1",
    health: WorkerHealth | None = None,
    tls: tuple[str, str] | None = None,
    status: StatusDocument | None = None,
) -> MetricsServer:
    """Serve ``provider``'s worker metrics at ``http://host:port/metrics`` (``port=0``: a free
    one, see ``.port``), with ``health`` its probes at ``/livez`` and ``/readyz``
    (:mod:`streams.runtime.health`), and with ``status`` the status page at ``/`` and
    ``status()`` at ``/status.json`` (:mod:`streams.runtime.page`); other paths answer 404.
    Call it on the provider's event loop. Loopback by default: expose the endpoint beyond
    the machine deliberately, with ``host``. With ``tls`` (a PEM certificate file and its
    key's file) it serves HTTPS only."""
    _check_port(port)
    context = None if tls is None else server_tls(*tls)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HeadraceCollector(provider))
    ProcessCollector(registry=registry)  # the usual process_* metrics: CPU, memory, file descriptors
    if health is not None:
        health.attach(provider)
    try:
        server, thread = _start_server(host, port, page_app(status, make_wsgi_app(registry), health), context)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    log.info("metrics at %s://%s:%d/metrics", "http" if context is None else "https", host, server.server_port)
    return MetricsServer(registry, server, thread)


def server_tls(certfile: str, keyfile: str) -> ssl.SSLContext:
    """The TLS context of an HTTPS endpoint from a PEM certificate (chain) and its key.

    >>> server_tls("/nonexistent/cert.pem", "/nonexistent/key.pem")
    Traceback (most recent call last):
    ...
    streams.core.errors.ConfigurationError: cannot serve TLS with metrics_certfile '/nonexistent/cert.pem' and metrics_keyfile '/nonexistent/key.pem': No such file or directory
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.reason if isinstance(exc, ssl.SSLError) else exc.strerror
        raise ConfigurationError(
            f"cannot serve TLS with metrics_certfile {certfile!r} and metrics_keyfile {keyfile!r}: {reason or exc}"
        ) from None
    return context


def serve_status_page(
    status: StatusDocument, port: int, host: str = "127.0.0.1", tls: tuple[str, str] | None = None
) -> MetricsServer:
    """The status page alone, of ``status()`` (``headrace status --serve``): no metrics, no
    probes; otherwise as :func:`serve_metrics` (HTTPS only with ``tls``)."""
    _check_port(port)
    context = None if tls is None else server_tls(*tls)
    try:
        server, thread = _start_server(host, port, page_app(status), context)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve the status page on {host}:{port}: {exc.strerror or exc}") from None
    return MetricsServer(CollectorRegistry(auto_describe=False), server, thread)


def _check_port(port: object) -> None:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigurationError(f"a metrics port is an int from 0 to 65535, not {port!r}")


class _Quiet(WSGIRequestHandler):
    """A request handler that logs no request (probes come every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _start_server(
    host: str, port: int, app: Any, context: ssl.SSLContext | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """``app`` served on ``host:port`` by a thread per request, as prometheus-client's own
    server does (which serves only its metrics application); with ``context``, over TLS."""

    class Server(ThreadingWSGIServer):
        def finish_request(self, request: Any, client_address: Any) -> None:
            if context is not None:  # the handshake in the request's own thread, not the acceptor's
                request.settimeout(10)
                request = context.wrap_socket(request, server_side=True)
            super().finish_request(request, client_address)

        def handle_error(self, request: Any, client_address: Any) -> None:
            log.debug("metrics endpoint: a request from %s failed", client_address, exc_info=True)

    Server.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server = make_server(host, port, app, Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="headrace-metrics", daemon=True)
    thread.start()
    return server, thread
