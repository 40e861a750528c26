"""Secured clusters: TLS, mutual TLS and SASL from configuration alone, for every command, with
the refusals named in one line and no secret in any output.

TLS is the session's Tansu broker behind a TLS terminator (tests.kafka_tls), with a CA, server
and client certificates made for the run. SASL logins cannot succeed against Tansu's memory
storage (it holds no credentials): a small responder records what the login sends and
refuses it, which is what is tested of SASL here.
"""

from __future__ import annotations

import csv
import json
import pickle
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest

from streams.backends.kafka.adapter import KafkaAdapterFactory
from streams.backends.kafka.clients import ensure_topic
from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.refusals import KafkaRefusedError
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.spark_options import connection_from_spark
from streams.core.errors import ConfigurationError, QueueFailedError
from streams.core.ids import QueueId
from streams.core.secret import Secret
from streams.runtime.config import load_config
from tests.kafka_tls import KEY_PASSPHRASE, SaslResponder, SecuredCluster
from tests.streams.cli.helpers import clean_env, headrace, json_of, one_error_line, start_worker

APP = "tests.streams.kafka.secured_app:provider"
EVENTS = 60  # over three streams of sensors
WITHIN_SECONDS = 30  # a refused command's run, start-up included; an outage is retried for 60 s


def _toml(cluster: SecuredCluster, topic: str, **extra: str) -> str:
    lines = "\n".join(f"{key} = {value}" for key, value in extra.items())
    return f"""
[provider]
adapter = "kafka"
queues = 2

[provider.kafka]
bootstrap_servers = "{cluster.bootstrap}"
topic = "{topic}"
group = "{topic}"
idempotent = false
session_timeout = "3s"
security_protocol = "SSL"
ssl_cafile = "certs/ca.pem"
{lines}
"""


def _linked_certificates(cluster: SecuredCluster, directory: Path) -> None:
    (directory / "certs").symlink_to(cluster.certificates.directory)  # relative to the file: certs/...


def _produce(cwd: Path, env: dict[str, str], *config: str) -> None:
    lines = "".join(json.dumps({"n": n, "sensor": f"s{n % 3}"}) + "\n" for n in range(EVENTS))
    result = headrace(
        "produce", *config, "--stream", "sensors", "--key-field", "sensor", "-", cwd=cwd, env=env, stdin=lines
    )
    assert result.returncode == 0, result.stderr


def _read_exactly(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A worker of the configuration reads the produced events, each once, ``headrace status
    --json`` shows it reading both queues (returned), and it leaves."""
    out = cwd / "out.txt"
    env = {**env, "HEADRACE_TEST_OUT": str(out), "HEADRACE_WORKER__STATUS_INTERVAL": "0.5s"}
    worker = start_worker(cwd, "--app", APP, "--name", "w1", env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and worker.poll() is None:
            if out.exists() and len(out.read_text().splitlines()) >= EVENTS:
                break
            time.sleep(0.2)
        time.sleep(0.5)  # a duplicate, were there one, would land meanwhile
        seen = sorted(out.read_text().splitlines()) if out.exists() else []
        assert seen == sorted(f"s{n % 3} {n}" for n in range(EVENTS)), (cwd / "worker.log").read_text()[-3000:]
        while True:
            status = headrace("status", "--json", cwd=cwd, env=env)
            workers = [(w["name"], w["state"], w["queues"]) for w in json_of(status)["workers"]]
            if workers == [("w1", "live", [0, 1])] or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert workers == [("w1", "live", [0, 1])], status.stdout[:3000]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert worker.returncode == 0, (cwd / "worker.log").read_text()[-3000:]
    return status


def test_a_worker_configured_by_a_file_reads_a_tls_topic_exactly_and_every_command_works(
    secured_kafka, kafka_topic, tmp_path
):
    _linked_certificates(secured_kafka, tmp_path)
    (tmp_path / "headrace.toml").write_text(_toml(secured_kafka, kafka_topic))
    env = clean_env()
    _produce(tmp_path, env)
    _read_exactly(tmp_path, env)
    commands = [  # read-only, independent of each other: run at once
        ("state", "--app", APP, "Tally", "--json"),
        ("export", "--stream", "sensors", "--since", "1h", "--value-by", "n", "s.csv"),
        ("dlq", "list", "--json"),
    ]
    with ThreadPoolExecutor(len(commands)) as pool:
        state, exported, letters = pool.map(lambda args: headrace(*args, cwd=tmp_path, env=env), commands)
    assert state.returncode == 0, state.stderr
    saved = sorted((row["stream"], row["fields"]["seen"]) for row in map(json.loads, state.stdout.splitlines()))
    assert saved == [("sensors/s0", 20), ("sensors/s1", 20), ("sensors/s2", 20)]
    assert exported.returncode == 0, exported.stderr
    with (tmp_path / "s.csv").open(newline="") as f:
        assert sorted(int(float(row["value"])) for row in csv.DictReader(f)) == list(range(EVENTS))
    assert (letters.returncode, letters.stdout) == (0, ""), letters.stderr


def test_a_worker_configured_by_environment_variables_alone_reads_over_mutual_tls(secured_kafka, kafka_topic, tmp_path):
    certificates = secured_kafka.certificates
    env = clean_env(
        HEADRACE_PROVIDER__ADAPTER="kafka",
        HEADRACE_PROVIDER__QUEUES="2",
        HEADRACE_PROVIDER__KAFKA__BOOTSTRAP_SERVERS=secured_kafka.mtls,
        HEADRACE_PROVIDER__KAFKA__TOPIC=kafka_topic,
        HEADRACE_PROVIDER__KAFKA__GROUP=kafka_topic,
        HEADRACE_PROVIDER__KAFKA__IDEMPOTENT="false",
        HEADRACE_PROVIDER__KAFKA__SESSION_TIMEOUT="3s",
        HEADRACE_PROVIDER__KAFKA__SECURITY_PROTOCOL="SSL",
        HEADRACE_PROVIDER__KAFKA__SSL_CAFILE=certificates["ca.pem"],
        HEADRACE_PROVIDER__KAFKA__SSL_CERTFILE=certificates["client.pem"],
        HEADRACE_PROVIDER__KAFKA__SSL_KEYFILE=certificates["client-encrypted.key"],
        HEADRACE_PROVIDER__KAFKA__SSL_PASSWORD='{env = "CLIENT_KEY_PASSPHRASE"}',
        CLIENT_KEY_PASSPHRASE=KEY_PASSPHRASE,
    )
    _produce(tmp_path, env)
    status = _read_exactly(tmp_path, env)

    # The key's passphrase is in no output: the worker's log, status, the configuration.
    config = load_config(environ=env)
    shown = [(tmp_path / "worker.log").read_text(), status.stdout, status.stderr, repr(config), str(config)]
    shown.append(repr(config.provider().backend.factory.settings))  # type: ignore[attr-defined]
    assert all(KEY_PASSPHRASE not in text for text in shown)
    assert "Secret('***')" in repr(config)

    # Without the client certificate the broker refuses the handshake: one line, at once.
    del env["HEADRACE_PROVIDER__KAFKA__SSL_CERTFILE"], env["HEADRACE_PROVIDER__KAFKA__SSL_KEYFILE"]
    del env["HEADRACE_PROVIDER__KAFKA__SSL_PASSWORD"]
    began = time.monotonic()
    line = one_error_line(headrace("status", cwd=tmp_path, env=env), "status")
    assert time.monotonic() - began < WITHIN_SECONDS
    assert line == (
        f"Kafka at {secured_kafka.mtls}: the broker requires a client certificate it trusts (none given; "
        "TLSV13_ALERT_CERTIFICATE_REQUIRED): set ssl_certfile and ssl_keyfile to one signed by the CA the broker trusts"
    )


@pytest.mark.parametrize("wrong", ["ca", "host", "plaintext"])
def test_a_wrong_ca_host_or_protocol_is_one_line_within_seconds(secured_kafka, kafka_topic, tmp_path, wrong):
    _linked_certificates(secured_kafka, tmp_path)
    config = _toml(secured_kafka, kafka_topic)
    server = secured_kafka.bootstrap
    if wrong == "ca":
        config = config.replace("certs/ca.pem", "certs/other-ca.pem")
    elif wrong == "host":
        server = secured_kafka.wrong_host
        config = config.replace(secured_kafka.bootstrap, server)
    else:
        config = config.replace('security_protocol = "SSL"\nssl_cafile = "certs/ca.pem"', "")
    (tmp_path / "headrace.toml").write_text(config)
    expected = {
        "ca": f"Kafka at {server}: the broker's certificate is not trusted (unable to get local issuer certificate; "
        f"trusting ssl_cafile ({tmp_path / 'certs/other-ca.pem'})): set ssl_cafile to the PEM file of the CA that "
        "signed the brokers' certificates",
        "host": f"Kafka at {server}: the broker's certificate does not name the host connected to (IP address "
        "mismatch, certificate is not valid for '127.0.0.1'.): connect by a name the certificate carries "
        "(bootstrap_servers), or set ssl_check_hostname = false",
        "plaintext": f"Kafka at {server}: the broker speaks TLS on this port: set security_protocol = SSL (or "
        "SASL_SSL), and ssl_cafile to its CA",
    }[wrong]
    # Each command says it at once: retried as an outage, it would take give_up_after (60 s).
    # The bound leaves room for a loaded machine's interpreter start-up.
    began = time.monotonic()
    assert one_error_line(headrace("status", cwd=tmp_path), "status") == expected
    assert time.monotonic() - began < WITHIN_SECONDS
    if wrong == "ca":  # every command opens its clients alike: one more suffices
        assert one_error_line(headrace("dlq", "list", cwd=tmp_path), "dlq") == expected
    began = time.monotonic()
    worker = start_worker(tmp_path, "--app", APP, env=clean_env(HEADRACE_TEST_OUT=str(tmp_path / "out")))
    worker.wait(timeout=60)
    assert time.monotonic() - began < WITHIN_SECONDS
    log = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 2 and expected in log, log[-3000:]
    assert "Traceback" not in log


def _sasl_config(responder: SaslResponder, mechanism: str, password: str) -> str:
    return f"""
[provider]
adapter = "kafka"

[provider.kafka]
bootstrap_servers = "{responder.bootstrap}"
topic = "readings"
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "{mechanism}"
sasl_plain_username = "app-user"
sasl_plain_password = {password}
"""


def test_a_sasl_login_sends_the_configured_mechanism_and_credentials_and_a_refusal_is_one_line(tmp_path):
    password = "123456"  # a number in looks: it must reach the client as the string it is
    responder = SaslResponder(("PLAIN", "SCRAM-SHA-512"))
    try:
        (tmp_path / "password").write_text(password + "\n")
        (tmp_path / "plain.toml").write_text(_sasl_config(responder, "PLAIN", '{file = "password"}'))
        (tmp_path / "scram.toml").write_text(_sasl_config(responder, "SCRAM-SHA-512", '{env = "KAFKA_PASSWORD"}'))
        env = clean_env(KAFKA_PASSWORD=password)
        outputs = []
        for name, mechanism, source in (
            ("plain", "PLAIN", f"file {tmp_path / 'password'}"),
            ("scram", "SCRAM-SHA-512", "environment variable KAFKA_PASSWORD"),
        ):
            for command in (("status", "--json"), ("produce", "--stream", "s/1", "-")):
                result = headrace(*command, "--config", f"{name}.toml", cwd=tmp_path, env=env, stdin="{}\n")
                outputs += [result.stdout, result.stderr]
                assert one_error_line(result, command[0]) == (
                    f"Kafka at {responder.bootstrap} refused the login of user 'app-user' ({mechanism}: "
                    "Authentication failed: Invalid username or password): check sasl_plain_username and "
                    f"sasl_plain_password (from {source}), and sasl_mechanism"
                )
        # What each login sent: PLAIN the user and the password, SCRAM the user (its password
        # never crosses the wire: the client proves it knows it).
        plain = {login.auth_bytes for login in responder.logins if login.mechanism == "PLAIN"}
        scram = [login.auth_bytes for login in responder.logins if login.mechanism == "SCRAM-SHA-512"]
        assert plain == {b"app-user\x00app-user\x00123456"}
        assert scram and all(first.startswith(b"n,,n=app-user,r=") for first in scram)
        assert all(password not in text for text in outputs)
    finally:
        responder.close()


def test_the_settings_check_what_goes_together_and_never_show_a_secret():
    settings = KafkaSettings(
        "k:9093", "t", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="u", sasl_plain_password="hunter2-secret",
    )  # fmt: skip
    assert "hunter2-secret" not in repr(settings) and "hunter2-secret" not in str(settings)
    assert settings.client_kwargs()["sasl_plain_password"] == "hunter2-secret"  # to the client alone
    refusals = {
        "ssl_cafile applies with security_protocol SSL or SASL_SSL, not PLAINTEXT": {"ssl_cafile": "ca.pem"},
        "sasl_mechanism PLAIN needs sasl_plain_username and sasl_plain_password": {
            "security_protocol": "SASL_SSL",
            "sasl_plain_username": "u",
        },
        "sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider": {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
        },
        "client_options 'max_partition_fetch_bytes' is not one headrace passes on; client_options takes client_id,": {
            "client_options": {"max_partition_fetch_bytes": 1 << 23}
        },
        "consumer_options 'sasl_plain_password' is not one headrace passes on": {
            "consumer_options": {"sasl_plain_password": "hunter2-secret"}
        },
    }
    for message, given in refusals.items():
        with pytest.raises(ConfigurationError) as refused:
            KafkaSettings("k:9093", "t", **given)  # type: ignore[arg-type]
        assert str(refused.value).startswith(message)
        assert "hunter2-secret" not in str(refused.value)
    # A bad secret reference names the key and the variable, not a value.
    env = {
        "HEADRACE_PROVIDER__ADAPTER": "kafka",
        "HEADRACE_PROVIDER__KAFKA__BOOTSTRAP_SERVERS": "k:9093",
        "HEADRACE_PROVIDER__KAFKA__TOPIC": "t",
        "HEADRACE_PROVIDER__KAFKA__SASL_PLAIN_PASSWORD": '{env = "NOT_SET_ANYWHERE"}',
    }
    with pytest.raises(ConfigurationError) as refused:
        load_config(environ=env)
    assert str(refused.value) == (
        "HEADRACE_PROVIDER__KAFKA__SASL_PLAIN_PASSWORD: environment variable 'NOT_SET_ANYWHERE' is not set "
        "(it holds a secret setting)"
    )
    with pytest.raises(ConfigurationError) as refused:
        load_config(environ={**env, "HEADRACE_PROVIDER__KAFKA__SASL_PLAIN_PASWORD": "x"})
    assert "(did you mean 'provider.kafka.sasl_plain_password'?)" in str(refused.value)


def test_a_consumer_option_reaches_the_consumers_alone(secured_kafka, kafka_topic):
    """consumer_options max_partition_fetch_bytes: the admin client and the producers start
    (they would refuse the keyword), the handoff reader takes it over its own default."""
    from streams.backends.kafka.clients import Producers
    from streams.backends.kafka.handoff_log import open_reader

    settings = KafkaSettings(
        secured_kafka.bootstrap, kafka_topic, queues=1, idempotent=False, security_protocol="SSL",
        ssl_cafile=secured_kafka.certificates["ca.pem"], consumer_options={"max_partition_fetch_bytes": 8 << 20},
    )  # fmt: skip

    async def main() -> None:
        assert await ensure_topic(settings, kafka_topic, 1) == 1
        producer = await Producers(settings).start()
        await producer.stop()
        reader = open_reader(settings)
        assert reader._max_partition_fetch_bytes == 8 << 20
        await reader.stop()

    anyio.run(main)
    assert KafkaConnection.of(secured_kafka.bootstrap).consumer_kwargs(group_id=None) == {
        "bootstrap_servers": secured_kafka.bootstrap,
        "request_timeout_ms": 5000,
        "security_protocol": "PLAINTEXT",
        "group_id": None,
    }
    assert repr(Secret("x")) == "Secret('***')"


def test_a_spark_tasks_connection_carries_its_pem_files(secured_kafka, kafka_topic, tmp_path):
    """The connection a Spark executor is given with its task reaches a mutual-TLS cluster
    with none of the files: their contents travel with it, the key's passphrase a Secret."""
    for name in ("ca.pem", "client.pem", "client-encrypted.key"):
        shutil.copy(secured_kafka.certificates[name], tmp_path / name)
    connection = connection_from_spark({
        "kafka.bootstrap.servers": secured_kafka.mtls,
        "kafka.security.protocol": "SSL",
        "kafka.ssl.cafile": str(tmp_path / "ca.pem"),
        "kafka.ssl.certfile": str(tmp_path / "client.pem"),
        "kafka.ssl.keyfile": str(tmp_path / "client-encrypted.key"),
        "kafka.ssl.key.password": KEY_PASSPHRASE,
    })  # fmt: skip
    shutil.rmtree(tmp_path)
    shipped = pickle.loads(pickle.dumps(connection))
    assert KEY_PASSPHRASE not in repr(shipped) and "BEGIN" not in repr(shipped)
    assert anyio.run(ensure_topic, shipped, kafka_topic, 1) == 1


def test_tls_to_a_plaintext_listener_is_named(secured_kafka, kafka_broker, kafka_topic):
    ca = secured_kafka.certificates["ca.pem"]
    connection = KafkaConnection(kafka_broker, request_timeout=1.0, security_protocol="SSL", ssl_cafile=ca)
    began = time.monotonic()
    with pytest.raises(KafkaRefusedError) as refused:
        anyio.run(ensure_topic, connection, kafka_topic, 1)
    assert time.monotonic() - began < 5  # the test broker waits for more bytes: one request timeout
    assert str(refused.value) == (
        f"Kafka at {kafka_broker}: the broker does not speak TLS on this port (it answers plaintext): use its "
        "TLS listener's port, or security_protocol PLAINTEXT / SASL_PLAINTEXT"
    )


async def test_a_refusal_met_while_reading_fails_the_queue_with_its_reason(secured_kafka, kafka_topic):
    """A queue reading over mutual TLS when the broker stops trusting the client's certificate
    (its connections dropped, as by a restart with a new CA): the queue fails with the
    reason, once, instead of reading "no fetch answer" for ever; a queue that starts then
    fails the same way at once."""
    certificates = secured_kafka.certificates
    settings = KafkaSettings(
        secured_kafka.mtls, kafka_topic, queues=1, idempotent=False, group_membership=False,
        outage_after=0.5, security_protocol="SSL", ssl_cafile=certificates["ca.pem"],
        ssl_certfile=certificates["client.pem"], ssl_keyfile=certificates["client.key"],
    )  # fmt: skip
    terminator = secured_kafka.terminators[1]
    trusting = terminator.context
    expected = (
        f"queue-0: Kafka at {secured_kafka.mtls}: the broker requires a client certificate it trusts "
        f"({certificates['client.pem']} was refused; TLSV1_ALERT_UNKNOWN_CA): set ssl_certfile and ssl_keyfile to "
        "one signed by the CA the broker trusts"
    )
    async with KafkaAdapterFactory(settings) as factory:
        adapter = await factory.create_adapter()
        receiver = adapter.create_receiver(QueueId(0))
        await receiver.initialize()
        try:
            terminator.context = certificates.server_context(client_ca="other-ca")
            terminator.drop_connections()
            with anyio.fail_after(20), pytest.raises(QueueFailedError) as failed:
                while True:
                    await receiver.get_queue_messages(10)
            assert str(failed.value) == expected
            again = adapter.create_receiver(QueueId(0))
            with anyio.fail_after(10), pytest.raises(QueueFailedError) as refused:
                await again.initialize()
            assert str(refused.value) == expected
        finally:
            terminator.context = trusting
            await receiver.shutdown()
