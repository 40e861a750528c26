from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest

from streams import BatchContainer, BatchKind, DecodeError, EncodeError, QueueId, SequenceToken, StreamId
from streams.adapters.mapper import HashRingQueueMapper


def test_stream_id_hash_is_stable_across_processes():
    code = "from streams import StreamId; print(StreamId('sensors', 's-1').uniform_hash)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    ).stdout
    assert int(out) == StreamId("sensors", "s-1").uniform_hash
    assert StreamId("sensors", "s-1") == StreamId("sensors", "s-1")
    assert StreamId("sensors", 7) == StreamId("sensors", "7")


def test_stream_id_rejects_bad_parts():
    with pytest.raises(TypeError, match="namespace"):
        StreamId("", "x")
    with pytest.raises(TypeError, match="key"):
        StreamId("ns", 1.5)  # type: ignore[arg-type]
    assert StreamId.parse("a/b/c") == StreamId("a", "b/c")
    with pytest.raises(ValueError):
        StreamId.parse("nokey")


def test_hash_ring_mapper_spreads_streams_and_is_deterministic():
    mapper = HashRingQueueMapper(8)
    counts = {q: 0 for q in mapper.get_all_queues()}
    for i in range(8000):
        counts[mapper.get_queue_for_stream(StreamId("ns", str(i)))] += 1
    assert set(counts) == {QueueId(i) for i in range(8)}
    assert min(counts.values()) > 700 and max(counts.values()) < 1300
    again = HashRingQueueMapper(8)
    assert all(
        again.get_queue_for_stream(StreamId("ns", str(i))) == mapper.get_queue_for_stream(StreamId("ns", str(i)))
        for i in range(100)
    )


def test_token_order_and_parse():
    assert SequenceToken(1, 5) < SequenceToken(2, 0) < SequenceToken(2, 1)
    assert SequenceToken.parse("12:3") == SequenceToken(12, 3)
    with pytest.raises(ValueError, match="SEQ:INDEX"):
        SequenceToken.parse("x")


def test_batch_container_round_trip_with_event_times():
    sid = StreamId("ns", "k")
    c = BatchContainer(sid, BatchKind.DATA, 100.0, [{"a": 1}, [1, 2], "x"], [10.0, None, 12.5])
    back = BatchContainer.decode(c.encode())
    events = back.events(42)
    assert [e.value for e in events] == [{"a": 1}, [1, 2], "x"]
    assert [e.event_time for e in events] == [10.0, 100.0, 12.5]
    assert [str(e.token) for e in events] == ["42:0", "42:1", "42:2"]
    assert all(e.stream_id == sid and e.arrival_time == 100.0 for e in events)


def test_unencodable_value_names_its_type():
    c = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 1.0, [{"ok": 1, "bad": {1, 2}}])
    with pytest.raises(EncodeError, match=r"value\[0\]\['bad'\] of type 'set'"):
        c.encode()


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1garbage",
        msgpack.packb({"not": "a container"}),
        msgpack.packb(["hr1", 9, "n", "k", 1.0, [], None]),
        msgpack.packb(["hr1", 0, "n", "k", 1.0, [1, 2], [1.0]]),
    ],
)
def test_foreign_or_corrupt_bytes_are_refused(payload):
    with pytest.raises(DecodeError):
        BatchContainer.decode(payload)


@pytest.mark.parametrize("count", [0, 3, 2000])  # the last one is past the whole-decode limit
def test_small_and_large_containers_decode_alike(count):
    from streams.core.batch import BatchContainer as C

    sid = StreamId("ns", "k")
    times = [float(i) if i % 2 else None for i in range(count)]
    original = C(sid, BatchKind.DATA, 100.0, [{"i": i, "s": "x" * (i % 7)} for i in range(count)], times)
    payload = original.encode()
    assert C.decode(payload) == C._decode_header(payload) == original
    assert C.decode(payload).payload == payload


def test_encode_batch_gives_what_a_container_encodes():
    from streams.core.codec import encode_batch

    sid = StreamId("ns", "k")
    values, times = ("a", 1, [2.5]), [1.0, None, 3.0]
    assert (
        encode_batch(sid, BatchKind.DATA, 5.0, values, times)
        == BatchContainer(sid, BatchKind.DATA, 5.0, list(values), times).encode()
    )
    with pytest.raises(EncodeError, match=r"value\[0\] of type 'set'"):
        encode_batch(sid, BatchKind.DATA, 5.0, [{1}])


def test_decoded_stream_ids_are_the_interned_ones():
    from streams.core.codec import interned

    sid = StreamId("ns", "interned")
    payload = BatchContainer(sid, BatchKind.DATA, 1.0, [1]).encode()
    assert BatchContainer.decode(payload).stream_id is interned(sid) is interned(StreamId("ns", "interned"))


def test_a_full_intern_table_keeps_the_ids_something_holds(monkeypatch):
    # More streams than the table's limit in one namespace: the ids a worker's tables hold
    # stay the ones decoding gives (a lookup by them skips StreamId.__eq__); the rest go.
    from streams.core import codec

    monkeypatch.setattr(codec, "_MAX_INTERNED", 100)
    monkeypatch.setattr(codec, "_STREAM_IDS", {})
    monkeypatch.setattr(codec, "_LIMITS", {})
    held = {f"h{i}": codec.stream_id_of("sweep", f"h{i}") for i in range(30)}
    for i in range(70):
        codec.stream_id_of("sweep", f"gone{i}")
    assert len(codec._STREAM_IDS["sweep"]) == 100
    codec.stream_id_of("sweep", "one more")  # the table is full: swept first
    assert sorted(codec._STREAM_IDS["sweep"]) == sorted([*held, "one more"])
    assert all(codec.stream_id_of("sweep", key) is sid for key, sid in held.items())
    # Most of a full table held: the namespace's limit grows to twice what is held.
    held |= {f"more{i}": codec.stream_id_of("sweep", f"more{i}") for i in range(69)}
    codec.stream_id_of("sweep", "full again")
    assert codec._LIMITS["sweep"] == 2 * 99 and len(codec._STREAM_IDS["sweep"]) == 100
    assert all(codec.stream_id_of("sweep", key) is sid for key, sid in held.items())


def test_int_beyond_64_bits_is_named():
    c = BatchContainer(StreamId("ns", "k"), BatchKind.DATA, 1.0, [1, 2**70])
    with pytest.raises(EncodeError, match=r"value\[1\], an int outside msgpack's 64-bit range"):
        c.encode()
