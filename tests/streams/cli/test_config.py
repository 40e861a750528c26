"""The configuration: the file, the environment, the checks; and the documented example."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from streams.backends.kafka.adapter import KafkaAdapterFactory
from streams.core.errors import ConfigurationError
from streams.core.options import StreamProviderOptions
from streams.eventtime import Hopping, Tumbling
from streams.runtime.config import load_config
from tests.streams.cli.helpers import ROOT, clean_env, headrace, json_of, one_error_line

DOCS = ROOT / "docs" / "configuration.md"


def write(tmp_path: Path, text: str, name: str = "headrace.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_documented_file_loads_as_it_is(tmp_path):
    full, kafka = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.S)
    config = load_config(write(tmp_path, full), environ={})
    assert config.provider_settings.adapter == "embedded"
    assert config.provider_settings.path == tmp_path / "var" / "headrace"  # relative to the file
    assert config.provider_settings.queues == 8
    assert config.retention.max_age == 7 * 86400 and config.retention.max_records_per_queue is None
    assert config.options.get_queue_msgs_timer_period == 0.1
    assert config.options.stream_inactivity_period == 1800
    assert (config.options.cache_size, config.options.cache_buckets) == (4096, 10)
    assert config.options.slow_consumer_timeout == 30.0
    assert (config.balancer.lease_length, config.balancer.renew_period, config.balancer.refresh_period) == (60, 29, 5)
    policy = config.time.policy
    assert (policy.timestamp_by, policy.out_of_order, policy.late_arrival, policy.early_arrival) == (
        "time",
        5,
        60,
        None,
    )
    assert config.time.window == Tumbling(60.0)
    assert config.spark.read_options("avg") == {
        "path": str(tmp_path / "var" / "headrace"),
        "stream": "avg",
        "maxRecordsPerTrigger": "100000",
        "maxRowsPerSplit": "1000000",
        "startingOffsets": "earliest",
        "trimOnCommit": "true",
    }
    assert (config.worker.app, config.worker.name, config.worker.metrics_port) == (
        "myapp.streams:provider",
        "worker-1",
        9464,
    )
    assert config.worker.metrics_certfile == tmp_path / "tls" / "metrics.pem"
    assert config.provider_settings.file_mode == 0o600

    config = load_config(write(tmp_path, kafka, "kafka.toml"), environ={"KAFKA_PASSWORD": "pass word"})
    kafka_settings = config.provider_settings.kafka
    assert kafka_settings is not None
    assert (kafka_settings["bootstrap_servers"], kafka_settings["topic"], kafka_settings["group_id"]) == (
        "kafka-1:9092,kafka-2:9092",
        "sensor-events",
        "sensor-app",
    )
    assert config.provider_settings.queues == 32
    assert kafka_settings["sasl_plain_password"].reveal() == "pass word"  # from $KAFKA_PASSWORD
    assert kafka_settings["consumer_options"] == {"max_partition_fetch_bytes": 8388608}
    assert kafka_settings["state_dir"] == Path("/var/lib/headrace/state")
    assert kafka_settings["session_timeout"] == 10.0
    assert config.spark.read_options("avg") == {  # the handoff log is on Kafka too, as secured
        "kafka.bootstrap.servers": "kafka-1:9092,kafka-2:9092",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.cafile": "/etc/headrace/kafka-ca.pem",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="sensor-app" password="pass word";',
        "kafka.max.partition.fetch.bytes": "8388608",
        "stream": "avg",
        "maxRowsPerSplit": "1000000",
        "startingOffsets": "earliest",
    }


def test_the_kafka_provider_is_built_without_connecting(tmp_path):
    config = load_config(
        write(
            tmp_path,
            '[provider]\nadapter = "kafka"\nqueues = 4\n[provider.kafka]\n'
            'bootstrap_servers = ["k1:9092", "k2:9092"]\ntopic = "events"\ngroup = "app"\n',
        ),
        environ={
            "HEADRACE_PROVIDER__KAFKA__START": "latest",
            "HEADRACE_PROVIDER__KAFKA__STATE_DIR": "state",
            "HEADRACE_PROVIDER__KAFKA__SESSION_TIMEOUT": "4s",
        },
    )
    provider = config.provider()
    assert isinstance(provider.factory, KafkaAdapterFactory)
    settings = provider.factory.settings
    assert (settings.topic, settings.group_id, settings.start, settings.queues) == ("events", "app", "latest", 4)
    assert settings.state_dir == Path.cwd() / "state"  # the local state stores, from the environment
    assert tuple(settings.bootstrap_servers) == ("k1:9092", "k2:9092")
    assert provider.store is None and not provider.running
    balancer = provider.backend.queue_balancer(provider.balancer_options)
    assert balancer is not None  # the group's members share the partitions
    assert (balancer.session_timeout, balancer.heartbeat_interval) == (4.0, 4.0 / 3)


def test_environment_overrides_the_file_and_reads_toml_values(tmp_path):
    file = write(tmp_path, '[provider]\npath = "store"\nqueues = 4\n[agent]\nshutdown_timeout = "10s"\n')
    config = load_config(
        file,
        environ={
            "HEADRACE_PROVIDER__QUEUES": "16",
            "HEADRACE_AGENT__SHUTDOWN_TIMEOUT": "250ms",
            "HEADRACE_AGENT__FAULT_ON_ERROR": "true",
            "HEADRACE_AGENT__TUNE_GC": "false",
            "HEADRACE_TIME__WINDOW": "hopping:10m:1m",
            "HEADRACE_TIME__LATE_ARRIVAL": "off",
            "HEADRACE_TEST_SOMETHING": "not a setting: no double underscore",
        },
    )
    assert config.provider_settings.queues == 16
    assert config.options.shutdown_timeout == 0.25 and config.options.fault_on_error is True
    assert config.options.tune_gc is False and StreamProviderOptions().tune_gc is None
    assert config.time.window == Hopping(600.0, 60.0) and config.time.policy.late_arrival is None
    assert config.sources["provider.queues"] == "HEADRACE_PROVIDER__QUEUES"
    assert config.sources["provider.path"] == f"{file}: provider.path"
    # the command line's overrides win over both
    assert (
        load_config(
            file, environ={"HEADRACE_PROVIDER__QUEUES": "16"}, overrides={"provider.queues": 2}
        ).provider_settings.queues
        == 2
    )


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        (
            "[cache]\nsise = 10\n",
            {},
            "headrace.toml: unknown key 'cache.sise' (did you mean 'cache.size'?); the keys of [cache] are size, buckets, max_bytes, slow_consumer_timeout",
        ),
        ('app = "x:y"\n', {}, "headrace.toml: unknown key 'app' (did you mean 'worker.app'?)"),
        ("[agnt]\nx = 1\n", {}, "headrace.toml: unknown section [agnt] (key 'x') (did you mean [agent]?)"),
        (
            "",
            {"HEADRACE_AGENT__CACHE_SIZE": "5"},
            "HEADRACE_AGENT__CACHE_SIZE: unknown key 'agent.cache_size' (did you mean 'cache.size'?)",
        ),
        (
            '[agent]\nshutdown_timeout = "5x"\n',
            {},
            "headrace.toml: agent.shutdown_timeout: '5x' is not a duration (like 250ms, 5s, 2m, 1h or seconds)",
        ),
        (
            "[agent]\nshutdown_timeout = -3\n",
            {},
            "headrace.toml: agent.shutdown_timeout: a duration cannot be negative: -3",
        ),
        ("", {"HEADRACE_CACHE__SIZE": "-5"}, "HEADRACE_CACHE__SIZE: must be a whole number >= 1, not -5"),
        ("[provider]\nqueues = 0\n", {}, "headrace.toml: provider.queues: must be a whole number >= 1, not 0"),
        ("[cache]\nsize = 10\nbuckets = 20\n", {}, "headrace.toml: cache.buckets: cannot exceed cache.size (10)"),
        (
            '[balancer]\nlease_length = "10s"\n',
            {},
            "headrace.toml: [balancer] renew_period (29.0 s) must be positive and shorter than lease_length (10.0 s)",
        ),
        ('[time]\nallowed_lateness = "5s"\n', {}, "headrace.toml: time.allowed_lateness: needs time.window"),
        (
            '[time]\nwindow = "rolling:5s"\n',
            {},
            "headrace.toml: time.window takes tumbling:SIZE, hopping:SIZE:HOP, session:GAP or sliding:SPAN, not 'rolling:5s'",
        ),
        (
            '[time]\naction = "keep"\n',
            {},
            "headrace.toml: time.action: must be one of adjust, drop, accept, not 'keep'",
        ),
        (
            '[provider]\nadapter = "kafka"\n',
            {},
            "headrace.toml: provider.adapter: adapter = 'kafka' needs provider.kafka.bootstrap_servers",
        ),
        (
            '[provider.kafka]\ntopic = "t"\n',
            {},
            "headrace.toml: provider.kafka.topic: [provider.kafka] applies to adapter = 'kafka', not 'embedded'",
        ),
        (
            '[provider]\nadapter = "kafka"\n[provider.kafka]\nbootstrap_servers = "k:9092"\ntopic = "t"\n'
            'session_timeout = "0s"\n',
            {},
            "headrace.toml: provider.kafka.session_timeout: must be more than 0, not '0s'",
        ),
        (
            '[provider]\nadapter = "memory"\npath = "s"\n',
            {},
            "headrace.toml: provider.path: the memory adapter has no store: remove path",
        ),
        (
            '[provider]\nadapter = "memory"\n',
            {"HEADRACE_BALANCER__LEASE_LENGTH": "10s"},
            "HEADRACE_BALANCER__LEASE_LENGTH: [balancer] applies to adapter = 'embedded', not 'memory'",
        ),
        (
            '[provider]\nadapter = "kafka"\n[provider.kafka]\nbootstrap_servers = "k:9092"\ntopic = "t"\n[spark]\ntrim_on_commit = true\n',
            {},
            "headrace.toml: spark.trim_on_commit: with provider.adapter 'kafka' the handoff log Spark reads is on Kafka (trimmed by its retention); leave it out",
        ),
        (
            "[worker]\nmetrics_port = 70000\n",
            {},
            "headrace.toml: worker.metrics_port: must be a TCP port number (0 to 65535), not 70000",
        ),
        ("[provider\n", {}, "the config file 'headrace.toml' is not valid TOML"),
    ],
)
def test_each_mistake_names_the_key_and_the_problem(tmp_path, monkeypatch, text, environ, message):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, text)
    with pytest.raises(ConfigurationError) as caught:
        load_config("headrace.toml", environ=environ)
    assert str(caught.value).startswith(message)


def test_a_missing_file_is_an_error_and_the_default_file_is_optional(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="cannot read the config file 'nope.toml': No such file"):
        load_config("nope.toml", environ={})
    with pytest.raises(ConfigurationError, match="cannot read the config file 'gone.toml'"):
        load_config(environ={"HEADRACE_CONFIG": "gone.toml"})
    assert load_config(environ={}).file is None  # no ./headrace.toml: defaults
    write(tmp_path, "[provider]\nqueues = 3\n")
    assert load_config(environ={}).provider_settings.queues == 3  # ./headrace.toml when there is one


def test_the_queue_count_is_checked_against_an_existing_store(tmp_path):
    async def make_store() -> None:
        async with EmbeddedAdapterFactory(tmp_path / "store", queues=4) as factory:
            await factory.create_adapter()

    anyio.run(make_store)
    file = write(tmp_path, '[provider]\npath = "store"\n')
    assert load_config(file, environ={}).provider_settings.queues == 4  # the store's own count
    with pytest.raises(ConfigurationError) as caught:
        load_config(file, environ={"HEADRACE_PROVIDER__QUEUES": "16"})
    assert str(caught.value) == (
        f"HEADRACE_PROVIDER__QUEUES: 16 queues disagree with the store at '{tmp_path / 'store'}', "
        "which has 4 (a store's queue count is fixed): set 4 or leave it out"
    )


def test_commands_report_configuration_mistakes_in_one_line(tmp_path):
    write(tmp_path, "[cache]\nsize = -1\n", "bad.toml")
    error = one_error_line(headrace("status", "--config", "bad.toml", cwd=tmp_path), "status")
    assert error == "bad.toml: cache.size: must be a whole number >= 1, not -1"
    env = clean_env(HEADRACE_AGENT__MAX_READ_BACKOFF="5x")
    error = one_error_line(headrace("dlq", "list", "--path", "s", cwd=tmp_path, env=env), "dlq")
    assert error.startswith("HEADRACE_AGENT__MAX_READ_BACKOFF: '5x' is not a duration")


def test_commands_find_the_store_through_the_environment(tmp_path):
    produced = headrace("produce", "--path", "store", "--create", "--stream", "a/b", cwd=tmp_path, stdin='{"x": 1}\n')
    assert produced.returncode == 0, produced.stderr
    env = clean_env(HEADRACE_PROVIDER__PATH=str(tmp_path / "store"))
    status = json_of(headrace("status", "--json", cwd=tmp_path.parent, env=env))
    assert status["store"] == str(tmp_path / "store")
    assert sum(q["next_sequence"] for q in status["queues"]) == 1
