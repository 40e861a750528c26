"""The status page's HTTP endpoint: a worker's (beside its metrics and probes) and
``headrace status --serve``'s. Paths, read-only methods, the JSON equal to
``headrace status --json``, errors as JSON, and the history the worker keeps for the plots."""

from __future__ import annotations

import http.client
import json
import logging
import signal
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

import anyio
import pytest

from balancer.base import BalancerOptions
from streams import StreamId, StreamProvider
from streams.cli.page import LATEST_LETTERS, READ_WITHIN, PageSource
from streams.core.deadletters import DeadLetter
from streams.core.errors import StoreError
from streams.observability import serve_metrics
from streams.runtime.health import WorkerHealth
from streams.runtime.history import StatusHistory
from streams.runtime.page import page_app
from streams.runtime.snapshot import take_snapshot
from tests.helpers import busy_port
from tests.kafka_tls import Certificates
from tests.streams.cli.helpers import headrace, headrace_running, json_of, one_error_line
from tests.streams.runtime.helpers import free_port


def request(port: int, path: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """``method http://127.0.0.1:port/path``: (status, headers, body) (blocking)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


async def request_async(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return await anyio.to_thread.run_sync(request, port, path, method)


def without_clock(status: dict[str, Any]) -> dict[str, Any]:
    """A status without what moves with the clock between two reads of the same store."""
    status = json.loads(json.dumps(status))
    status.pop("taken_at")
    for w in status["workers"]:
        w.pop("last_heartbeat")
    for q in status["queues"]:
        q.pop("lease_expires")
        q.pop("lag_seconds")
    return status


async def test_a_workers_endpoint_serves_the_page_its_status_metrics_and_probes(tmp_path):
    store = tmp_path / "store"
    provider = StreamProvider.embedded(store, queues=2, worker_name="w-page")
    async with provider:
        await provider.dead_letters.add(
            [DeadLetter("late_arrival", f"readings/r{i}", 0, i, value={"n": i}, event_index=0) for i in range(12)]
            + [DeadLetter("undecodable", None, 1, 3, payload=b"\xff")]
        )
        await provider.get_stream(StreamId("readings", "r1")).on_next_batch([1, 2, 3])
        await provider.drain()  # read and acknowledged (on the agent's timer): both reads see one checkpoint
        timeout = BalancerOptions().suspicion_timeout  # as `headrace status` reads it without a configuration
        source = PageSource(provider.backend, timeout, f"--path {store}", StatusHistory(), "w-page")
        with serve_metrics(provider, 0, health=WorkerHealth(), status=source.serve) as server:
            port = server.port
            code, headers, body = await request_async(port, "/")
            assert code == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
            assert body.startswith(b"<!doctype html>") and b"status.json" in body
            assert "default-src 'none'" in headers["Content-Security-Policy"]
            assert b"http://" not in body and b"https://" not in body  # nothing fetched from elsewhere

            code, headers, body = await request_async(port, "/status.json")
            assert (code, headers["Content-Type"]) == (200, "application/json; charset=utf-8")
            served = json.loads(body)
            printed = await anyio.to_thread.run_sync(
                lambda: json_of(headrace("status", "--path", store, "--json", cwd=tmp_path))
            )
            page = served.pop("page")
            assert without_clock(served) == without_clock(printed)
            assert served["queues"][0]["next_sequence"] + served["queues"][1]["next_sequence"] == 1
            letters = page["latest_dead_letters"]
            assert len(letters) == LATEST_LETTERS and [x["id"] for x in letters] == list(range(13, 3, -1))
            assert letters[0]["reason"] == "undecodable" and letters[0]["replay"] is None  # nothing to publish
            assert letters[1] == {
                **letters[1],
                "reason": "late_arrival",
                "stream": "readings/r11",
                "queue": 0,
                "sequence_number": 11,
                "event_index": 0,
                "replay": f"headrace dlq replay --path {store} 12",
            }
            assert page["worker"] == "w-page" and page["history"]["samples"] == [] and page["advice"] == {}

            code, headers, body = await request_async(port, "/metrics")
            assert code == 200 and b"headrace_agents_running" in body
            assert (await request_async(port, "/livez"))[:1] == (200,)
            assert (await request_async(port, "/readyz"))[0] == 503  # never marked joined here

            for path in ("/nope", "/metrics/x", "/status", "/index.html", "/status.json/"):
                code, _, body = await request_async(port, path)
                assert (code, body) == (404, f"no page at {path}\n".encode())
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                for path in ("/", "/status.json", "/metrics", "/readyz"):
                    code, headers, _ = await request_async(port, path, method)
                    assert (code, headers["Allow"]) == (405, "GET, HEAD"), (method, path)
            code, headers, body = await request_async(port, "/", "HEAD")
            assert (code, body) == (200, b"") and int(headers["Content-Length"]) > 10_000
        await source.close()


async def test_the_json_says_why_when_the_status_cannot_be_read(caplog):
    def unreadable() -> dict[str, object]:
        raise StoreError("the store at ./store is locked by another process; try again")

    def broken() -> dict[str, object]:
        raise KeyError("bug")

    for status, code, error in (
        (unreadable, "503 Service Unavailable", "the store at ./store is locked by another process; try again"),
        (broken, "500 Internal Server Error", "reading the status failed (the log has the traceback)"),
    ):
        sent: list[str] = []
        body = b"".join(
            page_app(status)({"REQUEST_METHOD": "GET", "PATH_INFO": "/status.json"}, lambda s, h: sent.append(s))
        )
        assert (sent, json.loads(body)) == ([code], {"error": error})
    assert [r.levelno for r in caplog.records if r.name == "headrace.page"] == [logging.ERROR]

    sent = []
    answer = page_app(None)({"REQUEST_METHOD": "GET", "PATH_INFO": "/"}, lambda s, h: sent.append(s))
    assert sent == ["404 Not Found"] and b"".join(answer) == b"no page at /\n"  # no status given: no page


async def test_on_memory_queues_the_page_says_nothing_can_be_read():
    async with StreamProvider.memory(queues=1) as provider:
        source = PageSource(provider.backend, 2.0, "")
        with serve_metrics(provider, 0, status=source.serve) as server:
            code, _, body = await request_async(server.port, "/status.json")
    assert code == 503
    assert json.loads(body) == {"error": "its provider keeps no local store (memory queues): nothing to read"}


async def test_the_history_keeps_the_last_hour_and_its_rates():
    async with StreamProvider.memory(queues=2, worker_name="w1") as provider:
        taken = take_snapshot(provider)
    q0, q1 = taken.queues
    history = StatusHistory(every=5.0, span=3600.0)
    t = 1000.0
    for n in range(800):  # more than the hour's 720 samples
        events = replace(q0, events_read=100 * n, events_delivered=90 * n)
        history.sample(replace(taken, taken_at=t + 5.0 * n, queues=(events, q1)))
    samples = history.as_dict()["samples"]
    assert isinstance(samples, list) and len(samples) == 720
    assert samples[0]["t"] == t + 5.0 * 80 and samples[-1]["t"] == t + 5.0 * 799
    assert {(s["in_per_s"], s["out_per_s"]) for s in samples} == {(20.0, 18.0)}
    assert {(s["lag"], s["watermark_delay"]) for s in samples} == {(0, None)}
    # An agent that restarted counts from zero: no rate for that sample, rates again after.
    restarted = history.sample(replace(taken, taken_at=t + 5.0 * 800, queues=(replace(q0, events_read=3), q1)))
    assert (restarted.in_per_s, restarted.out_per_s) == (None, None)
    with pytest.raises(Exception, match="samples every positive seconds"):
        StatusHistory(every=0)


def test_status_serve_serves_the_page_of_a_store_until_interrupted(tmp_path):
    produced = headrace(
        "produce", "--path", "store", "--queues", "1", "--stream", "a/b", cwd=tmp_path, stdin="1\n2\n3\n"
    )
    assert produced.returncode == 0, produced.stderr
    port = free_port()
    server = headrace_running("status", "--path", "store", "--serve", "--port", port, cwd=tmp_path)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line == f"headrace status: the status page at http://127.0.0.1:{port}/ (Ctrl-C stops it)\n"
        code, headers, body = request(port, "/")
        assert code == 200 and b"<script>" in body
        served = json.loads(request(port, "/status.json")[2])
        page = served.pop("page")
        printed = json_of(headrace("status", "--path", "store", "--json", cwd=tmp_path))
        assert without_clock(served) == without_clock(printed)
        assert served["queues"][0]["checkpoint_lag"] == 1 and served["queues"][0]["lag_events"] == 3
        assert page == {"worker": None, "latest_dead_letters": [], "advice": {}, "history": None}
        assert request(port, "/metrics")[0] == 404  # no worker here: no metrics, no probes
        assert request(port, "/livez")[0] == 404
        assert request(port, "/", "POST")[0] == 405
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and err == ""


def test_status_serve_refuses_what_the_page_cannot_show(tmp_path):
    result = headrace("status", "--path", "store", "--serve", "--json", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().endswith(
        "--serve shows everything on the page: leave out --json, --advise and --all"
    )
    with busy_port() as taken:
        produced = headrace("produce", "--path", "store", "--queues", "1", "--stream", "a/b", cwd=tmp_path, stdin="1\n")
        assert produced.returncode == 0
        start = time.monotonic()
        result = headrace("status", "--path", "store", "--serve", "--port", taken, cwd=tmp_path)
    assert result.returncode == 2 and time.monotonic() - start < 30
    assert f"cannot serve the status page on 127.0.0.1:{taken}" in result.stderr and "Traceback" not in result.stderr


def test_status_serve_serves_https_given_a_certificate_and_nothing_in_plain_http(tmp_path):
    """``--certfile``/``--keyfile`` (or the config's ``[worker] metrics_certfile`` and
    ``metrics_keyfile``): the page and its JSON over HTTPS only; one without the other is
    one line and exit code 2."""
    certificates = Certificates.make(tmp_path / "tls")
    produced = headrace("produce", "--path", "store", "--queues", "1", "--stream", "a/b", cwd=tmp_path, stdin="1\n")
    assert produced.returncode == 0, produced.stderr
    trusted = ssl.create_default_context(cafile=certificates["ca.pem"])
    for options, config in (
        (["--certfile", "tls/server.pem", "--keyfile", "tls/server.key"], None),
        ([], '[worker]\nmetrics_certfile = "tls/server.pem"\nmetrics_keyfile = "tls/server.key"\n'),
    ):
        if config is not None:
            (tmp_path / "headrace.toml").write_text(config)
        port = free_port()
        server = headrace_running("status", "--path", "store", "--serve", "--port", port, *options, cwd=tmp_path)
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line == f"headrace status: the status page at https://127.0.0.1:{port}/ (Ctrl-C stops it)\n"
            with urllib.request.urlopen(f"https://localhost:{port}/", context=trusted, timeout=10) as response:
                assert response.status == 200 and b"<script>" in response.read()
            with urllib.request.urlopen(f"https://localhost:{port}/status.json", context=trusted, timeout=10) as r:
                assert json.load(r)["queues"][0]["lag_events"] == 1
            with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=10)  # plain HTTP: no answer
        finally:
            server.send_signal(signal.SIGINT)
            _, err = server.communicate(timeout=30)
        assert server.returncode == 0 and err == ""
    (tmp_path / "headrace.toml").unlink()
    alone = headrace("status", "--path", "store", "--serve", "--certfile", "tls/server.pem", cwd=tmp_path)
    assert one_error_line(alone, "status") == (
        "the status page serves TLS with a certificate and its key: give both --certfile and --keyfile"
    )


async def test_the_history_counts_the_dead_letters_by_reason_as_they_come(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=1, worker_name="w1")
    history = StatusHistory(every=0.05, span=0.5)  # ten samples kept
    async with provider, anyio.create_task_group() as tg:
        tg.start_soon(history.run, provider)
        await anyio.sleep(0.2)
        await provider.dead_letters.add(
            [DeadLetter("late_arrival", "r/1", 0, 1), DeadLetter("undecodable", None, 0, 2)]
        )
        await anyio.sleep(0.2)
        await provider.dead_letters.add([DeadLetter("late_arrival", "r/2", 0, 3)])
        with anyio.fail_after(5):
            while history.as_dict()["samples"][-1]["dead_letters"] != {"late_arrival": 2, "undecodable": 1}:
                await anyio.sleep(0.02)
        counts = [s["dead_letters"] for s in history.as_dict()["samples"]]
        await anyio.sleep(0.5)  # ten more samples' time
        tg.cancel_scope.cancel()
    assert len(history.as_dict()["samples"]) == 10  # bounded: the oldest went
    # in order, each count as it stood: none (no reason listed), then the two, then the third
    seen = [c for i, c in enumerate(counts) if i == 0 or c != counts[i - 1]]
    assert seen[-2:] == [{"late_arrival": 1, "undecodable": 1}, {"late_arrival": 2, "undecodable": 1}]
    assert seen[0] in ({}, {"late_arrival": 1, "undecodable": 1})


def test_status_serve_of_a_cluster_that_does_not_answer_says_so_and_shows_no_secret(tmp_path):
    """A Kafka cluster down (its clients retry with back-off): the page's JSON answers 503 with
    why after a bounded wait, not a poll left hanging; its password is nowhere on the page."""
    secret = "hunter2-page-secret"
    (tmp_path / "kafka.toml").write_text(
        '[provider]\nadapter = "kafka"\n\n[provider.kafka]\nbootstrap_servers = "127.0.0.1:1"\ntopic = "t"\n'
        'group = "g"\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\n'
        f'sasl_plain_username = "app"\nsasl_plain_password = "{secret}"\n'
    )
    port = free_port()
    server = headrace_running("status", "--config", "kafka.toml", "--serve", "--port", port, cwd=tmp_path)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith(f"headrace status: the status page at http://127.0.0.1:{port}/")
        start = time.monotonic()
        code, _, body = request(port, "/status.json", timeout=READ_WITHIN + 20)
        assert time.monotonic() - start < READ_WITHIN + 20
        assert code == 503 and json.loads(body) == {
            "error": f"the status was not read within {READ_WITHIN:g} s: the store or cluster does not answer "
            "(the log of headrace status --serve, or of the worker, says why)"
        }
        page = request(port, "/", timeout=READ_WITHIN + 20)[2]
        assert secret.encode() not in body + page
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0 and secret not in err
