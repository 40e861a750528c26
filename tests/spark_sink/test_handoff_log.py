"""The handoff log on its own: schema, dense offsets, the caller's transaction, crashes,
orphans, trimming, and the offset arithmetic of the DataSource (no Spark session needed)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from spark_sink import (
    HandoffDataLostError,
    HandoffSchema,
    HandoffSchemaError,
    HandoffStoreNotFoundError,
    ReadOptions,
    UnknownHandoffStreamError,
)
from spark_sink.offsets import admit, admit_records, split_ranges
from streams.backends.embedded.handoff_log import EmbeddedStorage, HandoffLog, HandoffWriter
from streams.backends.embedded.queue_tables import QUEUE_SCHEMA
from streams.backends.embedded.store import EmbeddedStore
from streams.core.clock import wall_time
from streams.core.errors import ConfigurationError
from streams.core.ids import QueueId
from tests.helpers import handoff_batches
from tests.spark_sink.handoff_testkit import STREAM, Handoff


def rows(n: int, first: int = 0) -> list[tuple[float, float, str, str, int, float, bool, int]]:
    return [(60.0 * i, 60.0 * i + 60, "sensors/s1", f"k{i}", i, i / 2, True, 0) for i in range(first, first + n)]


def read_all(handoff: Handoff, partition: int) -> pa.Table:
    """Everything committed in ``partition``, through the same path Spark's tasks read."""
    return pa.Table.from_batches(handoff_batches(handoff.path, STREAM, partition), schema=handoff.writer.schema.arrow)


def test_declared_schema_is_the_arrow_schema_spark_expects() -> None:
    schema = HandoffSchema.of(
        {
            "s": "string",
            "n": "long",
            "i": "int",
            "d": "double",
            "f": "float",
            "b": "boolean",
            "t": "timestamp",
            "raw": "binary",
        }
    )
    spark_arrow = to_arrow_schema(StructType.fromJson(schema.spark_json()), timezone="UTC")
    assert schema.arrow.equals(spark_arrow)
    assert schema.arrow.field("t").type == pa.timestamp("us", tz="UTC")
    assert schema.arrow.field("s").type == pa.string()


def test_rows_are_conformed_from_mappings_tuples_and_arrow() -> None:
    schema = HandoffSchema.events({"temp": "double"})
    moment = datetime(2024, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    by_name = schema.to_table([{"event_time": moment, "stream_id": "s/1", "temp": 20.5}])
    by_position = schema.to_table([(moment.timestamp(), "s/1", 20.5)])
    assert by_name.equals(by_position)
    assert by_name.column("event_time")[0].as_py() == moment
    other_types = pa.table(
        {
            "event_time": pa.array([2_000], pa.timestamp("ns")),
            "stream_id": pa.array(["s/2"], pa.large_string()),
            "temp": pa.array([1], pa.int32()),
        }
    )
    conformed = schema.to_table(other_types)
    assert conformed.schema.equals(schema.arrow)
    assert conformed.to_pylist() == [
        {
            "event_time": datetime(1970, 1, 1, 0, 0, 0, 2, tzinfo=UTC),
            "stream_id": "s/2",
            "temp": 1.0,
        }
    ]


@pytest.mark.parametrize(
    "bad, message",
    [
        ([{"event_time": 0.0, "temp": 1.0}], "lacks column 'stream_id'"),
        ([(0.0, "s/1")], "does not have the 3 declared columns"),
        ([(datetime(2024, 1, 1), "s/1", 1.0)], "has no timezone"),
        ([(0.0, "s/1", "warm")], "column 'temp' \\(double\\)"),
        (pa.table({"stream_id": ["s"], "event_time": [0], "temp": [1.0]}), "do not match"),
        (pa.table({"event_time": [0], "stream_id": ["s"], "temp": [1.0]}), "not a timestamp"),
    ],
)
def test_rows_not_matching_the_declaration_are_refused(bad, message) -> None:
    with pytest.raises(HandoffSchemaError, match=message):
        HandoffSchema.events({"temp": "double"}).to_table(bad)


def test_bad_declarations_are_refused(handoff: Handoff) -> None:
    with pytest.raises(HandoffSchemaError, match="declare one of"):
        HandoffSchema.of({"x": "decimal"})
    with pytest.raises(HandoffSchemaError, match="declared twice"):
        HandoffSchema.of([("key", "string"), ("KEY", "string")])
    with pytest.raises(HandoffSchemaError, match="already declared as"):
        HandoffWriter(handoff.log, STREAM, HandoffSchema.windows({"count": "int"}))
    with pytest.raises(ConfigurationError, match="names a directory"):
        HandoffWriter(handoff.log, "../escape", HandoffSchema.windows({}))


def test_offsets_are_dense_per_partition(handoff: Handoff) -> None:
    ranges = []
    for partition, n in [(0, 3), (1, 2), (0, 4), (QueueId(1), 1), (0, 0)]:
        with handoff.store.transaction() as conn:
            segment = handoff.writer.append(conn, partition, rows(n))
        ranges.append(None if segment is None else (segment.first_offset, segment.end_offset))
    assert ranges == [(0, 3), (0, 2), (3, 7), (2, 3), None]
    assert handoff.writer.end_offsets() == {0: 7, 1: 3}
    assert read_all(handoff, 0).column("count").to_pylist() == [0, 1, 2, 0, 1, 2, 3]


def test_handoff_commits_with_the_callers_checkpoint(file_handoff: Handoff) -> None:
    handoff = file_handoff
    store = handoff.store
    with store.transaction() as conn:
        conn.execute("CREATE TABLE checkpoint_test (queue INTEGER PRIMARY KEY, token TEXT)")
        handoff.writer.append(conn, 0, rows(2))
        conn.execute("INSERT INTO checkpoint_test VALUES (0, '10:0')")
    # The next batch fails after the handoff but before its checkpoint: both roll back.
    with pytest.raises(RuntimeError), store.transaction() as conn:
        handoff.writer.append(conn, 0, rows(3, first=2))
        raise RuntimeError("worker failed before saving its checkpoint")
    assert handoff.writer.end_offsets() == {0: 2}
    with store.snapshot() as conn:
        assert conn.execute("SELECT token FROM checkpoint_test").fetchall() == [("10:0",)]
    assert len(handoff.stream_files()) == 2  # one committed segment, one orphan
    # Replay from the checkpoint hands the same rows off again, at the same offsets, once.
    with store.transaction() as conn:
        handoff.writer.append(conn, 0, rows(3, first=2))
        conn.execute("UPDATE checkpoint_test SET token = '11:0'")
    assert read_all(handoff, 0).column("count").to_pylist() == [0, 1, 2, 3, 4]
    assert handoff.log.remove_orphans(STREAM) == 1
    assert handoff.stream_files() == handoff.indexed_files()


def test_append_needs_the_stores_write_transaction(handoff: Handoff, tmp_path: Path) -> None:
    other = sqlite3.connect(tmp_path / "other.db")
    with pytest.raises(ConfigurationError, match="append needs a connection to"):
        handoff.writer.append(other, 0, rows(1))
    with handoff.store.connection() as conn:
        with pytest.raises(ConfigurationError, match="inside the caller's write transaction"):
            handoff.writer.append(conn, 0, rows(1))
    assert handoff.writer.end_offsets() == {} and handoff.stream_files() == set()


CRASHING_WORKER = """
import os, sys
from spark_sink import Handoff
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter
from streams.backends.embedded.queue_tables import QUEUE_SCHEMA
from streams.backends.embedded.store import EmbeddedStore
store = EmbeddedStore(sys.argv[1])
schema = Handoff(sys.argv[2], {"count": "bigint", "total": "double"}).schema()
writer = HandoffWriter(HandoffLog(store, inline_bytes=int(sys.argv[3])), sys.argv[2], schema)
with store.transaction() as conn:
    writer.append(conn, 0, [(0.0, 60.0, "sensors/s1", "crash", 99, 99.0, True, 0)])
    os._exit(1)  # killed after the segment is written, before the caller's commit
"""


@pytest.mark.parametrize("inline_bytes, orphans", [(0, 1), (1 << 16, 0)], ids=["file", "inline"])
def test_a_worker_killed_before_commit_hands_off_nothing(handoff: Handoff, inline_bytes: int, orphans: int) -> None:
    handoff.append(0, rows(2))
    died = subprocess.run([sys.executable, "-c", CRASHING_WORKER, str(handoff.path), STREAM, str(inline_bytes)])
    assert died.returncode == 1
    assert handoff.writer.end_offsets() == {0: 2}
    assert len(handoff.stream_files() - handoff.indexed_files()) == orphans  # inline: nothing at all
    # A restarted worker is free to write at the same offsets; a dead file stays unread.
    store = EmbeddedStore(handoff.path)
    restarted = HandoffWriter(HandoffLog(store), STREAM, handoff.writer.schema)
    with store.transaction() as conn:
        restarted.append(conn, 0, rows(1, first=2))
    store.close()
    assert read_all(handoff, 0).column("key").to_pylist() == ["k0", "k1", "k2"]
    assert handoff.log.remove_orphans(STREAM) == orphans
    assert handoff.stream_files() == handoff.indexed_files()


def test_trim_deletes_whole_segments_below_the_offset(handoff: Handoff) -> None:
    for n in (3, 3, 3):
        handoff.append(0, rows(n))
    assert handoff.writer.trim(0, 5) == 1  # [0,3) goes; [3,6) holds offset 5: it stays
    assert handoff.log.start_offsets(STREAM) == {0: 3}
    assert handoff.writer.end_offsets() == {0: 9}
    assert len(read_all(handoff, 0)) == 6
    assert handoff.writer.trim(0, 9) == 2
    assert handoff.stream_files() == set() and handoff.log.start_offsets(STREAM) == {0: 9}
    assert handoff.append(0, rows(1)).first_offset == 9
    with pytest.raises(HandoffDataLostError, match="offsets 3..9 .* are not in the log"):
        handoff.log.segments(STREAM, 0, 3, 10)


def test_a_wrong_path_or_stream_says_so(handoff: Handoff, tmp_path: Path) -> None:
    with pytest.raises(HandoffStoreNotFoundError, match="no headrace store at"):
        HandoffLog.open(tmp_path / "nowhere")
    with pytest.raises(UnknownHandoffStreamError, match=f"declared streams: {STREAM}"):
        handoff.log.schema("nope")
    bare = tmp_path / "bare"  # a store with queues, and no handoff declared yet
    with EmbeddedStore(bare) as store:
        store.require_schema("queue", QUEUE_SCHEMA)
        with store.connection():
            pass  # the file and its tables are made on first use
    with pytest.raises(UnknownHandoffStreamError, match="has no handoff streams yet"):
        HandoffLog.open(bare)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"stream": "s"}, "give either option path .* or option kafka.bootstrap.servers .*not neither"),
        ({"path": "/p", "stream": "s", "kafka.bootstrap.servers": "b:9092"}, "not both"),
        ({"stream": "s", "kafka.bootstrap.servers": "b:9092", "trimOnCommit": "true"}, "trimmed by their retention"),
        ({"path": "/p", "stream": "s", "kafka.security.protocol": "SSL"}, "need kafka.bootstrap.servers"),
        ({"path": "/p", "stream": "s", "topicPrefix": "x"}, "topicPrefix applies only with kafka"),
        ({"path": "/p"}, "option stream is required"),
        ({"path": "/p", "stream": "s", "maxRecordsPerTrigger": "0"}, "positive integer"),
        ({"path": "/p", "stream": "s", "startingOffset": "latest"}, "unknown headrace option"),
    ],
)
def test_options_are_checked(options, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ReadOptions.parse(options)


offsets = st.dictionaries(st.integers(0, 5), st.integers(0, 1000), max_size=6)


@given(start=offsets, extra=offsets, max_rows=st.integers(1, 3000))
def test_admission_takes_exactly_the_limit_spread_over_partitions(start, extra, max_rows) -> None:
    end = {p: start.get(p, 0) + extra.get(p, 0) for p in start.keys() | extra.keys()}
    admitted = admit(start, end, max_rows)
    available = sum(end[p] - start.get(p, 0) for p in end)
    assert sum(admitted[p] - start.get(p, 0) for p in end) == min(max_rows, available)
    assert all(start.get(p, 0) <= admitted[p] <= end[p] for p in end)
    if max_rows >= len(end):  # enough for everyone: every partition with data moves
        assert all(admitted[p] > start.get(p, 0) for p in end if end[p] > start.get(p, 0))


record_sizes = st.dictionaries(st.integers(0, 4), st.lists(st.integers(0, 50), max_size=12), max_size=5)


@given(sizes=record_sizes, max_rows=st.integers(1, 200))
def test_admission_of_records_takes_whole_records_within_the_limit(sizes, max_rows) -> None:
    start = {p: 10 for p in sizes}
    end = {p: 10 + len(rows) for p, rows in sizes.items()}
    records = {p: [(10 + i, n) for i, n in enumerate(rows)] for p, rows in sizes.items()}
    admitted = admit_records(start, end, max_rows, records)
    taken = {p: admitted[p] - start[p] for p in sizes}
    rows = sum(sum(sizes[p][: taken[p]]) for p in sizes)
    assert all(0 <= taken[p] <= len(sizes[p]) for p in sizes)
    if any(sizes.values()):
        assert any(taken.values())  # a batch always moves when there is data
    if rows > max_rows:  # only one record over the limit, alone
        assert sum(taken.values()) == 1
    else:  # and nothing that would still fit is left behind
        left = max_rows - rows
        assert all(taken[p] == len(sizes[p]) or sizes[p][taken[p]] > left for p in sizes)


@given(start=offsets, extra=offsets, max_rows=st.integers(1, 700))
def test_split_ranges_cover_each_range_once(start, extra, max_rows) -> None:
    end = {p: start.get(p, 0) + extra.get(p, 0) for p in start.keys() | extra.keys()}
    ranges = split_ranges(start, end, max_rows)
    assert all(0 < r.rows <= max_rows for r in ranges)
    for p in end:
        mine = [r for r in ranges if r.partition == p]
        covered = [o for r in mine for o in range(r.start, r.end)]
        assert covered == list(range(start.get(p, 0), end[p]))


def test_status_shows_each_partitions_offsets_appended_and_committed(handoff: Handoff) -> None:
    from streams.backends.embedded.status import read_status

    for partition, n in [(0, 3), (0, 4), (1, 3)]:  # segments [0, 3) and [3, 7) of partition 0
        with handoff.store.transaction() as conn:
            handoff.writer.append(conn, partition, rows(n))
    [status] = read_status(handoff.store, suspicion_timeout=2.0).handoff
    assert (status.committed_offsets, status.committed_at, status.behind) == (None, None, None)
    # A Spark query's commit at {0: 5, 1: 2}, with trimOnCommit: recorded, then trimmed
    storage = EmbeddedStorage(str(handoff.path))
    try:
        storage.record_commit(STREAM, {0: 5, 1: 2})
        storage.trim(STREAM, {0: 5, 1: 2})
    finally:
        storage.close()
    [status] = read_status(handoff.store, suspicion_timeout=2.0).handoff
    # The segments wholly below the commit are gone; Spark is 2 + 1 rows behind.
    assert (status.stream, status.end_offsets, status.start_offsets, status.retained) == (
        STREAM,
        {0: 7, 1: 3},
        {0: 3, 1: 0},
        7,
    )
    assert (status.committed_offsets, status.behind) == ({0: 5, 1: 2}, 3)
    assert status.committed_at is not None and abs(status.committed_at - wall_time()) < 60
