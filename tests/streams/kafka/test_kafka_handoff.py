"""The Kafka handoff log on the test broker: appends, marks, and records that do not count.

Spark reads of this log are tested with the other DataSource tests (tests/spark_sink); here is
the writer's side: every window appended once, whoever writes and however often.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pyarrow as pa
import pytest
from confluent_kafka import Producer

from spark_sink.handoff import EventHandoff, Handoff
from streams.backends.kafka import handoff_sink as kafka_sink
from streams.backends.kafka.handoff_log import KafkaHandoffLog
from streams.backends.kafka.handoff_records import PartitionMarks
from streams.backends.kafka.handoff_sink import KafkaHandoffSink
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import Event
from streams.core.errors import HandoffRefusedError, HandoffSchemaError, UnknownHandoffStreamError
from streams.core.ids import SequenceToken, StreamId
from streams.eventtime.results import EventOutcome, WindowResult
from tests.kafka_broker import produce_raw

HANDOFF = Handoff("totals", {"total": "double"})


def settings(bootstrap: str, prefix: str) -> KafkaSettings:
    return KafkaSettings(bootstrap, "unused", queues=2, handoff_prefix=prefix, give_up_after=10)


def windows(key: str, ends: Sequence[int]) -> list[WindowResult]:
    return [WindowResult(key, end - 60, end, float(end), None) for end in ends]


async def valid_rows(bootstrap: str, prefix: str, partition: int) -> list[tuple[str, float]]:
    """(key, window end in s) of every row that counts, in log order."""
    async with KafkaHandoffLog(bootstrap, prefix) as log:
        _, end = await log.offsets(HANDOFF.stream)
        records = await log.records(HANDOFF.stream, partition, 0, end[partition])
    rows = []
    for record in records:
        if record.valid:
            table = pa.Table.from_batches(record.batches())
            for key, stop in zip(table["key"].to_pylist(), table["window_end"].to_pylist(), strict=True):
                rows.append((key, stop.timestamp()))
    return rows


async def test_each_window_is_appended_once_even_by_a_new_sink(kafka_broker: str, kafka_topic: str) -> None:
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:
        assert await sink.write("s/a", "C", 0, windows("a", [60, 120])) == 2
        assert await sink.write("s/a", "C", 0, windows("a", [60, 120, 180])) == 1  # a replay
        assert await sink.write("s/b", "C", 1, windows("b", [60])) == 1
    finally:
        await sink.close()
    restarted = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:  # the marks come back from the log: a replay after a restart writes nothing twice
        assert await restarted.write("s/a", "C", 0, windows("a", [120, 180, 240])) == 1
        assert await restarted.write("s/a", "Other", 0, windows("a", [60])) == 1  # another consumer
    finally:
        await restarted.close()
    assert await valid_rows(kafka_broker, kafka_topic, 0) == [
        ("a", 60.0),
        ("a", 120.0),
        ("a", 180.0),
        ("a", 240.0),
        ("a", 60.0),
    ]
    assert await valid_rows(kafka_broker, kafka_topic, 1) == [("b", 60.0)]


async def test_a_record_landing_after_another_writers_does_not_count(kafka_broker: str, kafka_topic: str) -> None:
    # Two workers that both believe they own partition 0, as during a hand-over.
    old = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    new = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:
        assert await old.write("s/a", "C", 0, windows("a", [60])) == 1
        assert await new.write("s/a", "C", 0, windows("a", [60, 120])) == 1  # knew of 60 on loading
        # The old owner's view is stale: its record lands after the new owner's and does not
        # count; it catches up and appends only what nobody has.
        assert await old.write("s/a", "C", 0, windows("a", [60, 120, 180])) == 1
    finally:
        await old.close()
        await new.close()
    async with KafkaHandoffLog(kafka_broker, kafka_topic) as log:
        _, end = await log.offsets(HANDOFF.stream)
        records = await log.records(HANDOFF.stream, 0, 0, end[0])
    assert [r.valid for r in records] == [True, True, False, True]
    assert await valid_rows(kafka_broker, kafka_topic, 0) == [("a", 60.0), ("a", 120.0), ("a", 180.0)]


async def test_a_foreign_record_never_counts(kafka_broker: str, kafka_topic: str) -> None:
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:
        await produce_raw(kafka_broker, f"{kafka_topic}.handoff.totals", 0, b"not arrow")
        assert await sink.write("s/a", "C", 0, windows("a", [60])) == 1
    finally:
        await sink.close()
    assert await valid_rows(kafka_broker, kafka_topic, 0) == [("a", 60.0)]


async def test_windows_the_columns_cannot_hold_are_refused_by_name_and_nothing_appended(
    kafka_broker: str, kafka_topic: str
) -> None:
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:
        good, bad = windows("a", [60]) + [WindowResult("b", 0, 60, "lots", None)]
        with pytest.raises(HandoffRefusedError) as caught:
            await sink.write("s/a", "C", 0, [good, bad])
        [(item, why)] = caught.value.refused
        assert item is bad and "column 'total'" in why
        assert await sink.write("s/a", "C", 0, [good]) == 1  # what the caller writes next
    finally:
        await sink.close()
    assert await valid_rows(kafka_broker, kafka_topic, 0) == [("a", 60.0)]


async def test_marks_snapshots_equal_reading_the_whole_log(
    kafka_broker: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_sink, "SNAPSHOT_EVERY", 2)
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:
        for end in range(60, 60 * 6, 60):
            await sink.write("s/a", "C", 0, windows("a", [end]))
        await sink.write("s/b", "C", 0, windows("b", [60]))
    finally:
        await sink.close()
    async with KafkaHandoffLog(kafka_broker, kafka_topic) as log:
        loaded = await log.load_marks(HANDOFF.stream, 0)
        _, end = await log.offsets(HANDOFF.stream)
        from_scratch = PartitionMarks()
        for record in await log.records(HANDOFF.stream, 0, 0, end[0]):
            from_scratch.fold(record)
    assert loaded == from_scratch
    assert loaded.marks == {("s/a", "C"): {"a": 300.0}, ("s/b", "C"): {"b": 60.0}}
    assert loaded.end == end[0] == 6
    assert (loaded.unsaved, from_scratch.unsaved) == (0, 6)  # the snapshot spared reading all six


async def test_a_changed_schema_and_an_unknown_stream_are_refused(kafka_broker: str, kafka_topic: str) -> None:
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    await sink.close()
    with pytest.raises(HandoffSchemaError, match=r"already declared as .*total double"):
        await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), Handoff("totals", {"n": "bigint"}))
    async with KafkaHandoffLog(kafka_broker, kafka_topic) as log:
        with pytest.raises(UnknownHandoffStreamError, match=r"declared streams: totals"):
            await log.offsets("nope")


EVENTS = EventHandoff("readings", {"value": "double"})


def outcome(index: int, t: float) -> EventOutcome:
    event = Event({"value": float(index)}, t, t, SequenceToken(1, index), StreamId("s", "a"))
    return EventOutcome(event, 0, None, t, t, "kept", None)


async def test_released_events_are_appended_once_across_a_replay(kafka_broker: str, kafka_topic: str) -> None:
    e0, e1, e2 = outcome(0, 10.0), outcome(1, 12.0), outcome(2, 11.0)
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), EVENTS)
    try:  # e0 and e2 left in timestamp order; e1 (ts 12) is still held, so positions from 1:1 on may replay
        assert await sink.write_events("s/a", "C", 0, [e0, e2], (1, 1)) == 2
    finally:
        await sink.close()
    restarted = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), EVENTS)
    try:  # the replay from 1:1 releases e2 and e1 again: only e1 is new
        assert await restarted.write_events("s/a", "C", 0, [e2, e1], (1, 3)) == 1
        assert await restarted.write_events("s/a", "C", 0, [e0], (1, 3)) == 0
    finally:
        await restarted.close()
    async with KafkaHandoffLog(kafka_broker, kafka_topic) as log:
        _, end = await log.offsets("readings")
        records = await log.records("readings", 0, 0, end[0])
    values = [v for r in records if r.valid for v in pa.Table.from_batches(r.batches())["value"].to_pylist()]
    assert values == [0.0, 2.0, 1.0]


def produce_batched(bootstrap: str, topic: str, partition: int, count: int) -> None:
    """``count`` foreign records in one produce request (confluent-kafka, lingering), the
    writes whose last batch this broker's listed end falls inside."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "enable.idempotence": False})
    for n in range(count):
        producer.produce(topic, f"foreign-{n}".encode(), partition=partition)
    assert producer.flush(30) == 0


async def test_the_logs_end_is_the_records_end_and_closing_after_it_never_waits(
    kafka_broker: str, kafka_topic: str
) -> None:
    topic = f"{kafka_topic}.handoff.totals"
    sink = await KafkaHandoffSink.open(settings(kafka_broker, kafka_topic), HANDOFF)
    try:
        produce_batched(kafka_broker, topic, 0, 20)
        assert await sink.write("s/a", "C", 0, windows("a", [60])) == 1
    finally:
        await sink.close()
    with anyio.fail_after(60):  # each offsets call leaves a long poll at the end; closing after it returns
        for _ in range(5):
            async with KafkaHandoffLog(kafka_broker, kafka_topic) as log:
                starts, ends = await log.offsets(HANDOFF.stream)
            # 21: the sink's append landed where it expected (a short end makes it land
            # invalid and append again, 22)
            assert (starts, ends) == ({0: 0, 1: 0}, {0: 21, 1: 0})
    assert await valid_rows(kafka_broker, kafka_topic, 0) == [("a", 60.0)]
