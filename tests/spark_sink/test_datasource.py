"""The ``headrace`` DataSource in a real Spark session: batch and streaming reads of handed-off
window results equal Spark's own ``groupBy(window(...))`` over the raw events, across query
stops, restarts and failed batches, with admission control and trimming."""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql.types import StructType

from spark_sink.datasource import HeadraceDataSource
from spark_sink.offsets import OffsetRange
from spark_sink.options import ReadOptions
from spark_sink.storage import HandoffStorage
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter
from streams.backends.embedded.handoff_retention import compact
from streams.backends.kafka import handoff_storage
from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.handoff_records import HandoffTopics
from streams.backends.kafka.handoff_storage import KafkaSplit, KafkaStorage
from streams.core.errors import HandoffSchemaError, UnknownHandoffStreamError
from tests.spark_sink.handoff_testkit import (
    PARTITIONS,
    STREAM,
    Handoff,
    KafkaHandoff,
    WindowRow,
    by_closing,
    collect_windows,
    window_results,
)


def batch_of(handoff: Handoff | KafkaHandoff, spark):
    return spark.read.format("headrace").options(**handoff.options()).option("stream", STREAM).load()


def windows_of(handoff: Handoff | KafkaHandoff, spark, **options: str):
    return (
        spark.readStream.format("headrace")
        .options(**handoff.options())
        .option("stream", STREAM)
        .options(**options)
        .load()
    )


def to_parquet(df, out: Path, checkpoint: Path, **trigger):
    return (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def batch_rows(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_batch_read_equals_spark_windows_over_the_raw_events(spark, any_handoff, events, expected):
    any_handoff.append_windows(window_results(events))
    df = batch_of(any_handoff, spark)
    assert df.schema.simpleString() == (
        "struct<window_start:timestamp,window_end:timestamp,stream_id:string,key:string,count:bigint,total:double,"
        "final:boolean,revision:bigint>"
    )
    assert collect_windows(df) == expected


def test_a_read_over_inline_file_and_compacted_segments_equals_spark_windows(
    spark, handoff, events, expected, tmp_path
):
    results = window_results(events)
    third = len(results) // 3
    handoff.append_windows(results[:third])  # inline, then merged into files
    for partition in handoff.writer.end_offsets():
        assert compact(handoff.log, STREAM, partition, handoff.writer.schema.arrow) > 0
    files_only = HandoffWriter(HandoffLog(handoff.store, inline_bytes=0), STREAM, handoff.writer.schema)
    Handoff(handoff.path, handoff.store, files_only.log, files_only).append_windows(results[third : 2 * third])
    handoff.append_windows(results[2 * third :])  # inline
    kinds = {s.inline for p, e in handoff.writer.end_offsets().items() for s in handoff.log.segments(STREAM, p, 0, e)}
    assert kinds == {True, False}
    assert collect_windows(batch_of(handoff, spark)) == expected
    # A stream that reads a few hundred rows at a time while new appends are compacted
    # between its batches: the next batch's offsets land in merged files.
    seen: list = []

    def each(df, batch_id: int) -> None:
        seen.extend(collect_windows(df))
        for partition in handoff.writer.end_offsets():
            compact(handoff.log, STREAM, partition, handoff.writer.schema.arrow)

    query = (
        windows_of(handoff, spark, maxRecordsPerTrigger="300")
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(seen) == expected


def test_a_stream_trimming_on_commit_reads_every_window_once_while_its_files_are_compacted(
    spark, file_handoff, events, expected, tmp_path
):
    results = window_results(events)
    half = len(results) // 2
    file_handoff.append_windows(results[:half])
    stop, compacted = threading.Event(), [0]

    def compacting() -> None:  # as the appender does, but into files of 40 rows and all the time
        while not stop.is_set():
            for partition in file_handoff.writer.end_offsets():
                compacted[0] += compact(file_handoff.log, STREAM, partition, file_handoff.writer.schema.arrow, 40)

    thread = threading.Thread(target=compacting)
    thread.start()
    try:
        query = (
            windows_of(file_handoff, spark, maxRecordsPerTrigger="30")  # trimOnCommit: the default
            .writeStream.format("memory")
            .queryName("compacted_under_a_stream")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="50 milliseconds")
            .start()
        )
        query.processAllAvailable()
        file_handoff.append_windows(results[half:])
        query.processAllAvailable()
        query.stop()
    finally:
        stop.set()
        thread.join()
    assert compacted[0] > 0 and sum(file_handoff.log.start_offsets(STREAM).values()) > 0  # both happened
    assert collect_windows(spark.table("compacted_under_a_stream")) == expected
    file_handoff.log.remove_orphans(STREAM)
    assert file_handoff.stream_files() == file_handoff.indexed_files()


def test_stream_stopped_and_restarted_delivers_every_window_once(spark, any_handoff, events, expected, tmp_path):
    results = window_results(events)
    read_in_two(spark, any_handoff, results, len(results) // 3, tmp_path)
    assert collect_windows(spark.read.parquet(str(tmp_path / "out"))) == expected


def read_in_two(spark, handoff, results, cut: int, tmp_path: Path, between=lambda: None) -> None:
    """Hand off ``results[:cut]`` (then run ``between``) and read them with an ``availableNow``
    query into parquet at ``tmp_path / "out"``; hand off the rest and read on from the same
    checkpoint. Each query must read exactly its share."""
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    handoff.append_windows(results[:cut])
    between()
    first = to_parquet(windows_of(handoff, spark), out, checkpoint, availableNow=True)
    first.awaitTermination()
    handoff.append_windows(results[cut:])
    second = to_parquet(windows_of(handoff, spark), out, checkpoint, availableNow=True)
    second.awaitTermination()
    assert sum(batch_rows(first)) == cut
    assert sum(batch_rows(second)) == len(results) - cut


def admitted_120_at_a_time(spark, handoff: Handoff | KafkaHandoff, table: str, checkpoint: Path):
    """Everything handed off, read with maxRecordsPerTrigger=120 into memory table ``table``."""
    query = (
        windows_of(handoff, spark, maxRecordsPerTrigger="120")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def test_max_records_per_trigger_bounds_each_batch_and_commits_trim(spark, handoff, events, expected, tmp_path):
    results = window_results(events)
    handoff.append_windows(results)
    query = admitted_120_at_a_time(spark, handoff, "admission", tmp_path / "checkpoint")
    sizes = batch_rows(query)
    assert max(sizes) <= 120 and sum(sizes) == len(results)
    assert len(sizes) == -(-len(results) // 120)  # every batch full but the last
    assert collect_windows(spark.table("admission")) == expected
    # Spark committed all batches but perhaps the last: their segments are gone, the rest stays.
    progress = json.loads(query.lastProgress["sources"][0]["endOffset"])
    last_end = {int(p): o for p, o in progress.items()}
    start = handoff.log.start_offsets(STREAM)
    assert sum(start.values()) > 0
    assert all(start[p] <= last_end[p] for p in start)
    assert handoff.stream_files() == handoff.indexed_files()


def test_processing_time_query_stopped_mid_stream_loses_and_repeats_nothing(spark, handoff, events, expected, tmp_path):
    results = window_results(events)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    thirds = [results[: len(results) // 3], results[len(results) // 3 : 2 * len(results) // 3]]
    handoff.append_windows(thirds[0])
    running = to_parquet(
        windows_of(handoff, spark, maxRecordsPerTrigger="60"),  # three batches to a third of the ~500 rows
        out,
        checkpoint,
        processingTime="100 milliseconds",
    )
    running.processAllAvailable()
    # More windows close while the query runs (several batches' worth); stop it two batches
    # later, most likely with batches still to do, possibly in the middle of one.
    seen = len(batch_rows(running))
    handoff.append_windows(thirds[1])
    while len(batch_rows(running)) < seen + 2:
        running.awaitTermination(0.05)
    running.stop()
    handoff.append_windows(results[2 * len(results) // 3 :])
    to_parquet(windows_of(handoff, spark), out, checkpoint, availableNow=True).awaitTermination()
    assert collect_windows(spark.read.parquet(str(out))) == expected


def test_a_failed_batch_is_rerun_over_the_same_offsets(spark, any_handoff, events, expected, tmp_path):
    """A batch that dies half-way (here: its sink raises) is re-read from the checkpointed
    range after the restart: same rows, and the idempotent sink keeps each once."""
    any_handoff.append_windows(window_results(events))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    attempts: dict[int, list[list[tuple]]] = {}

    def sink(df, batch_id: int) -> None:
        rows = collect_windows(df)
        attempts.setdefault(batch_id, []).append(rows)
        if batch_id == 1 and len(attempts[1]) == 1:
            raise RuntimeError("executor lost in the middle of batch 1")
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    def run():
        return (
            windows_of(any_handoff, spark, maxRecordsPerTrigger="200")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    with pytest.raises(StreamingQueryException, match="executor lost"):
        run().awaitTermination()
    run().awaitTermination()
    assert len(attempts[1]) == 2 and attempts[1][0] == attempts[1][1]
    assert all(len(tries) == 1 for batch, tries in attempts.items() if batch != 1)
    assert collect_windows(spark.read.parquet(str(out))) == expected


def test_rows_of_an_uncommitted_handoff_never_reach_spark(spark, handoff, events, expected):
    results = window_results(events)
    handoff.append_windows(results[:100])

    class WorkerDied(Exception):
        pass

    with pytest.raises(WorkerDied), handoff.store.transaction() as conn:
        handoff.writer.append(conn, 0, [(0.0, 30.0, "sensors/p0", "phantom", 1, 1.0, True, 0)])
        # Written and fsynced, not committed (and the writer holds the store's write lock):
        assert "phantom" not in {row[2] for row in collect_windows(batch_of(handoff, spark))}
        raise WorkerDied
    handoff.append_windows(results[100:])
    assert collect_windows(batch_of(handoff, spark)) == expected


@pytest.mark.parametrize(
    "options, schema, message",
    [
        ({"path": "/nonexistent/store"}, None, "no headrace store at '/nonexistent/store'"),
        ({"stream": "nope"}, None, "no handoff stream 'nope' .*declared streams: sensor-totals"),
        ({}, "window_start timestamp, key string", "which its consumer did not declare"),
        ({"maxRecordsPerTrigger": "many"}, None, "maxRecordsPerTrigger is a positive integer"),
    ],
)
def test_mistakes_are_reported_clearly(spark, handoff, options, schema, message):
    reader = spark.readStream.format("headrace").options(path=str(handoff.path), stream=STREAM)
    reader = reader.options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    # Spark reports a mistake found at load() as an AnalysisException, one found when the
    # query starts as a StreamingQueryException; either way the message is headrace's.
    with pytest.raises((AnalysisException, StreamingQueryException), match=message):
        reader.load().writeStream.format("noop").start().awaitTermination()


def test_on_kafka_each_batch_is_whole_appends_within_the_limit(spark, kafka_handoff, events, expected, tmp_path):
    results = window_results(events)
    kafka_handoff.append_windows(results)
    query = admitted_120_at_a_time(spark, kafka_handoff, "kafka_admission", tmp_path / "checkpoint")
    sizes = batch_rows(query)
    assert max(sizes) <= 120 and sum(sizes) == len(results)
    # Whole appends (a window end's rows of one partition): a batch leaves out less than one.
    largest = max(len(group) for group in by_closing(results).values())
    assert all(size > 120 - largest for size in sizes[:-1])
    assert collect_windows(spark.table("kafka_admission")) == expected


@pytest.mark.parametrize(
    "options, message",
    [
        ({"stream": "nope"}, "no handoff stream 'nope' on Kafka at .*declared streams: sensor-totals"),
        ({"trimOnCommit": "true"}, "trimmed by their retention"),
    ],
)
def test_kafka_mistakes_are_reported_clearly(spark, kafka_handoff, events, options, message):
    kafka_handoff.append_windows(window_results(events)[:10])
    reader = spark.readStream.format("headrace").options(**kafka_handoff.options(), stream=STREAM)
    with pytest.raises((AnalysisException, StreamingQueryException), match=message):
        reader.options(**options).load().writeStream.format("noop").start().awaitTermination()


def test_on_kafka_a_foreign_batch_at_the_end_holds_back_no_window(spark, kafka_handoff, events, expected, tmp_path):
    """The Spark read ends where the broker lists each partition's end; Tansu lists a batch
    of several records (here three foreign ones, in one librdkafka batch) as ending after its
    first. Every window before and after that batch reaches Spark, each once."""
    results = window_results(events)

    def foreign_batch() -> None:
        topic = HandoffTopics(kafka_handoff.prefix).data(STREAM)
        producer = Producer(
            {"bootstrap.servers": kafka_handoff.bootstrap, "linger.ms": 200, "enable.idempotence": False}
        )
        for n in range(3):
            producer.produce(topic, f"not a handoff record {n}".encode(), partition=0)
        assert producer.flush(10) == 0

    read_in_two(spark, kafka_handoff, results, len(results) // 2, tmp_path, foreign_batch)
    assert collect_windows(spark.read.parquet(str(tmp_path / "out"))) == expected
    assert collect_windows(batch_of(kafka_handoff, spark)) == expected


def kafka_threads() -> int:
    return sum(t.name == "headrace-kafka" and t.is_alive() for t in threading.enumerate())


def test_kafka_storage_keeps_one_connection_until_closed_and_drops_it_on_a_failure(kafka_handoff, events):
    results = window_results(events)
    kafka_handoff.append_windows(results)
    before = kafka_threads()
    storage = KafkaStorage(KafkaConnection.of(kafka_handoff.bootstrap), kafka_handoff.prefix)
    ends = storage.end_offsets(STREAM)
    assert sum(ends.values()) == len(by_closing(results))  # one record per append
    assert storage.start_offsets(STREAM) == dict.fromkeys(ends, 0)
    assert kafka_threads() == before + 1  # the calls share one connection
    with pytest.raises(UnknownHandoffStreamError, match="no handoff stream 'nope'"):
        storage.end_offsets("nope")
    assert kafka_threads() == before  # a failed call leaves nothing open
    assert storage.end_offsets(STREAM) == ends  # the next call connects anew
    storage.close()
    assert kafka_threads() == before


def test_a_processs_later_kafka_storages_take_the_declaration_it_read(kafka_handoff, events):
    """Spark plans a query in Python processes it reuses, each call with a storage of its own:
    a declaration read once in a process serves its later storages of that cluster and prefix."""
    kafka_handoff.append_windows(window_results(events))
    first = KafkaStorage(KafkaConnection.of(kafka_handoff.bootstrap), kafka_handoff.prefix)
    schema = first.schema(STREAM)
    first.close()
    before = kafka_threads()
    later = KafkaStorage(KafkaConnection.of(kafka_handoff.bootstrap), kafka_handoff.prefix)
    assert later.schema(STREAM) == schema and kafka_threads() == before  # no connection made for it
    starts, ends = later.offsets(STREAM)
    assert (starts, ends) == (later.start_offsets(STREAM), later.end_offsets(STREAM))
    assert sum(ends.values()) > 0
    later.close()
    elsewhere = KafkaStorage(KafkaConnection.of(kafka_handoff.bootstrap), f"{kafka_handoff.prefix}-other")
    for _ in range(2):  # another prefix's streams are its own; an unknown stream is asked for again
        with pytest.raises(UnknownHandoffStreamError, match="no handoff stream"):
            elsewhere.schema(STREAM)
    elsewhere.close()


def test_a_processs_splits_share_one_started_reader_and_a_split_left_part_way_closes_its_own(
    kafka_handoff, events, monkeypatch
):
    results = window_results(events)
    kafka_handoff.append_windows(results)
    started: list[object] = []
    start_client = handoff_storage.start_client

    async def counted(client, connection):
        started.append(client)
        await start_client(client, connection)

    monkeypatch.setattr(handoff_storage, "start_client", counted)
    monkeypatch.setattr(handoff_storage._Readers, "_process", None)  # a Python process's first read
    storage = KafkaStorage(KafkaConnection.of(kafka_handoff.bootstrap), kafka_handoff.prefix)
    ends = storage.end_offsets(STREAM)
    splits = storage.plan(STREAM, [OffsetRange(p, 0, end) for p, end in sorted(ends.items())])
    storage.close()
    assert len(splits) == 2 and all(end > 0 for end in ends.values())

    def rows(split):
        return sum(batch.num_rows for batch in split.batches())

    first = [rows(split) for split in splits]
    assert sum(first) == len(results)  # every row
    assert len(started) == 1  # the second split read with the consumer the first started
    assert rows(splits[1]) == first[1] and len(started) == 1  # and a third read, again
    monkeypatch.setattr(handoff_storage, "BATCH_ROWS", 1)  # a batch a row: the first comes before the range is read
    part_way = splits[0].batches()
    assert next(part_way).num_rows == 1
    part_way.close()  # left part-way: its consumer (the kept one) is closed, not kept
    assert rows(splits[0]) > 0 and len(started) == 2
    monkeypatch.setattr(handoff_storage, "READER_IDLE", 0.05)
    assert rows(splits[1]) == first[1] and len(started) == 2
    time.sleep(0.5)  # unused past READER_IDLE: the kept consumer is closed
    assert rows(splits[1]) == first[1] and len(started) == 3


def split_rows(split: KafkaSplit) -> list[WindowRow]:
    table = pa.Table.from_batches(list(split.batches()))
    starts, ends = (table[name].cast(pa.int64()).to_pylist() for name in ("window_start", "window_end"))
    return list(zip(starts, ends, table["key"].to_pylist(), table["count"].to_pylist(), table["total"].to_pylist()))


def test_a_kafka_split_answered_a_record_at_a_time_reads_its_ranges_rows_in_order_once(
    kafka_handoff, events, monkeypatch
):
    """The broker answering each fetch with one record (``fetch_max_bytes`` of 1): whole and
    inner ranges read exactly their appends' rows, in order; the answer holding a range's last
    record comes with the partition already paused (nothing past the range is asked for)."""
    results = window_results(events)
    kafka_handoff.append_windows(results)
    appends: list[list[list[WindowRow]]] = [[] for _ in range(PARTITIONS)]
    for (_, partition), group in by_closing(results).items():
        appends[partition].append(group)  # a record per group: a fresh log's appends all count
    answers: list[tuple[int, int, bool]] = []  # (first offset, records, partition paused)
    fetch_answers = handoff_storage.fetch_answers

    async def seen(consumer, tp, start, end, timeout):
        async for answer in fetch_answers(consumer, tp, start, end, timeout):
            answers.append((answer[0].offset, len(answer), tp in consumer.paused()))
            yield answer

    monkeypatch.setattr(handoff_storage, "fetch_answers", seen)
    a_record_an_answer = KafkaConnection(kafka_handoff.bootstrap, consumer_options={"fetch_max_bytes": 1})
    topic = HandoffTopics(kafka_handoff.prefix).data(STREAM)
    for partition, groups in enumerate(appends):
        assert len(groups) > 4
        for start, end in ((0, len(groups)), (1, len(groups) - 1), (2, 3)):
            answers.clear()
            split = KafkaSplit(a_record_an_answer, topic, OffsetRange(partition, start, end))
            assert split_rows(split) == [row for group in groups[start:end] for row in group]
            assert answers == [(offset, 1, offset == end - 1) for offset in range(start, end)]


def test_a_read_planned_on_the_declared_schema_reads_the_declaration_once(handoff, events, monkeypatch):
    """Spark asks the source for its schema, pickles the source, and plans the read on the
    copy with the schema it got: the reader does not open the store again to check it; a
    schema the source did not give is checked."""
    handoff.append_windows(window_results(events))
    opened: list[str] = []
    open_storage = ReadOptions.open_storage

    def counted(options: ReadOptions) -> HandoffStorage:
        opened.append(options.stream)
        return open_storage(options)

    monkeypatch.setattr(ReadOptions, "open_storage", counted)
    source = HeadraceDataSource({"path": str(handoff.path), "stream": STREAM})
    declared = source.schema()
    planned = pickle.loads(pickle.dumps(source))
    reader = planned.reader(declared)
    assert opened == [STREAM]
    assert len(reader.partitions()) == 2 and opened == [STREAM, STREAM]
    narrower = StructType(declared.fields[:2])
    with pytest.raises(HandoffSchemaError, match="which its consumer did not declare"):
        planned.reader(narrower)
    with pytest.raises(HandoffSchemaError, match="which its consumer did not declare"):
        HeadraceDataSource({"path": str(handoff.path), "stream": STREAM}).reader(narrower)
