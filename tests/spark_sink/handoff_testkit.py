"""Helpers of the Spark handoff tests: the window results a windowed consumer would hand
off, how they are written, and how Spark's output is compared with them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import spark_sink
from spark_sink import Handoff as HandoffDeclaration
from spark_sink.schema import HandoffData
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter, Segment
from streams.backends.embedded.store import EmbeddedStore
from streams.backends.kafka.handoff_sink import KafkaHandoffSink
from streams.backends.kafka.settings import KafkaSettings
from streams.core.ids import StreamId
from streams.eventtime.results import WindowResult
from tests.helpers import QUICK_JVM_OPTIONS

WINDOW_SECONDS = 30
STREAM = "sensor-totals"
PARTITIONS = 2
BASE = 1_700_000_000  # seconds; windows align with it (a multiple of 30)
# The drivers and executors of a session a test starts itself (tests.helpers.QUICK_JVM_OPTIONS).
QUICK_JVMS = {f"spark.{side}.extraJavaOptions": QUICK_JVM_OPTIONS for side in ("driver", "executor")}

# (event time in microseconds, key, value); values are whole numbers so sums are exact
RawEvent = tuple[int, str, float]
# (window start µs, window end µs, key, count, total): what both sides are compared on
WindowRow = tuple[int, int, str, int, float]


def spark_session(master: str, app: str, **conf: str) -> SparkSession:
    """A quiet Spark session on ``master`` in UTC (and ``conf``), with the ``headrace`` format
    registered."""
    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config(map=conf)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_sink.register(session)
    return session


@contextmanager
def spark_warnings(session: SparkSession) -> Iterator[Callable[[], str]]:
    """What Spark's JVM logs at WARN and above inside the block (the session is quiet,
    ERROR only, outside it): a function that returns the text logged so far."""
    jvm = session.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    context = log4j.LogManager.getContext(False)
    writer = jvm.java.io.StringWriter()
    layout = log4j.core.layout.PatternLayout.createDefaultLayout()
    appender = log4j.core.appender.WriterAppender.createAppender(layout, None, writer, "headrace-tests", False, True)
    appender.start()
    root = context.getConfiguration().getRootLogger()
    session.sparkContext.setLogLevel("WARN")
    root.addAppender(appender, None, None)
    context.updateLoggers()
    try:
        yield lambda: str(writer.toString())
    finally:
        root.removeAppender("headrace-tests")
        context.updateLoggers()
        session.sparkContext.setLogLevel("ERROR")
        appender.stop()


def window_results(events: Sequence[RawEvent]) -> list[WindowRow]:
    """Tumbling-window count and total per key, as a windowed consumer computes them; in
    order of window end, the order in which the watermark closes windows."""
    size = WINDOW_SECONDS * 1_000_000
    acc: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for micros, key, value in events:
        cell = acc[(micros - micros % size, key)]
        cell[0] += 1
        cell[1] += value
    return [(start, start + size, key, int(count), total) for (start, key), (count, total) in sorted(acc.items())]


def collect_windows(df: DataFrame, start: str = "window_start", end: str = "window_end") -> list[WindowRow]:
    """The window rows of ``df``, sorted, with times in microseconds (comparable exactly)."""
    columns = [F.unix_micros(start), F.unix_micros(end), "key", "count", "total"]
    return sorted(tuple(r) for r in df.select(*columns).collect())


def partition_of(key: str) -> int:
    """The queue a key's stream maps to (stable hash), hence its handoff partition."""
    return StreamId("sensors", key).uniform_hash % PARTITIONS


def source_of(partition: int) -> str:
    """The stream id the rows of ``partition`` carry (one per partition: the tests compare
    windows, not streams)."""
    return f"sensors/p{partition}"


@dataclass
class Handoff:
    """A store directory with a declared window stream and a writer for it."""

    path: Path
    store: EmbeddedStore
    log: HandoffLog
    writer: HandoffWriter

    def options(self) -> dict[str, str]:
        """The DataSource options that name this log."""
        return {"path": str(self.path)}

    def append(self, partition: int, data: HandoffData) -> Segment | None:
        """One append in its own transaction."""
        with self.store.transaction() as conn:
            return self.writer.append(conn, partition, data)

    def append_windows(self, rows: Sequence[WindowRow]) -> None:
        """Hand off ``rows`` as the runtime does: each closing window's results go to their
        partitions, one transaction per (window, partition)."""
        for (_, partition), group in by_closing(rows).items():
            source = source_of(partition)
            # final results (final, revision 0), as a window declared emit="final" hands off
            self.append(partition, [(s / 1e6, e / 1e6, source, key, n, t, True, 0) for s, e, key, n, t in group])

    def stream_files(self) -> set[str]:
        root = self.path / "handoff" / STREAM
        return {str(p.relative_to(self.path)) for p in root.rglob("*.arrow")}

    def indexed_files(self) -> set[str]:
        with self.store.snapshot() as conn:
            return {f for (f,) in conn.execute("SELECT file FROM handoff_segments WHERE file != ''")}  # '': inline


def open_handoff(path: Path, **log_options: int) -> Handoff:
    """The window stream's log in the store at ``path`` (made if missing), as the runtime
    declares it; close it with ``handoff.store.close()``."""
    store = EmbeddedStore(path)
    log = HandoffLog(store, **log_options)
    schema = HandoffDeclaration(STREAM, {"count": "bigint", "total": "double"}).schema()  # the runtime's columns
    return Handoff(path, store, log, HandoffWriter(log, STREAM, schema))


def by_closing(rows: Sequence[WindowRow]) -> dict[tuple[int, int], list[WindowRow]]:
    """``rows`` grouped as windows close: by (window end, partition), in that order."""
    groups: dict[tuple[int, int], list[WindowRow]] = defaultdict(list)
    for row in rows:
        groups[(row[1], partition_of(row[2]))].append(row)
    return dict(sorted(groups.items()))


@dataclass
class KafkaHandoff:
    """The same window stream in Kafka topics under ``prefix``, written by the runtime's sink."""

    bootstrap: str
    prefix: str
    connection: Mapping[str, Any] = field(default_factory=dict)  # KafkaSettings' TLS and SASL settings
    reading: Mapping[str, str] = field(default_factory=dict)  # the same as the DataSource's kafka.* options

    def options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap, "topicPrefix": self.prefix, **self.reading}

    def append_windows(self, rows: Sequence[WindowRow]) -> None:
        """Hand off ``rows`` as the runtime does: one append per (window end, partition)."""
        anyio.run(self._append_windows, rows)

    async def _append_windows(self, rows: Sequence[WindowRow]) -> None:
        settings = KafkaSettings(
            self.bootstrap, "unused", queues=PARTITIONS, handoff_prefix=self.prefix, **self.connection
        )
        declared = HandoffDeclaration(STREAM, {"count": "bigint", "total": "double"})
        sink = await KafkaHandoffSink.open(settings, declared)
        try:
            for (_, partition), group in by_closing(rows).items():
                windows = [
                    WindowResult(key, start / 1e6, end / 1e6, {"count": count, "total": total}, None)
                    for start, end, key, count, total in group
                ]
                await sink.write(source_of(partition), "totals", partition, windows)
        finally:
            await sink.close()
