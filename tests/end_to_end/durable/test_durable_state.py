"""Durable consumer state across real restarts: ``headrace worker`` processes
stopped with SIGTERM and SIGKILL, on the embedded store and on Kafka. Fields declared with
``Durable`` come back, the replayed events they already reflect are skipped, so a running
total is exact and the third-order alert fires once; ``headrace state`` shows the saved
state."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from streams import StreamId, StreamProvider
from tests.end_to_end.durable.orders_app import app
from tests.helpers import wait_until_async
from tests.streams.cli.helpers import headrace

ROOT = Path(__file__).resolve().parents[3]
APP = "tests.end_to_end.durable.orders_app:app"


class Worker:
    """``headrace worker --app orders_app`` processes, one at a time, and what they wrote.
    One a failed test left running is killed when the test ends (:func:`kill_left_running`)."""

    running: ClassVar[set[subprocess.Popen[bytes]]] = set()

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.out = tmp_path / "out.txt"
        self.log = tmp_path / "worker.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEADRACE_")}
        self.env |= {"PYTHONPATH": str(ROOT), "HEADRACE_TEST_OUT": str(self.out), **env}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.process is None
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--app", APP],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "a"),
        )
        Worker.running.add(self.process)

    def stop(self, how: signal.Signals) -> int:
        process, self.process = self.process, None
        assert process is not None
        Worker.running.discard(process)
        process.send_signal(how)
        return process.wait(timeout=60)

    def lines(self, prefix: str = "") -> list[str]:
        text = self.out.read_text() if self.out.exists() else ""
        return [line for line in text.splitlines() if line.startswith(prefix)]

    async def wait_for(self, line: str, seconds: float = 60.0) -> None:
        await wait_until_async(lambda: line in self.lines(), seconds)
        if line not in self.lines():  # in full: an assertion's message is cut short
            log = self.log.read_text().splitlines()[-60:]
            pytest.fail(
                f"{line!r} not written in {seconds:.0f} s; written: {self.lines()}; the log ends:\n" + "\n".join(log)
            )

    def state(self, *args: str, saved: bool = True) -> list[dict[str, Any]]:
        """What ``headrace state --app`` prints of ``RunningTotal``/``ThirdOrderAlert``, parsed
        (``saved=False``: none may be saved yet)."""
        result = headrace("state", "--app", APP, *args, "--json", cwd=ROOT, env=self.env)
        if not saved and "types with saved state: none" in result.stderr:
            return []
        assert result.returncode == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()]


def kill_left_running() -> None:
    """Kill the workers a test left running (it failed before it stopped them)."""
    while Worker.running:
        process = Worker.running.pop()
        process.kill()
        process.wait(timeout=30)


def client(worker: Worker) -> StreamProvider:
    os.environ.update({k: v for k, v in worker.env.items() if k.startswith("HEADRACE_TEST_")})
    try:
        return app()
    finally:
        for key in [k for k in os.environ if k.startswith("HEADRACE_TEST_")]:
            del os.environ[key]


async def order(worker: Worker, user: str, amount: float) -> None:
    async with client(worker).client() as producer:
        await producer.get_stream(StreamId("orders", user)).on_next({"amount": amount})


async def third_order_alert(worker: Worker) -> None:
    """Two orders, SIGTERM, a third: the alert fires with the right total. Then the same
    with SIGKILL just after the second order was taken (its state may not be saved yet:
    the replay is skipped or counted, never both)."""
    await order(worker, "ann", 10.0)
    await order(worker, "ann", 20.0)
    worker.start()
    await worker.wait_for("took ann 2")
    assert worker.stop(signal.SIGTERM) == 0, worker.log.read_text()
    await order(worker, "ann", 5.0)
    worker.start()
    await worker.wait_for("alert ann 3 35.00")

    await order(worker, "bob", 1.0)
    await order(worker, "bob", 2.0)
    await worker.wait_for("took bob 2")
    worker.stop(signal.SIGKILL)
    await order(worker, "bob", 3.0)
    worker.start()
    await worker.wait_for("alert bob 3 6.00")
    worker.stop(signal.SIGTERM)
    assert worker.lines("alert") == ["alert ann 3 35.00", "alert bob 3 6.00"]
    # `headrace state` shows each user's saved fields.
    saved = {s["stream"]: s["fields"] for s in worker.state("ThirdOrderAlert")}
    assert saved == {"orders/ann": {"orders": 3, "total": 35.0}, "orders/bob": {"orders": 3, "total": 6.0}}


async def running_totals_under_kills(worker: Worker, *, events: int, kills: int, seed: int) -> None:
    """``events`` integers to 10 keys, published in chunks while a worker runs and is
    SIGKILLed ``kills`` times at random moments; the saved totals equal the exact sums."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(10)]
    expected = {k: [0, 0] for k in keys}
    chunks = 20
    kill_after = set(rng.sample(range(chunks - 1), kills))
    worker.start()
    async with client(worker).client() as producer:
        n = 0
        for chunk in range(chunks):
            for _ in range(events // chunks // 50):  # records of 50 events
                key = rng.choice(keys)
                values = list(range(n, n + 50))
                n += 50
                expected[key][0] += sum(values)
                expected[key][1] += len(values)
                await producer.get_stream(StreamId("amounts", key)).on_next_batch(values)
            if chunk in kill_after:
                time.sleep(rng.uniform(0.0, 0.6))  # the worker goes on meanwhile
                worker.stop(signal.SIGKILL)
                worker.start()

    def done() -> bool:
        found = {
            s["stream"].split("/")[1]: [s["fields"].get("total"), s["fields"].get("count")]
            for s in worker.state("RunningTotal", saved=False)
        }
        return found == {k: v for k, v in expected.items() if v[1]}

    await wait_until_async(done, 120, poll=0.2)  # each look is a `headrace state` process
    worker.stop(signal.SIGTERM)
    found = {
        s["stream"].split("/")[1]: [s["fields"]["total"], s["fields"]["count"]] for s in worker.state("RunningTotal")
    }
    assert found == {k: v for k, v in expected.items() if v[1]}
    assert sum(v[1] for v in found.values()) == events


async def test_third_order_alert_across_sigterm_and_sigkill_on_the_embedded_store(tmp_path: Path) -> None:
    await third_order_alert(Worker(tmp_path, HEADRACE_TEST_STORE=str(tmp_path / "store")))


async def test_running_totals_of_100000_events_under_4_sigkills_on_the_embedded_store(tmp_path: Path) -> None:
    worker = Worker(tmp_path, HEADRACE_TEST_STORE=str(tmp_path / "store"))
    await running_totals_under_kills(worker, events=100_000, kills=4, seed=35)


@pytest.mark.timeout(600)
async def test_third_order_alert_and_running_totals_under_sigkills_on_kafka(
    tmp_path: Path, kafka_broker: str, kafka_topic: str
) -> None:
    orders = Worker(tmp_path / "orders", HEADRACE_TEST_KAFKA=kafka_broker, HEADRACE_TEST_TOPIC=kafka_topic)
    orders.out.parent.mkdir()
    await third_order_alert(orders)
    totals = Worker(tmp_path / "totals", HEADRACE_TEST_KAFKA=kafka_broker, HEADRACE_TEST_TOPIC=kafka_topic + "-t")
    totals.out.parent.mkdir()
    await running_totals_under_kills(totals, events=100_000, kills=4, seed=36)


async def test_a_timer_set_before_a_sigkill_fires_once_after_the_restart(tmp_path: Path) -> None:
    worker = Worker(tmp_path, HEADRACE_TEST_STORE=str(tmp_path / "store"))
    async with client(worker).client() as producer:
        await producer.get_stream(StreamId("reminders", "r1")).on_next(
            {"in": 12.0}
        )  # time enough to see it saved, on a loaded machine, before it is due
    worker.start()
    await worker.wait_for("set r1")

    def saved_timer() -> bool:
        saved = worker.state("Reminder", saved=False)
        return bool(saved) and [t["name"] for t in saved[0]["timers"]] == ["ping"]

    assert await wait_until_async(saved_timer, 30, poll=0.2)
    worker.stop(signal.SIGKILL)  # before it is due
    assert worker.lines("fired") == []
    worker.start()
    await worker.wait_for("fired r1 ping", 30)
    await wait_until_async(lambda: False, 1.0)  # a second firing would come by now
    worker.stop(signal.SIGTERM)
    assert worker.lines("fired") == ["fired r1 ping"]
    (saved,) = worker.state("Reminder", "reminders/r1")
    assert saved["fields"] == {"fired": 1} and saved["timers"] == []
