"""Topics with schemas on the test broker: records written by confluent-kafka's own Avro, JSON
Schema and Protobuf serializers (librdkafka producing) are read exactly, a schema that evolves
mid-topic included; a record not in the wire format or whose payload does not decode is
dead-lettered with its offset; an id the registry does not know yet, and a registry that is
down, hold the queue back (retried) and dead-letter nothing; each schema is fetched once."""

from __future__ import annotations

import io
import json
import logging
import struct

import anyio
import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from streams import ConfigurationError, StreamId, StreamProvider
from streams.backends.kafka.clients import ensure_topic
from streams.backends.kafka.registry import SchemaRegistry
from streams.runtime.config import load_config
from tests.agents.delivery.conftest import drained
from tests.streams.kafka.schema_registry import SchemaRegistryServer

V1 = {"type": "record", "name": "Reading", "fields": [{"name": "n", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": "string", "default": "c"}]}
V3 = {**V1, "fields": [*V1["fields"], {"name": "scale", "type": "double", "default": 1.0}]}


def write(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """``(key, value)`` records to partition 0, written by confluent-kafka."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    for key, value in records:
        producer.produce(topic, value, key=key, partition=0)
    assert producer.flush(30) == 0


def serialize(serializer, value, topic: str) -> bytes:
    return serializer(value, SerializationContext(topic, MessageField.VALUE))


def reader(bootstrap: str, topic: str, registry: SchemaRegistry | dict | str, records: str) -> tuple:
    provider = StreamProvider.kafka(
        bootstrap,
        topic,
        queues=1,
        records=records,
        schema_registry=registry,
        namespace="readings",
        kafka={"idempotent": False, "group_membership": False},
    )
    seen: list[tuple[str, object, int]] = []

    @provider.implicit("readings")
    class Keep:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch) -> None:
            seen.extend((self.key, e.value, e.offset) for e in batch)

    return provider, seen


async def test_avro_records_with_an_evolving_schema_an_unknown_id_and_bad_payloads(kafka_broker, kafka_topic, caplog):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer() as registry:
        v1 = AvroSerializer(registry.client, json.dumps(V1))
        v2 = AvroSerializer(registry.client, json.dumps(V2))
        first = [serialize(v1, {"n": n}, kafka_topic) for n in range(3)]
        evolved = [serialize(v2, {"n": n, "unit": "k"}, kafka_topic) for n in range(3, 5)]
        assert registry.client.get_latest_version(f"{kafka_topic}-value").version == 2
        payload = io.BytesIO()
        fastavro.schemaless_writer(payload, fastavro.parse_schema(V3), {"n": 9, "scale": 2.5})
        unknown = struct.pack(">bI", 0, 3) + payload.getvalue()  # the id the next schema gets
        write(
            kafka_broker,
            kafka_topic,
            [
                *((b"a", v) for v in first),  # offsets 0-2
                (b"a", b"plain text"),  # 3: not in the wire format
                (b"b", first[0][:5] + b"\xff\xff\xff"),  # 4: a known id, a payload that does not decode
                *((b"b", v) for v in evolved),  # 5-6
                (b"c", unknown),  # 7: an id the registry does not know yet
                (b"c", first[1]),  # 8
            ],
        )
        provider, seen = reader(kafka_broker, kafka_topic, registry.url, "avro")
        async with provider:
            with anyio.fail_after(30):
                while len(seen) < 5:  # all before the unknown id
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # retried meanwhile, never dead-lettered, nothing after it read
            assert sorted(o for *_, o in seen) == [0, 1, 2, 5, 6]
            assert registry.asked[3] >= 2
            v3 = AvroSerializer(registry.client, json.dumps(V3))
            serialize(v3, {"n": 10, "scale": 1.0}, kafka_topic)  # the registry learns id 3
            assert registry.client.get_latest_version(f"{kafka_topic}-value").version == 3
            await drained(provider, 30)
            letters = await provider.dead_letters.list()
    assert sorted(seen, key=lambda s: s[2]) == [
        ("a", {"n": 0}, 0),
        ("a", {"n": 1}, 1),
        ("a", {"n": 2}, 2),
        ("b", {"n": 3, "unit": "k"}, 5),
        ("b", {"n": 4, "unit": "k"}, 6),
        ("c", {"n": 9, "scale": 2.5}, 7),
        ("c", {"n": 1}, 8),
    ]
    assert sorted((d.reason, d.sequence_number) for d in letters) == [("undecodable", 3), ("undecodable", 4)]
    assert "wire format" in {d.sequence_number: d.detail for d in letters}[3]
    assert registry.asked[1] == registry.asked[2] == 1  # each schema fetched once, then cached
    assert any("answered 404 to GET /schemas/ids/3" in r.getMessage() for r in caplog.records)


async def test_json_schema_records_are_read_as_their_documents(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}}}
    docs = [{"n": n, "tag": f"t{n}"} for n in range(4)]
    with SchemaRegistryServer() as registry:
        serializer = JSONSerializer(json.dumps(schema), registry.client)
        write(kafka_broker, kafka_topic, [(b"k", serialize(serializer, d, kafka_topic)) for d in docs])
        provider, seen = reader(kafka_broker, kafka_topic, {"url": registry.url}, "json_schema")
        async with provider:
            await drained(provider, 30)
    assert [v for _, v, _ in seen] == docs


def reading_type():
    """A Protobuf message type made here (no protoc): ``Reading {sensor, ts, tags, unit}``."""
    T = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="reading.proto", package="tests", syntax="proto3")
    message = file.message_type.add(name="Reading")
    message.field.add(name="sensor", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    message.field.add(name="ts", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    message.field.add(name="tags", number=3, type=T.TYPE_STRING, label=T.LABEL_REPEATED)
    message.field.add(name="unit", number=4, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tests.Reading"))


async def test_protobuf_messages_are_read_as_dicts_of_every_field(kafka_broker, kafka_topic):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    Reading = reading_type()
    with SchemaRegistryServer() as registry:
        serializer = ProtobufSerializer(Reading, registry.client, {"use.deprecated.format": False})
        messages = [Reading(sensor="s1", ts=1_700_000_000_123 + n, tags=["x"] * n) for n in range(3)]
        write(kafka_broker, kafka_topic, [(b"s1", serialize(serializer, m, kafka_topic)) for m in messages])
        provider, seen = reader(kafka_broker, kafka_topic, registry.url, "protobuf")
        async with provider:
            await drained(provider, 30)
    assert [v for _, v, _ in seen] == [
        {"sensor": "s1", "ts": 1_700_000_000_123 + n, "tags": ["x"] * n, "unit": ""} for n in range(3)
    ]


async def test_a_registry_that_is_down_holds_the_queue_back_and_loses_nothing(kafka_broker, kafka_topic, caplog):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    with SchemaRegistryServer(credentials=("svc", "pa55-word")) as registry:
        serializer = AvroSerializer(registry.client, json.dumps(V1))
        write(kafka_broker, kafka_topic, [(b"k", serialize(serializer, {"n": n}, kafka_topic)) for n in range(5)])
        registry.down = True
        settings = {"url": registry.url, "username": "svc", "password": "pa55-word"}
        provider, seen = reader(kafka_broker, kafka_topic, settings, "avro")
        async with provider:
            await anyio.sleep(1.5)
            assert seen == [] and await provider.dead_letters.count() == 0
            registry.down = False
            await drained(provider, 30)
            assert await provider.dead_letters.count() == 0
    assert [v["n"] for _, v, _ in seen] == [0, 1, 2, 3, 4]
    assert any("answered 503" in r.getMessage() for r in caplog.records)
    assert "pa55-word" not in caplog.text and "pa55-word" not in repr(provider)


async def test_wrong_credentials_are_named_and_the_password_never_shown(kafka_broker, kafka_topic, caplog):
    assert await ensure_topic(kafka_broker, kafka_topic, 1) == 1
    caplog.set_level(logging.INFO)
    with SchemaRegistryServer(credentials=("svc", "right")) as registry:
        serializer = AvroSerializer(registry.client, json.dumps(V1))
        write(kafka_broker, kafka_topic, [(b"k", serialize(serializer, {"n": 1}, kafka_topic))])
        settings = {"url": registry.url, "username": "svc", "password": "wrong-s3cret"}
        provider, seen = reader(kafka_broker, kafka_topic, settings, "avro")
        async with provider:
            with anyio.fail_after(10):
                while not any("answered 401" in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.05)
    assert seen == []
    line = next(r.getMessage() for r in caplog.records if "answered 401" in r.getMessage())
    assert "check schema_registry username and password" in line
    assert "wrong-s3cret" not in caplog.text


def test_the_registry_is_set_from_the_configuration_with_its_secret(tmp_path):
    (tmp_path / "headrace.toml").write_text(
        '[provider]\nadapter = "kafka"\n\n[provider.kafka]\nbootstrap_servers = "127.0.0.1:9092"\n'
        'topic = "readings"\nrecords = "avro"\nnamespace = "readings"\n\n'
        '[provider.kafka.schema_registry]\nurl = "https://registry.example:8081"\nusername = "svc"\n'
        'password = {env = "REGISTRY_PASSWORD"}\n'
    )
    config = load_config(tmp_path / "headrace.toml", environ={"REGISTRY_PASSWORD": "from-env"})
    registry = SchemaRegistry.of(config.provider_settings.kafka["schema_registry"])
    assert (registry.url, registry.username, registry.password.reveal()) == (
        "https://registry.example:8081",
        "svc",
        "from-env",
    )
    assert "from-env" not in repr(registry)
    with pytest.raises(ConfigurationError, match="needs schema_registry"):
        StreamProvider.kafka("127.0.0.1:9092", "t", records="avro", namespace="x")
    with pytest.raises(ConfigurationError, match="unknown schema_registry setting 'uri'"):
        StreamProvider.kafka("127.0.0.1:9092", "t", records="avro", namespace="x", schema_registry={"uri": "x"})
