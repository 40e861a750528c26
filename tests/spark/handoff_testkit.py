"""Helpers of the Spark handoff tests: the window results a windowed consumer would hand
off, how they are written, and how Spark's output is compared with them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_sink import HandoffLog, HandoffWriter, Segment
from spark_sink.schema import HandoffData
from streams.ids import StreamId
from streams.store import EmbeddedStore

WINDOW_SECONDS = 30
STREAM = "sensor-totals"
PARTITIONS = 2
BASE = 1_700_000_000  # seconds; windows align with it (a multiple of 30)

# (event time in microseconds, key, value); values are whole numbers so sums are exact
RawEvent = tuple[int, str, float]
# (window start µs, window end µs, key, count, total): what both sides are compared on
WindowRow = tuple[int, int, str, int, float]


def window_results(events: Sequence[RawEvent]) -> list[WindowRow]:
    """Tumbling-window count and total per key, as a windowed consumer computes them; in
    order of window end, the order in which the watermark closes windows."""
    size = WINDOW_SECONDS * 1_000_000
    acc: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for micros, key, value in events:
        cell = acc[(micros - micros % size, key)]
        cell[0] += 1
        cell[1] += value
    return [
        (start, start + size, key, int(count), total)
        for (start, key), (count, total) in sorted(acc.items())
    ]


def collect_windows(
    df: DataFrame, start: str = "window_start", end: str = "window_end"
) -> list[WindowRow]:
    """The window rows of ``df``, sorted, with times in microseconds (comparable exactly)."""
    columns = [F.unix_micros(start), F.unix_micros(end), "key", "count", "total"]
    return sorted(tuple(r) for r in df.select(*columns).collect())


def partition_of(key: str) -> int:
    """The queue a key's stream maps to (stable hash), hence its handoff partition."""
    return StreamId("sensors", key).uniform_hash % PARTITIONS


@dataclass
class Handoff:
    """A store directory with a declared window stream and a writer for it."""

    path: Path
    store: EmbeddedStore
    log: HandoffLog
    writer: HandoffWriter

    def append(self, partition: int, data: HandoffData) -> Segment | None:
        """One append in its own transaction."""
        with self.store.transaction() as conn:
            return self.writer.append(conn, partition, data)

    def append_windows(self, rows: Sequence[WindowRow]) -> None:
        """Hand off ``rows`` as the runtime does: each closing window's results go to their
        partitions, one transaction per (window, partition)."""
        groups: dict[tuple[int, int], list[tuple[object, ...]]] = defaultdict(list)
        for start, end, key, count, total in rows:
            groups[(end, partition_of(key))].append((start / 1e6, end / 1e6, key, count, total))
        for (_, partition), group in sorted(groups.items()):
            self.append(partition, group)

    def stream_files(self) -> set[str]:
        root = self.path / "handoff" / STREAM
        return {str(p.relative_to(self.path)) for p in root.rglob("*.arrow")}

    def indexed_files(self) -> set[str]:
        with self.store.snapshot() as conn:
            return {f for (f,) in conn.execute("SELECT file FROM handoff_segments")}
