"""Where Spark is, as ``headrace status`` shows it: a streaming query's commits are recorded in
the handoff log's store (a table in the embedded store, a consumer group on Kafka), so status
shows the offsets Spark committed, when, and how far the appends have run ahead of them."""

from __future__ import annotations

import anyio
from pyspark.sql.types import StructType

from spark_sink.datasource import HeadraceStreamReader
from spark_sink.options import ReadOptions
from streams.adapters.status import HandoffStatus
from streams.backends.embedded.status import read_status
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.status import read_kafka_status
from streams.core.clock import wall_time
from tests.spark_sink.handoff_testkit import PARTITIONS, STREAM, Handoff, KafkaHandoff, by_closing, window_results
from tests.spark_sink.test_datasource import to_parquet, windows_of


def handoff_status(handoff: Handoff | KafkaHandoff) -> HandoffStatus:
    """The stream's row of ``headrace status``, read as the CLI reads it."""
    if isinstance(handoff, Handoff):
        [found] = read_status(handoff.store, suspicion_timeout=10).handoff
        return found
    settings = KafkaSettings(
        handoff.bootstrap, f"{handoff.prefix}.queues", queues=PARTITIONS, handoff_prefix=handoff.prefix
    )
    [found] = anyio.run(lambda: read_kafka_status(settings, suspicion_timeout=10)).handoff
    return found


def test_status_shows_spark_committed_everything_then_behind_by_the_new_appends(spark, any_handoff, events, tmp_path):
    results = window_results(events)
    cut = len(results) // 2
    any_handoff.append_windows(results[:cut])
    before = handoff_status(any_handoff)
    assert (before.committed_offsets, before.committed_at, before.behind) == (None, None, None)

    began = wall_time()
    to_parquet(
        windows_of(any_handoff, spark), tmp_path / "out", tmp_path / "checkpoint", availableNow=True
    ).awaitTermination()
    read = handoff_status(any_handoff)
    assert read.committed_offsets == read.end_offsets and sum(read.end_offsets.values()) > 0
    assert read.behind == 0
    if isinstance(any_handoff, Handoff):
        assert read.committed_at is not None and began <= read.committed_at <= wall_time()
    else:  # the time rides in the offsets' metadata, which Tansu does not keep: unknown, not made up
        assert read.committed_at is None

    # More appended, no query running: Spark's commit stays, and status counts what it has not read.
    any_handoff.append_windows(results[cut:])
    later = handoff_status(any_handoff)
    assert later.committed_offsets == read.committed_offsets and later.committed_at == read.committed_at
    # an offset is a row in the embedded log, an append (a window's rows of one partition) on Kafka
    appended = len(results) - cut if isinstance(any_handoff, Handoff) else len(by_closing(results[cut:]))
    assert later.behind == appended == sum(later.end_offsets.values()) - sum(read.end_offsets.values())


def test_a_commit_that_cannot_be_recorded_leaves_the_query_reading(handoff, events, caplog):
    """Recording is for status only: a store that refuses the write (here a view stands where
    the table would be) logs why, and the reader goes on, recording the next commit once it can."""
    handoff.append_windows(window_results(events)[:50])
    options = ReadOptions.parse({"path": str(handoff.path), "stream": STREAM, "trimOnCommit": "false"})
    reader = HeadraceStreamReader(options, StructType.fromJson(handoff.writer.schema.spark_json()))
    ends = handoff.log.end_offsets(STREAM)
    in_spark = {str(p): o for p, o in ends.items()}
    with handoff.store.transaction() as conn:
        conn.execute(
            "CREATE VIEW handoff_commits AS SELECT 's' AS stream, 0 AS partition, 0 AS committed_offset, 0.0 AS committed_at WHERE 0"
        )
    try:
        reader.commit(in_spark)
        assert "could not record Spark's commit of handoff stream 'sensor-totals'" in caplog.text
        assert handoff_status(handoff).committed_offsets is None
        with handoff.store.transaction() as conn:
            conn.execute("DROP VIEW handoff_commits")
        reader.commit(in_spark)
    finally:
        reader.stop()
    assert handoff_status(handoff).committed_offsets == ends
