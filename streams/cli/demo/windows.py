"""The demo's last stage: reading the finalized windows from the handoff log.

Two readers with the same shape: :class:`SparkWindows`, a Spark Structured Streaming query
on the ``headrace`` DataSource whose ``foreachBatch`` prints each micro-batch, and
:class:`HandoffTail`, which reads the log directly on the same trigger (``--no-spark``, for
machines without Java). Both print through a :class:`BatchPrinter` and count what they
received in a :class:`Received` tally, once per micro-batch id even if Spark runs one again.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

import spark_sink  # its package loads lazily: pyspark only when the demo's query starts
from spark_sink.offsets import OffsetRange
from spark_sink.options import ReadOptions
from spark_sink.storage import HandoffStorage
from streams.cli.common import plural
from streams.core.errors import HeadraceError

HANDOFF = "booth-totals"  # the handoff stream the demo's consumer writes

# Spark logs WARN and above; the repl logger keeps its default so Spark does not announce
# the level it sets. NativeCodeLoader warns on every start that no native Hadoop is there.
LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


class SparkUnavailableError(HeadraceError):
    """Spark could not start (no Java, usually)."""


@dataclass
class Received:
    """Windows and the events in them, per micro-batch id (a re-run batch replaces itself)."""

    batches: dict[int, tuple[int, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, batch_id: int, windows: int, events: int) -> None:
        with self._lock:
            self.batches[batch_id] = (windows, events)

    @property
    def windows(self) -> int:
        with self._lock:
            return sum(w for w, _ in self.batches.values())

    @property
    def events(self) -> int:
        with self._lock:
            return sum(e for _, e in self.batches.values())


@dataclass(frozen=True, slots=True)
class WindowRow:
    start: float
    end: float
    booth: str
    cars: int
    tolls: float


class BatchPrinter:
    """One line per window period of a micro-batch: how many booths, cars and tolls, and the
    busiest booth."""

    def __init__(self, console: Console, source: str) -> None:
        self.console = console
        self.source = source

    def print_batch(self, batch_id: int, rows: list[WindowRow]) -> None:
        periods: dict[tuple[float, float], list[WindowRow]] = defaultdict(list)
        for row in rows:
            periods[(row.start, row.end)].append(row)
        for (start, end), windows in sorted(periods.items()):
            busiest = max(windows, key=lambda r: (r.cars, r.booth))
            self.console.print(
                f"[cyan]{self.source} batch {batch_id:>3}[/] window {clock_text(start)}–{clock_text(end)}: "
                f"{plural(len(windows), 'booth'):>10}, {plural(sum(r.cars for r in windows), 'car'):>10}, "
                f"€{sum(r.tolls for r in windows):>10,.2f}; busiest {busiest.booth} ({busiest.cars})",
                highlight=False,
            )


def clock_text(t: float) -> str:
    """``13:57:40``: a POSIX time as the local clock shows it."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def _seconds(value: datetime | float) -> float:
    # Spark gives naive local datetimes, Arrow aware UTC ones: .timestamp() reads both right.
    return value.timestamp() if isinstance(value, datetime) else float(value)


def window_rows(records: Iterable[Mapping[str, Any]]) -> list[WindowRow]:
    return [
        WindowRow(_seconds(r["window_start"]), _seconds(r["window_end"]), r["key"], int(r["cars"]), float(r["tolls"]))
        for r in records
    ]


def open_handoff(source: Mapping[str, str]) -> HandoffStorage:
    """The demo's handoff stream, as the DataSource would open it with options ``source``."""
    return ReadOptions.parse({**source, "stream": HANDOFF}).open_storage()


def read_range(storage: HandoffStorage, start: Mapping[int, int], end: Mapping[int, int]) -> list[dict[str, Any]]:
    """The rows of the demo's handoff stream from offsets ``start`` to ``end``."""
    ranges = [OffsetRange(p, start.get(p, 0), e) for p, e in sorted(end.items())]
    return [
        record
        for split in storage.plan(HANDOFF, [r for r in ranges if r.rows])
        for batch in split.batches()
        for record in batch.to_pylist()
    ]


def handed_off(source: Mapping[str, str]) -> int:
    """How many windows the worker has handed off in all."""
    storage = open_handoff(source)
    try:
        end = storage.end_offsets(HANDOFF)
        if "path" in source:
            return sum(end.values())  # the embedded log's offsets are rows, from 0
        return len(read_range(storage, {}, end))  # Kafka's are appends: count the rows
    finally:
        storage.close()


class WindowReader(Protocol):
    """What the demo needs from its last stage."""

    received: Received

    def prepare(self) -> None:
        """Slow set-up that may run before the handoff stream exists (blocking)."""

    def start(self) -> None:
        """Start reading micro-batches (blocking; the handoff stream exists)."""

    def failure(self) -> str | None:
        """Why reading stopped, if it failed."""

    def stop(self) -> None:
        """Stop reading and release everything (blocking)."""


class SparkWindows:
    """A Spark streaming query over the handoff stream, on a ``trigger`` seconds timer."""

    def __init__(self, source: Mapping[str, str], work: Path, printer: BatchPrinter, trigger: float = 2.0) -> None:
        self.source = source  # the DataSource options that name the handoff log
        self.work = work
        self.printer = printer
        self.trigger = trigger
        self.received = Received()
        self._spark: Any = None
        self._query: Any = None

    def prepare(self) -> None:
        # Spark's Python workers run this interpreter, where headrace is installed.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a demo stays on this machine
        log4j = self.work / "log4j2.properties"
        log4j.write_text(LOG4J2)
        os.environ.setdefault(
            "PYSPARK_SUBMIT_ARGS", f"--driver-java-options -Dlog4j2.configurationFile=file:{log4j} pyspark-shell"
        )
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise SparkUnavailableError(
                "the demo's Spark query needs pyspark: pip install 'headrace[spark]', or run with --no-spark"
            ) from None
        try:
            self._spark = (
                SparkSession.builder.master("local[2]")
                .appName("headrace-demo")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")  # the status line is ours
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            self._spark.sparkContext.setLogLevel("ERROR")
            spark_sink.register(self._spark)
        except Exception as exc:
            raise SparkUnavailableError(
                f"Spark did not start ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                "it needs Java 17+ (java on the PATH or JAVA_HOME): install it, or run with --no-spark"
            ) from None

    def start(self) -> None:
        windows = self._spark.readStream.format("headrace").options(**self.source).option("stream", HANDOFF).load()
        self._query = (
            windows.writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(self.work / "spark-checkpoint"))
            .trigger(processingTime=f"{self.trigger} seconds")
            .start()
        )

    def _on_batch(self, frame: Any, batch_id: int) -> None:
        rows = window_rows(row.asDict() for row in frame.collect())
        self.received.record(batch_id, len(rows), sum(r.cars for r in rows))
        self.printer.print_batch(batch_id, rows)

    def failure(self) -> str | None:
        """Why the query stopped, if it failed."""
        error = self._query.exception() if self._query is not None else None
        return None if error is None else str(error).splitlines()[0]

    def stop(self) -> None:
        if self._query is not None:
            self._query.stop()
        if self._spark is not None:
            self._spark.stop()


class HandoffTail:
    """Reads the handoff log directly, every ``trigger`` seconds, like a micro-batch query."""

    def __init__(self, source: Mapping[str, str], printer: BatchPrinter, trigger: float = 2.0) -> None:
        self.source = source  # the DataSource options that name the handoff log
        self.printer = printer
        self.trigger = trigger
        self.received = Received()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offsets: dict[int, int] = {}
        self._batch_id = 0

    def prepare(self) -> None:
        pass

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="handoff-tail", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        storage = open_handoff(self.source)
        try:
            while True:
                stopping = self._stop.wait(self.trigger)
                end = storage.end_offsets(HANDOFF)
                records = read_range(storage, self._offsets, end)
                if records:
                    rows = window_rows(records)
                    self.received.record(self._batch_id, len(rows), sum(r.cars for r in rows))
                    self.printer.print_batch(self._batch_id, rows)
                    self._batch_id += 1
                self._offsets = end
                if stopping:
                    return
        finally:
            storage.close()

    def failure(self) -> str | None:
        return None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
