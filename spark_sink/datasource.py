"""The ``headrace`` Spark DataSource: batch and streaming reads of a handoff stream.

Example::

    spark_sink.register(spark)
    averages = (spark.readStream.format("headrace")
                .option("path", "/var/lib/headrace").option("stream", "averages").load())
    # or, with the queues (and so the handoff log) on Kafka:
    averages = (spark.readStream.format("headrace")
                .option("kafka.bootstrap.servers", "broker:9092").option("stream", "averages")
                .load())

Where each piece runs: the DataSource and the stream reader's offset methods run in a
long-lived Python process of the Spark driver; ``read`` runs in executor workers on a pickled
copy of the reader. Neither shares memory with the headrace runtime, so everything goes
through the durable log, and readers hold nothing unpicklable across a pickle.

Exactly-once: offsets are immutable once committed, Spark checkpoints each batch's
``{partition: offset}`` range before running it and re-runs the same range after a failure,
and ``read`` of a range always yields the same rows (on Kafka too: whether a record counts
depends on the record alone, see :mod:`streams.backends.kafka.handoff_log`); an idempotent sink (files, Delta,
``foreachBatch`` keyed by batch id) therefore receives every handed-off row exactly once.

Where Spark is: the stream reader records the end of each finished micro-batch in the
storage (:meth:`~spark_sink.storage.HandoffStorage.record_commit`), whatever
``trimOnCommit`` says, for ``headrace status``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_sink.offsets import Offsets, decode_offsets, encode_offsets, split_ranges
from spark_sink.options import ReadOptions
from spark_sink.storage import HandoffSplit, HandoffStorage
from streams.core.errors import HandoffDataLostError, HandoffSchemaError

NAME = "headrace"
log = logging.getLogger("headrace.spark")


class _HandoffReading:
    """What the batch and the stream reader share: options, storage, splits, ``read``."""

    def __init__(self, options: ReadOptions, schema: StructType, declared: StructType | None = None) -> None:
        self.options = options
        self._storage: HandoffStorage | None = None
        if declared is not None and schema == declared:
            return  # Spark passes back the schema the source read: nothing to check again
        try:
            _check_schema(self.storage, options.stream, schema)
        finally:  # made where the query is planned: the reader is used in another process
            self._release()

    @property
    def storage(self) -> HandoffStorage:
        if self._storage is None:
            self._storage = self.options.open_storage()
        return self._storage

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a pickled copy: no database connection travels with it.
        state = self.__dict__.copy()
        state["_storage"] = None
        return state

    def _release(self) -> None:
        """Close the storage (a Kafka connection, an SQLite one); the next use opens it again."""
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    def _partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = split_ranges(start, end, self.options.max_rows_per_split)
        return [InputPartition(split) for split in self.storage.plan(self.options.stream, ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:  # Spark's placeholder when a batch read has no splits
            return iter(())
        split: HandoffSplit = partition.value
        return split.batches()


class HeadraceBatchReader(_HandoffReading, DataSourceReader):
    """``spark.read``: every row handed off (and not trimmed) when the query is planned."""

    def partitions(self) -> list[InputPartition]:
        stream = self.options.stream
        try:
            return self._partitions(*self.storage.offsets(stream))
        finally:  # planned: nothing of the storage stays open in Spark's planning process
            self._release()


class HeadraceStreamReader(_HandoffReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches over ``{partition: offset}`` ranges."""

    def __init__(self, options: ReadOptions, schema: StructType, declared: StructType | None = None) -> None:
        super().__init__(options, schema, declared)
        self._target: Offsets | None = None  # availableNow: the end fixed at query start
        self._recorded: Offsets | None = None  # the commit last recorded for status

    def initialOffset(self) -> dict[str, int]:
        stream = self.options.stream
        if self.options.starting_offsets == "latest":
            return encode_offsets(self.storage.end_offsets(stream))
        return encode_offsets(self.storage.start_offsets(stream))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.storage.end_offsets(self.options.stream)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = decode_offsets(start)
        latest = self._target if self._target is not None else self._end_offsets()
        for partition, offset in begin.items():
            if latest.get(partition, 0) < offset:
                raise HandoffDataLostError(
                    f"handoff stream {self.options.stream!r} partition {partition} ends at "
                    f"{latest.get(partition, 0)} but this query has read up to {offset}: the "
                    "store was replaced; use a new checkpoint location"
                )
        # Spark asks from where its last batch ended once that batch is in its commit log:
        # the commit of a query's last batch, which commit() hears of only when (if ever)
        # the next batch starts.
        self._record(begin)
        if isinstance(limit, ReadMaxRows):
            latest = self.storage.admit(self.options.stream, begin, latest, limit.max_rows)
        return encode_offsets(latest)

    def reportLatestOffset(self) -> dict[str, int]:
        return encode_offsets(self._end_offsets())

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return self._partitions(decode_offsets(start), decode_offsets(end))

    def commit(self, end: dict[str, int]) -> None:
        # Spark may never commit the last batch; that only delays trimming, never loses data.
        offsets = decode_offsets(end)
        self._record(offsets)
        if self.options.trim_on_commit:
            self.storage.trim(self.options.stream, offsets)

    def _record(self, offsets: Offsets) -> None:
        """Record ``offsets`` as Spark's commit, for ``headrace status``, when they moved.
        Status only: a failure is logged, and the query goes on."""
        if not offsets or offsets == self._recorded:
            return
        try:
            self.storage.record_commit(self.options.stream, offsets)
        except Exception as exc:
            log.warning(
                "could not record Spark's commit of handoff stream %r for headrace status (%s: %s); "
                "the query goes on, and the next commit tries again",
                self.options.stream,
                type(exc).__name__,
                exc,
            )
            return
        self._recorded = dict(offsets)

    def stop(self) -> None:
        self._release()

    def _end_offsets(self) -> Offsets:
        return self.storage.end_offsets(self.options.stream)


class HeadraceDataSource(DataSource):
    """The ``headrace`` format: a handoff stream of a headrace store, for Spark.

    Options: see :class:`ReadOptions`. The schema is the stream's declared output; a schema
    given with ``.schema(...)`` must be that one.
    """

    # The declared schema, once schema() has read it. Spark pickles the source after schema()
    # and plans the read on the copy, so the reader need not read the declaration again when
    # it is given this schema back (a declaration never changes once made).
    _declared: StructType | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        options = ReadOptions.parse(self.options)
        storage = options.open_storage()
        try:
            self._declared = StructType.fromJson(storage.schema(options.stream).spark_json())
        finally:
            storage.close()
        return self._declared

    def reader(self, schema: StructType) -> DataSourceReader:
        return HeadraceBatchReader(ReadOptions.parse(self.options), schema, self._declared)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HeadraceStreamReader(ReadOptions.parse(self.options), schema, self._declared)


def _check_schema(storage: HandoffStorage, stream: str, requested: StructType) -> None:
    declared = storage.schema(stream)
    if requested.jsonValue() != declared.spark_json():
        raise HandoffSchemaError(
            f"handoff stream {stream!r} declares ({declared.ddl()}); Spark was given "
            f"({_ddl(requested)}), which its consumer did not declare: drop .schema(...) "
            "to read the declared columns"
        )


def _ddl(schema: StructType) -> str:
    return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)


def register(spark: SparkSession) -> None:
    """Make ``format("headrace")`` available in ``spark`` (once per session).

    On a local Spark (``local[...]``) with no ``PYSPARK_PYTHON`` set, the source's Python
    workers run this interpreter, the one that imported headrace (see
    :func:`workers_run_this_python`). On a Spark Connect session it registers the source with
    the server, for that session; the server's Python workers must have headrace.

    Example: ``spark_sink.register(spark); spark.read.format("headrace")...``
    """
    workers_run_this_python(spark)
    spark.dataSource.register(HeadraceDataSource)


def workers_run_this_python(spark: SparkSession) -> bool:
    """Have a local Spark run the data source's Python workers with ``sys.executable``;
    True when it did.

    Spark starts them with ``$PYSPARK_PYTHON``, by default the first ``python3`` on ``PATH``:
    in a shell without the virtual environment on ``PATH`` that one has no headrace, and
    every read fails with ``ModuleNotFoundError: No module named 'spark_sink'``. On a local
    master the workers run on this machine, so this interpreter (which has headrace, since
    it imported this module) is the right one. A ``PYSPARK_PYTHON`` of the user's, and any
    cluster (whose executors have their own interpreters), are left as they are.

    Example: ``workers_run_this_python(SparkSession.builder.master("local[2]").getOrCreate())``
    """
    if os.environ.get("PYSPARK_PYTHON"):
        return False
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: no context here, the server starts the workers
        return False
    if not (context.master or "").startswith("local") or context.pythonExec == sys.executable:
        return False
    # Read when the source's functions are wrapped (pyspark.sql.udf._wrap_function), so it
    # applies to the registration that follows.
    context.pythonExec = sys.executable
    return True
