"""How a receiver groups one-event records by stream, and which offsets an
acknowledgement commits (no broker: records as aiokafka hands them over)."""

from __future__ import annotations

import math

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from streams.backends.kafka.records import GroupedRecords
from streams.core.errors import DecodeError
from streams.core.ids import QueueId, StreamId
from streams.core.records import JsonRecords, record_format

A, B = TopicPartition("a", 0), TopicPartition("b", 0)


def record(tp: TopicPartition, offset: int, key: bytes | None, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 1000 * offset, 0, key, value, None, 0, 0, ())


def reader(*tps: TopicPartition, at: dict | None = None) -> GroupedRecords:
    grouped = GroupedRecords(QueueId(0), tps, {tp.topic: tp.topic.upper() for tp in tps}, record_format("json"))
    grouped.start(at or {tp: 0 for tp in tps})
    return grouped


def test_one_message_per_stream_at_its_first_record_and_dead_letters_in_between():
    grouped = reader(A, at={A: 10})
    records = [
        record(A, 10, b"x", b"1"),
        record(A, 11, b"y", b"2"),
        record(A, 12, b"x", b"bad"),
        record(A, 13, b"x", b"3"),
        record(A, 14, b"y", b"4"),
    ]
    messages = grouped.messages({A: records})
    assert [m.sequence_number for m in messages] == [10, 11, 12]  # positions are offsets
    x, y, bad = (m.decoded for m in messages)
    assert (x.stream_id, x.values, x.event_times) == (StreamId("A", "x"), [1, 3], [10.0, 13.0])
    assert (y.stream_id, y.values) == (StreamId("A", "y"), [2, 4])
    assert isinstance(bad, DecodeError) and messages[2].payload == b"bad"
    with pytest.raises(DecodeError, match="a partition 0 offset 12 does not decode as json"):
        messages[2].container()
    # done with x (10): record 11 (y) is not, so offset 11 is what is safe to commit
    assert grouped.acknowledged(10) == {A: 11}
    assert grouped.acknowledged(11) == {A: 12}
    assert grouped.acknowledged(12) == {A: 15}  # all of it: the read position


def test_several_topics_get_growing_positions_and_commit_each_their_own_offsets():
    grouped = reader(A, B, at={A: 100, B: 5})
    first = grouped.messages(
        {A: [record(A, 100, b"k", b"1"), record(A, 101, b"k", b"2")], B: [record(B, 5, b"k", b"3")]}
    )
    second = grouped.messages({B: [record(B, 6, b"j", b"4")], A: [record(A, 102, b"k", b"5")]})
    positions = [m.sequence_number for m in first + second]
    assert positions == sorted(positions) and len(set(positions)) == 4
    assert [m.decoded.stream_id for m in first + second] == [
        StreamId("A", "k"),
        StreamId("B", "k"),
        StreamId("A", "k"),
        StreamId("B", "j"),
    ]
    assert grouped.acknowledged(positions[0]) == {A: 102, B: 5}
    assert grouped.acknowledged(positions[1]) == {A: 102, B: 6}
    assert grouped.acknowledged(positions[3]) == {A: 103, B: 7}


def test_keyless_records_are_keyed_by_their_partition_without_a_key_field():
    grouped = reader(A)
    [message] = grouped.messages({A: [record(A, 0, None, b"1"), record(A, 1, None, b"2")]})
    assert (message.decoded.stream_id, message.decoded.values) == (StreamId("A", "0"), [1, 2])


def test_an_events_saved_position_is_its_record_however_the_reads_were_grouped():
    """A saved state's position (the last event it took) picks out the same records in a
    replay that starts elsewhere and groups them otherwise."""
    records = [record(A, n, b"xy"[n % 2 : n % 2 + 1], str(n).encode()) for n in range(10, 30)]

    def read(start: int, sizes: list[int]) -> list:
        grouped = reader(A, at={A: start})
        rest = [r for r in records if r.offset >= start]
        batches = []
        while rest:
            take, rest = rest[: sizes[0]], rest[sizes[0] :]
            sizes = sizes[1:] or sizes
            batches += [m.decoded.events(m.sequence_number) for m in grouped.messages({A: take})]
        return batches

    first = read(10, [3])  # the first run: three records a read
    x_taken = [b for b in first if b.stream_id.key == "x"][:3]  # x's records 10, 12, 14, 16, 18
    position = x_taken[-1].last_position()
    assert str(position) == "18:0" and [e.offset for e in x_taken[-1]] == [16, 18]
    assert {e.offset: str(e.token) for e in x_taken[-1]} == {16: "16:0", 18: "16:1"}  # tokens: the reads
    for start, sizes in ((10, [20]), (13, [7, 1]), (17, [2])):  # replays from older offsets, grouped otherwise
        replay = [b.after(position) for b in read(start, sizes) if b.stream_id.key == "x"]
        assert [v for b in replay for v in b.values] == [20, 22, 24, 26, 28], (start, sizes)
        assert all(b.last_position().sequence_number > 18 for b in replay if len(b))


def test_each_record_keeps_the_queues_clock_just_before_it_across_reads():
    # Timestamps are offset seconds. Read one: x at 0 and 1, y at 2; read two: y at 3, x at 4.
    grouped = reader(A)
    x, y = (m.decoded for m in grouped.messages({A: [record(A, n, key, b"1") for n, key in enumerate(b"xxy")]}))
    assert (x.clock_before, x.clocks, y.clock_before, y.clocks) == (None, [-math.inf, 0.0], 1.0, [1.0])
    y2, x2 = (m.decoded for m in grouped.messages({A: [record(A, 3, b"y", b"1"), record(A, 4, b"x", b"1")]}))
    assert (y2.clock_before, y2.clocks, x2.clock_before, x2.clocks) == (2.0, [2.0], 3.0, [3.0])
    assert [(clock, [e.offset for e in run]) for clock, run in x.events(0).clock_runs()] == [(None, [0, 1])]
    # Read again from 0 (a restart), y standing between x's records: x is caught up with
    # the clock before its second record separately; the clock before the first is unknown.
    grouped.start({A: 0})
    [x3, _] = (m.decoded for m in grouped.messages({A: [record(A, n, key, b"1") for n, key in enumerate(b"xyx")]}))
    assert x3.clock_before is None
    assert [(clock, [e.offset for e in run]) for clock, run in x3.events(0).clock_runs()] == [(None, [0]), (1.0, [2])]


def test_what_the_first_decoder_refuses_the_formats_own_decode_reads_or_letters():
    """JSON records are read by msgspec's decoder, called a record at a time with nothing
    around it; what it refuses, Python's json (the format's decode) has the last word on."""
    grouped = reader(A)
    records = [
        record(A, 0, b"x", b'{"t": NaN}'),  # msgspec refuses it; Python's json reads it
        record(A, 1, b"x", b"{not json"),
        record(A, 2, b"\xff", b"2"),  # a key that is not UTF-8
        record(A, 3, b"x", None),  # a tombstone
        record(A, 4, b"x", b"4"),
    ]
    x, *letters = (m.decoded for m in grouped.messages({A: records}))
    assert x.values[1:] == [4] and math.isnan(x.values[0]["t"]) and x.offsets == [0, 4]
    assert [(type(e), e.offset) for e in letters] == [(DecodeError, 1), (DecodeError, 2), (DecodeError, 3)]
    assert "does not decode as json: JSONDecodeError" in str(letters[0])
    assert "has a key that is not UTF-8" in str(letters[1]) and "no value (a tombstone)" in str(letters[2])


def test_a_format_of_ones_own_decodes_each_record_once_the_bad_ones_too():
    calls: list[bytes] = []

    class Upper:
        name = "upper"

        def decode(self, data: bytes) -> str:
            calls.append(data)
            if not data.isupper():
                raise ValueError("not upper case")
            return data.decode()

        def encode(self, value: str) -> bytes:
            return value.encode()

    grouped = GroupedRecords(QueueId(0), [A], {A.topic: "A"}, record_format(Upper()))
    grouped.start({A: 0})
    messages = grouped.messages({A: [record(A, 0, b"k", b"AB"), record(A, 1, b"k", b"cd"), record(A, 2, b"k", b"EF")]})
    assert calls == [b"AB", b"cd", b"EF"]
    assert messages[0].decoded.values == ["AB", "EF"]
    assert "does not decode as upper: ValueError('not upper case')" in str(messages[1].decoded)


def test_a_json_format_whose_decode_is_its_own_has_every_record_go_through_it():
    # msgspec's decoder is JsonRecords' shortcut: a subclass that overrides decode (to check,
    # reshape or refuse records) must be the one that reads each record, not be skipped.
    calls: list[bytes] = []

    class Checked(JsonRecords):
        name = "checked json"

        def decode(self, data: bytes) -> object:
            calls.append(data)
            value = super().decode(data)
            if value == 2:
                raise ValueError("two is refused")
            return {"v": value}

    grouped = GroupedRecords(QueueId(0), [A], {A.topic: "A"}, Checked())
    grouped.start({A: 0})
    messages = grouped.messages({A: [record(A, i, b"k", b"%d" % i) for i in range(4)]})
    assert calls == [b"0", b"1", b"2", b"3"]
    assert messages[0].decoded.values == [{"v": 0}, {"v": 1}, {"v": 3}]
    assert "does not decode as checked json: ValueError('two is refused')" in str(messages[1].decoded)
