"""What headrace writes to a topic of a schema registry's format, read back by confluent-kafka's
own consumer (librdkafka) and deserializers: the schema registered under the topic's subject
(``<topic>-value``, or the one given), each record in the wire format with the registered id;
a schema the registry refuses fails with one clear error and writes nothing; a value that does
not match the schema is refused at send; ``headrace produce`` honours the format and says what
is wrong in one line; ``headrace export`` reads such a topic."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streams import ConfigurationError, EncodeError, QueueAdapterError, StreamId, StreamProvider
from streams.backends.kafka.clients import ensure_topic
from streams.backends.kafka.registry import SchemaRegistryError
from streams.backends.kafka.settings import KafkaSettings
from streams.cli import main
from streams.runtime.config import load_config
from tests.streams.kafka.schema_registry import SchemaRegistryServer
from tests.streams.kafka.test_registry_formats import V1, V2, reading_type, serialize, write

KAFKA = {"idempotent": False, "group_membership": False}
TOO_NEW = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": "string"}]}  # no default: incompatible


def read_back(bootstrap: str, topic: str, count: int, deserializer) -> list[tuple[bytes, object]]:
    """``count`` records of partition 0 from its start, read by librdkafka and ``deserializer``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, object]] = []
    try:
        for _ in range(300):
            if len(out) >= count:
                break
            message = consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            value = deserializer(message.value(), SerializationContext(topic, MessageField.VALUE))
            out.append((message.key(), value))
    finally:
        consumer.close()
    return out


def writer(bootstrap: str, topic: str, registry: SchemaRegistryServer, records: str, value_schema, **more):
    return StreamProvider.kafka(
        bootstrap,
        topic,
        queues=1,
        records=records,
        schema_registry=registry.url,
        value_schema=value_schema,
        namespace="readings",
        kafka=KAFKA,
        **more,
    )


async def send_all(provider: StreamProvider, key: str, values: list) -> None:
    async with provider.client():
        stream = provider.get_stream(StreamId("readings", key))
        for value in values:
            await stream.send(value)


async def test_avro_written_by_headrace_is_read_by_confluent_kafka_under_the_topic_subject(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer() as registry:
        await send_all(writer(kafka_broker, kafka_topic, registry, "avro", json.dumps(V1)), "s-1", [{"n": 1}, {"n": 2}])
        # A compatible next version (a field with a default) is version 2 of the same subject.
        await send_all(writer(kafka_broker, kafka_topic, registry, "avro", V2), "s-2", [{"n": 3, "unit": "k"}])
        got = await anyio.to_thread.run_sync(read_back, kafka_broker, kafka_topic, 3, AvroDeserializer(registry.client))
        latest = registry.client.get_latest_version(f"{kafka_topic}-value")
        first = registry.client.get_version(f"{kafka_topic}-value", 1)
    assert got == [(b"s-1", {"n": 1}), (b"s-1", {"n": 2}), (b"s-2", {"n": 3, "unit": "k"})]
    assert (latest.version, json.loads(latest.schema.schema_str)) == (2, V2)
    assert json.loads(first.schema.schema_str) == V1 and first.schema_id != latest.schema_id


async def test_json_schema_and_protobuf_under_a_subject_of_their_own(kafka_broker, kafka_topic):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    Reading = reading_type()
    with SchemaRegistryServer() as registry:
        for suffix, records, value_schema, values in (
            ("-json", "json_schema", schema, [{"n": 1}, {"n": 2}]),
            ("-proto", "protobuf", Reading, [{"sensor": "s", "ts": 7, "tags": ["a"]}, Reading(sensor="t", ts=8)]),
        ):
            topic = kafka_topic + suffix
            assert await ensure_topic(kafka_broker, topic, 1) == 1
            provider = writer(kafka_broker, topic, registry, records, value_schema, subject=f"readings{suffix}")
            await send_all(provider, "k", values)
        json_got = await anyio.to_thread.run_sync(
            read_back, kafka_broker, kafka_topic + "-json", 2, JSONDeserializer(json.dumps(schema))
        )
        proto_got = await anyio.to_thread.run_sync(
            read_back,
            kafka_broker,
            kafka_topic + "-proto",
            2,
            ProtobufDeserializer(Reading, {"use.deprecated.format": False}),
        )
        subjects = {s: registry.client.get_latest_version(s).version for s in ("readings-json", "readings-proto")}
        assert registry.client.get_subjects() == ["readings-json", "readings-proto"]  # no <topic>-value
    assert json_got == [(b"k", {"n": 1}), (b"k", {"n": 2})]
    assert proto_got == [(b"k", Reading(sensor="s", ts=7, tags=["a"])), (b"k", Reading(sensor="t", ts=8))]
    assert subjects == {"readings-json": 1, "readings-proto": 1}


async def test_an_incompatible_schema_is_refused_clearly_and_nothing_is_written(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer() as registry:
        await send_all(writer(kafka_broker, kafka_topic, registry, "avro", V1), "s", [{"n": 1}])
        with pytest.raises(SchemaRegistryError) as refused:
            await send_all(writer(kafka_broker, kafka_topic, registry, "avro", TOO_NEW), "s", [{"n": 2, "unit": "k"}])
        # What was accepted before stays, and nothing was written after it: a record of the
        # refused send (whose client closed before this one started) would come before n=3.
        await send_all(writer(kafka_broker, kafka_topic, registry, "avro", V1), "s", [{"n": 3}])
        got = await anyio.to_thread.run_sync(read_back, kafka_broker, kafka_topic, 2, AvroDeserializer(registry.client))
        assert registry.client.get_latest_version(f"{kafka_topic}-value").version == 1
    message = str(refused.value)
    assert f"refuses value_schema for subject '{kafka_topic}-value'" in message
    assert "answered 409" in message and "incompatible" in message and "nothing was written" in message
    assert "\n" not in message
    assert got == [(b"s", {"n": 1}), (b"s", {"n": 3})]


async def test_a_value_that_does_not_match_the_schema_is_refused_at_send(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer() as registry:
        provider = writer(kafka_broker, kafka_topic, registry, "avro", V1)
        async with provider.client():
            stream = provider.get_stream(StreamId("readings", "s"))
            with pytest.raises(EncodeError, match="cannot encode a value for stream readings/s as avro.*nothing"):
                await stream.send_batch([{"n": 1}, {"n": "one"}])
            await stream.send_batch([{"n": 2}])
        got = await anyio.to_thread.run_sync(read_back, kafka_broker, kafka_topic, 1, AvroDeserializer(registry.client))
    assert got == [(b"s", {"n": 2})]


async def test_a_registry_that_is_down_is_waited_for_before_anything_is_written(kafka_broker, kafka_topic, caplog):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer(credentials=("svc", "pw")) as registry:
        registry.down = True
        settings = {"url": registry.url, "username": "svc", "password": "pw"}
        provider = StreamProvider.kafka(
            kafka_broker,
            kafka_topic,
            queues=1,
            records="avro",
            schema_registry=settings,
            value_schema=V1,
            namespace="readings",
            kafka=KAFKA,
        )

        async def back_up() -> None:
            await anyio.sleep(1.0)
            registry.down = False

        async with anyio.create_task_group() as tg:
            tg.start_soon(back_up)
            await send_all(provider, "s", [{"n": 5}])
        got = await anyio.to_thread.run_sync(read_back, kafka_broker, kafka_topic, 1, AvroDeserializer(registry.client))
    assert got == [(b"s", {"n": 5})]
    away = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert away and all(line.startswith(f"the schema registry at {registry.url} is unreachable") for line in away)
    assert "answered 503" in away[0]


async def test_a_registry_away_too_long_or_refusing_the_credentials_fails_clearly(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer(credentials=("svc", "right")) as registry:

        def provider(password: str, give_up_after: float) -> StreamProvider:
            return StreamProvider.kafka(
                kafka_broker,
                kafka_topic,
                queues=1,
                records="avro",
                schema_registry={"url": registry.url, "username": "svc", "password": password},
                value_schema=V1,
                namespace="readings",
                kafka={**KAFKA, "give_up_after": give_up_after},
            )

        with pytest.raises(SchemaRegistryError) as refused:  # at once: waiting cannot fix it
            with anyio.fail_after(10):
                await send_all(provider("wrong-pw", 60), "s", [{"n": 1}])
        registry.down = True
        with pytest.raises(QueueAdapterError) as away:
            await send_all(provider("right", 1.0), "s", [{"n": 1}])
        assert registry.client.get_subjects() == []
    assert "answered 401" in str(refused.value) and "check schema_registry username and password" in str(refused.value)
    assert "wrong-pw" not in str(refused.value)
    assert f"registering the schema of topic {kafka_topic!r} failed: the schema registry at {registry.url}" in str(
        away.value
    )


def config_file(tmp_path: Path, bootstrap: str, topic: str, registry: str, schema: dict) -> Path:
    (tmp_path / "reading.avsc").write_text(json.dumps(schema))
    path = tmp_path / "headrace.toml"
    path.write_text(
        f'[provider]\nadapter = "kafka"\nqueues = 1\n\n[provider.kafka]\nbootstrap_servers = "{bootstrap}"\n'
        f'topic = "{topic}"\nrecords = "avro"\nnamespace = "readings"\nvalue_schema = "reading.avsc"\n'
        f'idempotent = false\n\n[provider.kafka.schema_registry]\nurl = "{registry}"\n'
    )
    return path


async def test_headrace_produce_writes_avro_and_says_what_is_wrong_in_one_line(
    kafka_broker, kafka_topic, tmp_path, capsys
):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    lines = tmp_path / "readings.jsonl"
    lines.write_text('{"n": 1}\n{"n": 2}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"n": 3}\n{"n": "three"}\n')
    with SchemaRegistryServer() as registry:
        config = config_file(tmp_path, kafka_broker, kafka_topic, registry.url, V1)
        produce = ["produce", "--config", str(config), "--stream", "readings/s-1", "-q"]
        assert await anyio.to_thread.run_sync(main, [*produce, str(lines)]) == 0
        assert "published 2 events" in capsys.readouterr().out
        assert await anyio.to_thread.run_sync(main, [*produce, "--batch-size", "1", str(bad)]) == 2
        mistake = capsys.readouterr().err
        (tmp_path / "v2").mkdir()
        incompatible = config_file(tmp_path / "v2", kafka_broker, kafka_topic, registry.url, TOO_NEW)
        changed = ["produce", "--config", str(incompatible), "--stream", "readings/s-1", "-q", str(lines)]
        assert await anyio.to_thread.run_sync(main, changed) == 2
        refused = capsys.readouterr().err
        got = await anyio.to_thread.run_sync(read_back, kafka_broker, kafka_topic, 3, AvroDeserializer(registry.client))
        subject = registry.client.get_latest_version(f"{kafka_topic}-value")
    assert mistake.count("\n") == 1 and "line 2" in mistake and "as avro" in mistake and "Traceback" not in mistake
    assert refused.count("\n") == 1 and "refuses value_schema" in refused and "Traceback" not in refused
    assert got == [(b"s-1", {"n": 1}), (b"s-1", {"n": 2}), (b"s-1", {"n": 3})]
    assert (subject.version, json.loads(subject.schema.schema_str)) == (1, V1)


async def test_headrace_export_reads_a_registry_topic(kafka_broker, kafka_topic, tmp_path, capsys):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer() as registry:
        serializer = AvroSerializer(registry.client, json.dumps(V1))
        write(kafka_broker, kafka_topic, [(b"s", serialize(serializer, {"n": n}, kafka_topic)) for n in range(4)])
        config = config_file(tmp_path, kafka_broker, kafka_topic, registry.url, V1)
        out = tmp_path / "sample.csv"
        export = ["export", "--config", str(config), "--stream", "readings", "--since", "1h", "--value-by", "n"]
        assert await anyio.to_thread.run_sync(main, [*export, str(out)]) == 0
    rows = out.read_text().splitlines()
    assert rows[0] == "arrival_time,event_time,key,value"
    assert [row.split(",")[2:] for row in rows[1:]] == [["s", f"{n}.0"] for n in range(4)]


async def test_without_value_schema_a_registry_topic_is_read_only(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer() as registry:
        provider = writer(kafka_broker, kafka_topic, registry, "avro", None)
        async with provider.client():
            with pytest.raises(
                EncodeError, match=f"with a value_schema registered under subject '{kafka_topic}-value'"
            ):
                await provider.get_stream(StreamId("readings", "s")).send_batch([{"n": 1}])
        assert registry.client.get_subjects() == []


def test_the_writing_settings_are_checked_and_read_from_the_configuration(tmp_path):
    kafka = {"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "namespace": "x"}
    with pytest.raises(ConfigurationError, match="value_schema is set but records is 'json'"):
        StreamProvider.kafka(**kafka, records="json", value_schema=V1)
    with pytest.raises(ConfigurationError, match="protobuf's value_schema is a generated message class"):
        StreamProvider.kafka(**kafka, records="protobuf", schema_registry="http://r", value_schema="reading.proto")
    with pytest.raises(ConfigurationError, match="value_schema 'missing.avsc' cannot be read"):
        StreamProvider.kafka(**kafka, records="avro", schema_registry="http://r", value_schema="missing.avsc")
    with pytest.raises(ConfigurationError, match="value_schema is not an Avro schema"):
        StreamProvider.kafka(**kafka, records="avro", schema_registry="http://r", value_schema={"type": "recrod"})
    config = load_config(
        config_file(tmp_path, "127.0.0.1:9092", "readings", "http://r", V1),
        environ={"HEADRACE_PROVIDER__KAFKA__SUBJECT": "readings-v"},
    )
    settings = KafkaSettings.named(**config.provider_settings.kafka)
    assert settings.value_schema == str(tmp_path / "reading.avsc")
    assert settings.record_format.subject_of("readings") == "readings-v"
    assert json.loads(settings.record_format._writer[0]) == V1
