"""The fault matrix's Kafka rows: the constructor and ``on_window`` on a Kafka topic of
headrace's records, and a ``RecordFormat``'s ``decode`` on a topic of foreign records; the
same checks as on the other queues (the worker alive, the other stream unchanged, the failed
unit dead-lettered once, every event accounted for)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from streams import StreamId, StreamProvider
from streams.backends.kafka.clients import ensure_topic
from streams.core.records import JsonRecords
from tests.end_to_end.faults import matrix as m
from tests.end_to_end.faults.test_fault_matrix import EXPECTED, _seen, baseline

KAFKA = {"idempotent": False, "group_membership": False}
SEEN: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("failure", m.FAILURES)
@pytest.mark.parametrize("hook", ["constructor", "on_window"])
async def test_a_failing_hook_costs_its_unit_alone_on_kafka(hook, failure, kafka_broker, kafka_topic, caplog):
    good_alone = await baseline(
        "kafka",
        hook,
        lambda: StreamProvider.kafka(kafka_broker, f"{kafka_topic}-base", queues=2, kafka=KAFKA, **m.FAST),
        caplog,
    )
    caplog.clear()
    found = await m.run(
        StreamProvider.kafka(kafka_broker, kafka_topic, queues=2, kafka=KAFKA, **m.FAST), hook, failure, caplog
    )
    assert found.alive
    assert found.outputs["good"] == good_alone["good"]
    assert found.other_letters == 0
    assert dict(found.letters) == EXPECTED[hook, failure]
    assert found.counted == {"good": m.EVENTS, "bad": m.EVENTS}
    SEEN[hook, failure] = _seen(found, hook, failure)


class Decoding(JsonRecords):
    """JSON records whose decoding fails on the poison record as the fault says."""

    name = "json, failing on the poison"

    def __init__(self, failure: str) -> None:
        super().__init__()
        self.failure = failure
        self.stalled = False

    def decode(self, data: bytes) -> object:
        value = super().decode(data)
        if not m.is_poison(value):
            return value
        if self.failure == "raises":
            raise ValueError("decode failed on the poison")
        if self.failure == "hangs" and not self.stalled:
            self.stalled = True
            time.sleep(m.LIMIT * 1.5)  # sync: it cannot be cut short
            return value
        return {"n": value["n"], "as": "nonsense"}  # not what the producer wrote


@pytest.mark.parametrize("failure", m.FAILURES)
async def test_a_failing_decoder_costs_its_record_alone(failure, kafka_broker, kafka_topic, caplog):
    assert await ensure_topic(kafka_broker, kafka_topic, 2) == 2
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await producer.start()
    try:
        for key in ("good", "bad"):
            for value in m.events(key == "bad"):
                await producer.send_and_wait(kafka_topic, json.dumps(value).encode(), key=key.encode(), partition=0)
    finally:
        await producer.stop()
    provider = StreamProvider.kafka(
        kafka_broker, kafka_topic, queues=2, records=Decoding(failure), namespace="ns", kafka=KAFKA, **m.FAST
    )
    got: dict[str, list[int]] = {}

    @provider.implicit("ns")
    class Collect:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            got.setdefault(self.key, []).extend(v["n"] for v in batch.values)

    async with provider:
        with anyio.fail_after(30):
            while sum(map(len, got.values())) + await provider.dead_letters.count() < 2 * m.EVENTS:
                await anyio.sleep(0.05)
        letters = await provider.dead_letters.list()
        alive = all(m.provider_agent_running(a) for a in provider.agents)
    assert alive
    assert got["good"] == list(range(m.EVENTS))  # the other stream, unchanged
    expected = {"raises": [m.POISON], "hangs": [], "nonsense": []}[failure]
    assert [json.loads(x.payload)["n"] for x in letters if x.reason == "undecodable"] == expected
    assert len(letters) == len(expected)
    assert len(got["bad"]) + len(letters) == m.EVENTS  # every record accounted for once
    SEEN["RecordFormat.decode", failure] = (
        f"{len(letters)} undecodable (raw bytes kept)" if letters else "no letter"
    ) + {
        "raises": "",
        "hangs": "; sync code cannot be cut short: taken late, nothing lost",
        "nonsense": "; delivered as decoded (a value is not the runtime's to judge)",
    }[failure]


@pytest.fixture(scope="module", autouse=True)
def print_the_rows(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the module's cases: its rows of the matrix, on the terminal."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None and SEEN:
        with capture.global_and_fixture_disabled():  # teardown output is captured otherwise
            reporter.write_line("")
            for (hook, failure), text in SEEN.items():
                reporter.write_line(f"{hook:<19} {failure:<9} {text} (Kafka)")
