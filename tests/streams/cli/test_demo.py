"""``headrace demo`` through its real entry point: the whole pipeline in a short run, with Spark
(one JVM: the one slow test here) and on Kafka; its counts must reconcile. And its mistakes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

SHORT = ("--duration", "4s", "--rate", "200", "--streams", "6", "--queues", "2")
CHECKS = (
    "published = kept + adjusted + dropped + dead-lettered",
    "every published event reached its consumer once",
    "corrupt records dead-lettered",
)


def headrace(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], capture_output=True, text=True, timeout=timeout)


def assert_reconciled(result: subprocess.CompletedProcess[str], reader: str) -> dict[str, int]:
    """The summary's checks all hold; returns its figures by line."""
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for check in (*CHECKS, f"windows handed off = windows {reader} received"):
        match = re.search(rf"^  ok +{re.escape(check)}: ([\d,]+) = ([\d,]+)$", out, re.M)
        assert match, (check, out)
    assert out.rstrip().endswith("\nreconciled")
    figures = {
        name: int(n.replace(",", ""))
        for name, n in re.findall(r"^  (published|kept|adjusted|dropped|dead-lettered|windows) +([\d,]+)", out, re.M)
    }
    assert figures["published"] == figures["kept"] + figures["adjusted"] + figures["dropped"] + figures["dead-lettered"]
    assert figures["dead-lettered"] >= 3  # the corrupt records at least
    assert figures["windows"] > 0
    late = re.search(
        r"^  late +([\d,]+)  more than late_arrival behind, in the rows above: "
        r"([\d,]+) adjusted, ([\d,]+) dropped, ([\d,]+) accepted$",
        out,
        re.M,
    )
    assert late, out
    total, adjusted, dropped, accepted = (int(n.replace(",", "")) for n in late.groups())
    assert total == adjusted + dropped + accepted and adjusted <= figures["adjusted"]
    return figures


def test_demo_with_spark_reconciles():
    result = headrace("demo", *SHORT, timeout=300)
    figures = assert_reconciled(result, "Spark")
    assert re.search(r"^  status page: http://127\.0\.0\.1:\d+/ \(live while the demo runs", result.stdout, re.M)
    assert re.search(r"^spark batch +\d+ window \d\d:\d\d:\d\d–\d\d:\d\d:\d\d: ", result.stdout, re.M)
    assert figures["adjusted"] > 0  # late and out-of-order reports were moved into windows


def test_demo_on_kafka_reconciles(kafka_broker):
    # The test broker has no producer ids: no idempotent producer. A 3 s session: Tansu holds
    # the worker's group join for half of it.
    result = headrace(
        "demo",
        *SHORT,
        "--kafka",
        kafka_broker,
        "--kafka-option",
        "idempotent=false",
        "--kafka-option",
        "session_timeout=3",
        "--no-spark",
        timeout=180,
    )
    assert f"queues on Kafka at {kafka_broker}" in result.stdout
    # The status page's address, printed while it runs
    assert re.search(r"^  status page: http://127\.0\.0\.1:\d+/ \(live while the demo runs", result.stdout, re.M)
    assert_reconciled(result, "the handoff reader")
    assert re.search(r"^handoff batch +\d+ window ", result.stdout, re.M)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--duration", "0"), "--duration, --rate and --window must be positive"),
        (("--window", "ten"), "--window: 'ten' is not a duration (like 250ms, 5s, 2m, 1h or seconds)"),
        (("--streams", "0"), "--streams, --booths and --queues must be positive"),
        (("--metrics-port", "70000"), "--metrics-port is a port number from 1 to 65535, not 70000"),
        (("--kafka-option", "idempotent=false"), "--kafka-option applies only with --kafka HOST:PORT"),
        (("--kafka", "127.0.0.1:1", "--kafka-option", "idempotent"), "--kafka-option is NAME=VALUE, not 'idempotent'"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(args, message):
    result = headrace("demo", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"headrace demo: error: {message}"]


@pytest.mark.parametrize(
    ("server", "reason"),
    [
        ("nohost", "KafkaConnectionError: Unable to bootstrap from [('nohost', 9092, "),
        ("127.0.0.1:1", "KafkaConnectionError: Unable to bootstrap from [('127.0.0.1', 1, "),
    ],
)
def test_an_unreachable_broker_is_one_line_after_the_short_check(server, reason):
    """No aiokafka lines, whatever they say: the client's connection loggers are lowered to
    DEBUG; the check gives up after its 5 s instead of the adapter's minute of retries."""
    result = headrace("demo", "--duration", "2s", "--kafka", server, "--no-spark")
    assert (result.returncode, result.stdout) == (2, "")
    [line] = result.stderr.strip().splitlines()
    prefix = f"headrace demo: error: Kafka at {server} did not answer within 5 s ({reason}"
    assert line.startswith(prefix), line
    assert line.endswith("check the address, and that the broker is running and reachable from here")


def test_no_java_is_one_line_that_says_what_to_do(tmp_path):
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "PATH": os.path.dirname(sys.executable)}
    result = subprocess.run(
        [sys.executable, "-m", "streams.cli", "demo", "--duration", "2", "--rate", "20", "--streams", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]  # Spark's launcher script complains first
    assert last.startswith("headrace demo: error: Spark did not start (")
    assert last.endswith("it needs Java 17+ (java on the PATH or JAVA_HOME): install it, or run with --no-spark")
    assert "Traceback" not in result.stderr


def test_path_must_be_new_or_empty(tmp_path):
    (tmp_path / "old.db").write_text("something")
    result = headrace("demo", "--path", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"headrace demo: error: --path {tmp_path} is not a new or empty directory "
        "(the demo reconciles everything in it)"
    ]


def test_no_command_prints_help_and_exit_2():
    result = headrace()
    assert result.returncode == 2
    assert "usage: headrace" in result.stdout


def test_unknown_option_is_one_line():
    result = headrace("demo", "--nope")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["headrace demo: error: unrecognized arguments: --nope (see --help)"]
