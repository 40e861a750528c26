"""Small appends to the embedded handoff log, written the old way and the new, in one run.

``--activations`` concurrent activations (asyncio tasks of one process, as in a worker) each
append ``--appends`` windows of one row, one after another, each waiting until its row is
durable (as ``spark_sink.handoff`` does), to ``--partitions`` partitions. Each way gets a fresh
store:

* ``per-append files``: one write transaction and one segment file per append (the log
  before group commit and inline segments);
* ``per-append inline``: one write transaction per append, rows inline in the index;
* ``group commit``: appends that arrive while a write is under way share the next one
  (:class:`streams.backends.embedded.handoff_commit.GroupAppender`), rows inline, runs of inline segments
  merged into files as they gather (what ``EmbeddedHandoffSink`` does).

Printed per way: rows/s, bytes on disk per row (what the appends added: the database after a
WAL checkpoint, plus the segment files, counted in allocated blocks), segment files, index
rows, write transactions.

    .venv/bin/python bench/handoff_log.py [--activations 1 200] [--appends 50] [--partitions 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import timing  # noqa: E402
from bench.timing import cpu_figure, figure, timed  # noqa: E402
from spark_sink import HandoffSchema  # noqa: E402
from streams.backends.embedded.handoff_commit import GroupAppender  # noqa: E402
from streams.backends.embedded.handoff_log import HandoffLog, HandoffWriter  # noqa: E402
from streams.backends.embedded.store import EmbeddedStore  # noqa: E402

STREAM = "bench_counts"
SCHEMA = HandoffSchema.windows({"count": "bigint"}, stream=True)  # as the soak's Handoff declares

Append = Callable[[int, pa.Table], Awaitable[object]]


def one_row(activation: int, n: int) -> pa.Table:
    return SCHEMA.to_table([(5.0 * n, 5.0 * n + 5, f"soak/dev-{activation}", f"dev-{activation}", n)])


async def drive(append: Append, activations: int, appends: int, partitions: int) -> None:
    async def activation(i: int) -> None:
        for n in range(appends):
            await append(i % partitions, one_row(i, n))

    async with anyio.create_task_group() as tg:
        for i in range(activations):
            tg.start_soon(activation, i)


def disk_bytes(path: Path) -> tuple[int, int]:
    """(allocated bytes under ``path``, segment files)."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
            files += name.endswith(".arrow")
    return total, files


def run(way: str, activations: int, appends: int, partitions: int) -> str:
    path = Path(tempfile.mkdtemp(prefix="handoff-bench-"))
    store = EmbeddedStore(path)
    log = HandoffLog(store, inline_bytes=0 if way == "per-append files" else 64 * 1024)
    writer = HandoffWriter(log, STREAM, SCHEMA)
    appender = GroupAppender(store, writer)
    writes = 0
    with store.connection() as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    empty, _ = disk_bytes(path)  # the store's tables before the first append: not the rows' cost

    async def per_append(partition: int, table: pa.Table) -> object:
        nonlocal writes
        writes += 1
        return await store.write(lambda conn: writer.append(conn, partition, table))

    async def grouped(partition: int, table: pa.Table) -> object:
        return await appender.append(lambda conn: (partition, table))

    append: Append = grouped if way == "group commit" else per_append
    rows = activations * appends
    with timed(rows, freeze=False) as clock:  # the appends, from the first call to the last one done
        anyio.run(drive, append, activations, appends, partitions)
    report = clock.report()
    assert sum(writer.end_offsets().values()) == rows
    with store.connection() as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (index_rows,) = conn.execute("SELECT count(*) FROM handoff_segments").fetchone()
    store.close()
    size, files = disk_bytes(path)
    size -= empty
    writes = appender.writes if way == "group commit" else writes
    if report.rate is not None:
        timing.note(f"{activations:,} activations, {way}, rows/s", report.rate)
    timing.note(f"{activations:,} activations, {way}, bytes a row on disk", size / rows)
    return (
        f"  {way:<18} {figure(report):>9} rows/s ({cpu_figure(report):>9} per CPU s)  {size / rows:>7,.0f} B/row on disk  "
        f"{files:>6,} files  {index_rows:>6,} index rows  {writes:>6,} writes  (timed: {report.coverage:.0%} of the rows)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--activations", type=int, nargs="+", default=[1, 200, 2000])
    parser.add_argument("--appends", type=int, default=50, help="appends of one row per activation, at 200")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    for activations in args.activations:
        appends = max(1, args.appends * 200 // activations)  # the same rows for every shape
        print(
            f"{activations} activations x {appends} appends of 1 row, {min(activations, args.partitions)} partitions:"
        )
        for way in ("per-append files", "per-append inline", "group commit"):
            print(run(way, activations, appends, args.partitions), flush=True)
    timing.save_run(__file__, {}, params=vars(args))


if __name__ == "__main__":
    main()
