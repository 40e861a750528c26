"""A worker's probes (``/livez``, ``/readyz`` beside the metrics): live while its event loop
answers, ready while it holds its queues and reads them; not ready while a queue is failed,
while its store is unreachable, and while it drains after SIGTERM, each with one line."""

from __future__ import annotations

import http.client
import json
import signal
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from streams import StreamProvider
from streams.core.errors import QueueFailedError
from streams.observability import serve_metrics
from streams.runtime.health import WorkerHealth
from tests.kafka_broker import TansuBroker, TansuProxy
from tests.kafka_tls import Certificates
from tests.streams.cli.helpers import clean_env, headrace, one_error_line, start_worker
from tests.streams.runtime.helpers import free_port


def probe(port: int, path: str) -> tuple[int, str]:
    """``GET http://127.0.0.1:port/path``: (status, body) (blocking)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()


async def probe_async(port: int, path: str) -> tuple[int, str]:
    return await anyio.to_thread.run_sync(probe, port, path)


async def test_ready_while_reading_and_not_ready_once_a_queue_failed(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=2)
    health = WorkerHealth()
    async with provider:
        with serve_metrics(provider, 0, health=health) as server:
            assert await probe_async(server.port, "/readyz") == (503, "not ready: starting (not joined yet)")
            health.joined()
            assert await probe_async(server.port, "/livez") == (200, "live")
            assert await probe_async(server.port, "/readyz") == (200, "ready: reading queues [0, 1]")
            assert (await probe_async(server.port, "/metrics"))[1].count("headrace_agents_running") > 0
            # The agent's own path when a queue cannot be read on (a deleted topic, say)
            [agent] = [a for a in provider.agents if a.queue.number == 1]
            agent._fail(QueueFailedError("queue-1: the topic was deleted; recreate it"))
            assert await probe_async(server.port, "/readyz") == (
                503,
                "not ready: queue 1 failed: queue-1: the topic was deleted; recreate it",
            )
            assert await probe_async(server.port, "/livez") == (200, "live")  # a restart would not help


async def test_not_live_while_the_event_loop_is_blocked(tmp_path):
    provider = StreamProvider.memory(queues=1)
    health = WorkerHealth(timeout=0.3)
    async with provider:
        with serve_metrics(provider, 0, health=health) as server:
            health.joined()
            answers: list[tuple[int, str]] = []

            def ask() -> None:  # a probe arriving while the loop is blocked
                time.sleep(0.1)
                answers.append(probe(server.port, "/livez"))

            prober = threading.Thread(target=ask)
            prober.start()
            time.sleep(1.0)  # a consumer doing synchronous work on the loop
            prober.join()
            assert answers == [(503, "not live: the event loop did not answer in 0.3 s")]
            assert await probe_async(server.port, "/livez") == (200, "live")


@pytest.fixture
def reachable_broker() -> Iterator[TansuProxy]:
    """A broker behind a proxy: stopping the proxy is the store going away."""
    with TansuBroker() as broker, TansuProxy(broker) as proxy:
        yield proxy


async def test_not_ready_while_the_store_is_unreachable(reachable_broker, kafka_topic):
    fast = {"outage_after": 0.3, "request_timeout": 1.0}
    provider = StreamProvider.kafka(reachable_broker.bootstrap, kafka_topic, queues=1, kafka=fast)
    health = WorkerHealth()
    async with provider:
        with serve_metrics(provider, 0, health=health) as server:
            health.joined()
            assert await probe_async(server.port, "/readyz") == (200, "ready: reading queues [0]")
            await anyio.to_thread.run_sync(reachable_broker.stop)
            deadline = time.monotonic() + 20
            while (answer := await probe_async(server.port, "/readyz"))[0] == 200 and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            assert answer == (503, "not ready: queue 0 unreachable (its reads are retried with back-off)")
            assert await probe_async(server.port, "/livez") == (200, "live")
            await anyio.to_thread.run_sync(reachable_broker.start)
            deadline = time.monotonic() + 30
            while (answer := await probe_async(server.port, "/readyz"))[0] != 200 and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            assert answer == (200, "ready: reading queues [0]")


SLOW_APP = """
import anyio
from streams import StreamProvider

provider = StreamProvider.embedded("store", queues=1)


@provider.implicit("orders")
class Slow:
    def __init__(self, stream_id):
        pass

    async def on_next(self, batch):
        await anyio.sleep(3)  # the delivery a leaving worker finishes before it hands back
"""


def test_a_draining_worker_is_not_ready_but_live(tmp_path: Path):
    (tmp_path / "slow.py").write_text(SLOW_APP)
    port = free_port()
    worker = start_worker(tmp_path, "--app", "slow:provider", "--metrics-port", port, env=clean_env())
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().endswith("running, reading queues [0] of 1\n")
        assert probe(port, "/readyz") == (200, "ready: reading queues [0]")
        produced = headrace("produce", "--app", "slow:provider", "--stream", "orders/o-1", cwd=tmp_path, stdin="1\n")
        assert produced.returncode == 0, produced.stderr
        time.sleep(1.0)  # the worker reads it and is delivering (3 s)
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert probe(port, "/readyz") == (
            503,
            "not ready: leaving (finishing its deliveries, handing its queues back)",
        )
        assert probe(port, "/livez") == (200, "live")
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()


def test_the_endpoints_serve_https_given_a_certificate_and_its_key(tmp_path: Path):
    """--metrics-certfile and --metrics-keyfile (or [worker] metrics_certfile / metrics_keyfile):
    the metrics, the probes and the status page over HTTPS, and nothing in plain HTTP."""
    (tmp_path / "slow.py").write_text(SLOW_APP)
    certificates = Certificates.make(tmp_path / "tls")
    port = free_port()
    (tmp_path / "headrace.toml").write_text(
        f'[worker]\nmetrics_certfile = "tls/server.pem"\nmetrics_keyfile = "tls/server.key"\nmetrics_port = {port}\n'
    )
    worker = start_worker(tmp_path, "--app", "slow:provider", env=clean_env())
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().endswith("running, reading queues [0] of 1\n")
        trusted = ssl.create_default_context(cafile=certificates["ca.pem"])
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/livez", context=trusted, timeout=10) as response:
            assert (response.status, response.read()) == (200, b"live\n")
        with urllib.request.urlopen(f"https://localhost:{port}/metrics", context=trusted, timeout=10) as response:
            assert b"headrace_" in response.read()
        # the status page and its JSON too, from the same endpoint
        with urllib.request.urlopen(f"https://localhost:{port}/", context=trusted, timeout=10) as response:
            assert b"<script>" in response.read()
        with urllib.request.urlopen(f"https://localhost:{port}/status.json", context=trusted, timeout=10) as response:
            served = json.load(response)
        assert served["page"]["worker"] == served["workers"][0]["name"]
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=10)  # plain HTTP: no answer
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    log = (tmp_path / "worker.log").read_text()
    assert f"metrics at https://127.0.0.1:{port}/metrics" in log and "Traceback" not in log
    refused = headrace(
        "worker",
        "--app",
        "slow:provider",
        "--metrics-port",
        "0",
        "--metrics-certfile",
        "server.pem",
        cwd=tmp_path / "tls",
    )  # no headrace.toml there: a certificate without its key
    assert one_error_line(refused, "worker") == (
        "the metrics endpoint serves TLS with a certificate and its key: give both --metrics-certfile and --metrics-keyfile"
    )
