"""Small handoff appends at the cost of their data (the store that takes turns):
appends of many activations share one write, each caller learns its rows' exact offsets,
small appends stay inline in the index, and compaction merges them into files while
readers read; a failure or a SIGKILL in the middle leaves only whole appends indexed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pyarrow as pa
import pytest

from spark_sink import Handoff, HandoffSchema
from spark_sink.offsets import OffsetRange
from streams.adapters.retention import RetentionPolicy
from streams.backends.embedded.backend import EmbeddedBackend
from streams.backends.embedded.handoff_commit import Appended, GroupAppender
from streams.backends.embedded.handoff_log import EmbeddedStorage, HandoffLog, HandoffWriter
from streams.backends.embedded.handoff_retention import compact, expire
from streams.backends.embedded.handoff_sink import EmbeddedHandoffSink
from streams.backends.embedded.store import EmbeddedStore
from streams.core.errors import HandoffDataLostError
from streams.eventtime.results import WindowResult

STREAM = "counts"
SCHEMA = HandoffSchema.of({"writer": "bigint", "seq": "bigint", "row": "bigint", "rows": "bigint"})


def rows_of(writer: int, seq: int, n: int) -> pa.Table:
    """``n`` rows that say whose append they are: (writer, seq, i, n)."""
    return SCHEMA.to_table([(writer, seq, i, n) for i in range(n)])


def read(path: Path, partition: int, start: int = 0, end: int | None = None) -> list[tuple[int, ...]]:
    """Rows ``[start, end)`` of ``partition``, planned and read as Spark's tasks do."""
    storage = EmbeddedStorage(str(path))
    try:
        end = storage.end_offsets(STREAM).get(partition, 0) if end is None else end
        if start == end:
            return []
        (split,) = storage.plan(STREAM, [OffsetRange(partition, start, end)])
        return [tuple(r.values()) for b in split.batches() for r in b.to_pylist()]
    finally:
        storage.close()


def open_log(path: Path, **options: int) -> tuple[EmbeddedStore, HandoffWriter]:
    store = EmbeddedStore(path)
    return store, HandoffWriter(HandoffLog(store, **options), STREAM, SCHEMA)


def files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in (path / "handoff").rglob("*.arrow")}


def indexed_files(store: EmbeddedStore) -> set[str]:
    with store.snapshot() as conn:
        return {f for (f,) in conn.execute("SELECT file FROM handoff_segments WHERE file != ''")}


async def test_concurrent_appends_share_writes_and_each_learns_its_exact_offsets(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    appender = GroupAppender(store, writer)
    got: dict[tuple[int, int], Appended] = {}

    async def activation(w: int) -> None:
        for seq in range(3):
            n = 1 + (w + seq) % 3
            got[(w, seq)] = await appender.append(lambda conn, w=w, seq=seq, n=n: (w % 4, rows_of(w, seq, n)))

    async with anyio.create_task_group() as tg:
        for w in range(300):
            tg.start_soon(activation, w)
    assert appender.writes <= 30  # 900 appends: ~one write per round of the 300 activations
    for partition in range(4):
        ranges = sorted(
            (a.first_offset, a.first_offset + a.row_count) for a in got.values() if a.partition == partition
        )
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # dense
        assert writer.end_offsets()[partition] == ranges[-1][1]
        assert len(read(tmp_path, partition)) == ranges[-1][1]
    for (w, seq), a in got.items():  # every caller's offsets hold exactly its rows
        assert a.partition == w % 4
        assert read(tmp_path, a.partition, a.first_offset, a.first_offset + a.row_count) == [
            (w, seq, i, a.row_count) for i in range(a.row_count)
        ]
    store.close()


async def test_a_caller_whose_rows_fail_gets_its_error_and_the_others_are_written(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    appender = GroupAppender(store, writer)

    def bad(conn: object) -> tuple[int, pa.Table]:
        raise ValueError("this caller's rows are wrong")

    results = {}

    async def call(name: str, stage) -> None:
        try:
            results[name] = await appender.append(stage)
        except ValueError as exc:
            results[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "first", lambda conn: (0, rows_of(1, 0, 2)))
        tg.start_soon(call, "bad", bad)
        tg.start_soon(call, "third", lambda conn: (0, rows_of(3, 0, 1)))
    assert isinstance(results["bad"], ValueError)
    assert results["first"] == Appended(0, 0, 2) and results["third"] == Appended(0, 2, 1)
    assert read(tmp_path, 0) == [(1, 0, 0, 2), (1, 0, 1, 2), (3, 0, 0, 1)]
    store.close()


async def test_a_write_failing_midway_indexes_nothing_and_every_caller_gets_the_error(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)  # files: a write that can fail after another succeeded
    appender = GroupAppender(store, writer)
    blocker = tmp_path / "handoff" / STREAM / "1"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a directory")  # partition 1's segment cannot be written
    errors: list[BaseException] = []

    async def call(partition: int, w: int) -> None:
        try:
            await appender.append(lambda conn: (partition, rows_of(w, 0, 1)))
        except OSError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 0, 0)  # leads alone
        for w in (2, 1, 4, 3, 6, 5):
            tg.start_soon(call, w % 2, w)  # gather: partition 0's file is written, then 1 fails
    # The second write rolled back whole: all six callers get the error, none of its rows is in.
    assert len(errors) == 6 and writer.end_offsets() == {0: 1}
    assert files(tmp_path) - indexed_files(store)  # the failed write's partition-0 file: unindexed
    blocker.unlink()
    async with anyio.create_task_group() as tg:  # the callers retry, as spark_sink.handoff does
        for w in (2, 4, 6, 1, 3, 5):
            tg.start_soon(call, w % 2, w)
    assert writer.end_offsets() == {0: 4, 1: 3}
    assert sorted(r[0] for r in read(tmp_path, 0)) == [0, 2, 4, 6] and sorted(r[0] for r in read(tmp_path, 1)) == [
        1,
        3,
        5,
    ]
    assert writer.log.remove_orphans(STREAM) == 1
    assert files(tmp_path) == indexed_files(store)
    store.close()


async def test_cancelled_callers_never_leave_the_next_write_without_a_leader(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    appender = GroupAppender(store, writer)
    rng = random.Random(7)
    done: dict[int, Appended] = {}

    async def caller(w: int, scope: anyio.CancelScope) -> None:
        with scope:
            done[w] = await appender.append(lambda conn: (0, rows_of(w, 0, 1)))

    with anyio.fail_after(60):  # a write left without a leader would hang here
        for round_ in range(20):
            scopes = [anyio.CancelScope() for _ in range(10)]
            async with anyio.create_task_group() as tg:
                for i, scope in enumerate(scopes):
                    tg.start_soon(caller, round_ * 10 + i, scope)
                for scope in rng.sample(scopes, 4):  # waiting, leading, or woken to lead
                    await anyio.sleep(rng.choice([0, 0, 0.0005, 0.002]))
                    scope.cancel()
        last = await appender.append(lambda conn: (0, rows_of(999, 0, 1)))
    rows = read(tmp_path, 0)
    assert len({r[0] for r in rows}) == len(rows) == last.first_offset + 1  # dense, each once
    for w, a in done.items():  # whoever returned is in, at its offsets
        assert rows[a.first_offset][0] == w
    assert 200 - 4 * 20 <= len(done) < 200


async def _open_all_at_the_end(gates: list[threading.Event]) -> None:
    """Opens the gates when the test is done or has failed: threads never outlive it."""
    try:
        await anyio.sleep_forever()
    finally:
        for gate in gates:
            gate.set()


async def test_a_leader_cancelled_before_its_write_began_passes_the_others_rows_on(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    appender = GroupAppender(store, writer)
    limiter = anyio.to_thread.current_default_thread_limiter()
    saved, limiter.total_tokens = limiter.total_tokens, 2
    gates = [threading.Event() for _ in range(3)]  # held by: a bystander, the first leader, another bystander
    results: dict[str, object] = {}
    doomed = anyio.CancelScope()

    async def call(name: str, w: int, scope: anyio.CancelScope | None = None) -> None:
        def stage(conn: object) -> tuple[int, pa.Table]:
            if name == "first":
                gates[1].wait()
            return 0, rows_of(w, 0, 1)

        with scope or anyio.CancelScope():
            results[name] = await appender.append(stage)

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, gates[0].wait)  # token 1, held
                tg.start_soon(_open_all_at_the_end, gates)
                await anyio.sleep(0.05)
                tg.start_soon(call, "first", 0)  # token 2, its write held by gates[1]
                await anyio.sleep(0.05)
                tg.start_soon(anyio.to_thread.run_sync, gates[2].wait)  # queued for a token
                await anyio.sleep(0.05)
                tg.start_soon(call, "a", 1, doomed)  # leads next, then waits for a token
                tg.start_soon(call, "b", 2)
                tg.start_soon(call, "c", 3)
                await anyio.sleep(0.05)
                gates[1].set()  # the first write ends; its token goes to the queued bystander
                while "first" not in results or limiter.statistics().tasks_waiting < 1:
                    await anyio.sleep(0.01)
                doomed.cancel()  # "a" leads, its write not begun
                await anyio.sleep(0.05)
                gates[0].set()
                gates[2].set()
                while len(results) < 3:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    finally:
        limiter.total_tokens = saved
    assert "a" not in results and results["b"] == Appended(0, 1, 1) and results["c"] == Appended(0, 2, 1)
    assert [r[0] for r in read(tmp_path, 0)] == [0, 2, 3]
    store.close()


def test_compaction_merges_inline_runs_into_files_and_a_planned_read_is_unchanged(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    big = rows_of(9, 0, 4000)  # over inline_bytes: a file of its own, which ends a run
    for table in [rows_of(0, 0, 2), rows_of(0, 1, 1), rows_of(0, 2, 3), big, rows_of(1, 0, 1), rows_of(1, 1, 1)]:
        with store.transaction() as conn:
            writer.append(conn, 0, table)
    log = writer.log
    assert [s.inline for s in log.segments(STREAM, 0, 0, 4008)] == [True, True, True, False, True, True]
    before = read(tmp_path, 0)
    storage = EmbeddedStorage(str(tmp_path))
    (planned,) = storage.plan(STREAM, [OffsetRange(0, 1, 4008)])  # planned before the merge
    assert compact(log, STREAM, 0, SCHEMA.arrow) == 5
    assert [(s.first_offset, s.row_count, s.inline) for s in log.segments(STREAM, 0, 0, 4008)] == [
        (0, 6, False),
        (6, 4000, False),
        (4006, 2, False),
    ]
    assert [tuple(r.values()) for b in planned.batches() for r in b.to_pylist()] == before[1:]
    assert read(tmp_path, 0) == before
    assert compact(log, STREAM, 0, SCHEMA.arrow) == 0  # nothing inline left
    assert writer.trim(0, 6) == 1 and read(tmp_path, 0, 6) == before[6:]
    assert files(tmp_path) == indexed_files(store)
    storage.close()
    store.close()


def segment_sizes(log: HandoffLog, end: int) -> list[tuple[int, int, bool]]:
    return [(s.first_offset, s.row_count, s.inline) for s in log.segments(STREAM, 0, 0, end)]


def test_compaction_joins_small_files_into_batch_sized_ones_under_a_read_planned_before(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)  # every append a file of its own
    for seq in range(7):
        with store.transaction() as conn:
            writer.append(conn, 0, rows_of(0, seq, 3))
    log, before = writer.log, read(tmp_path, 0)
    storage = EmbeddedStorage(str(tmp_path))
    (whole,) = storage.plan(STREAM, [OffsetRange(0, 1, 21)])
    (partly,) = storage.plan(STREAM, [OffsetRange(0, 2, 20)])
    started = partly._segment_batches()
    first = next(started)  # its first file is open: the rest are read after the compaction

    # Groups of at most 10 rows that the next file would overflow; the last 3 rows wait.
    assert compact(log, STREAM, 0, SCHEMA.arrow, target_rows=10) == 6
    assert segment_sizes(log, 21) == [(0, 9, False), (9, 9, False), (18, 3, False)]
    assert files(tmp_path) == indexed_files(store)  # the merged files are gone
    assert [tuple(r.values()) for b in whole.batches() for r in b.to_pylist()] == before[1:]
    rest = [first, *started]
    assert [tuple(r.values()) for b in rest for r in b.to_pylist()] == before[2:20]
    assert read(tmp_path, 0) == before
    assert compact(log, STREAM, 0, SCHEMA.arrow, target_rows=10) == 0  # one small file: nothing to join

    for seq in range(7, 10):
        with store.transaction() as conn:
            writer.append(conn, 0, rows_of(0, seq, 3))
    assert compact(log, STREAM, 0, SCHEMA.arrow, target_rows=10) == 3
    assert segment_sizes(log, 30) == [(0, 9, False), (9, 9, False), (18, 9, False), (27, 3, False)]
    assert read(tmp_path, 0) == before + [(0, seq, i, 3) for seq in range(7, 10) for i in range(3)]

    # A read planned before a trim that took its rows fails, not reads short.
    (late,) = storage.plan(STREAM, [OffsetRange(0, 0, 30)])
    assert writer.trim(0, 18) == 2
    with pytest.raises(HandoffDataLostError, match="offsets 0..18 .* are not in the log"):
        list(late.batches())
    storage.close()
    store.close()


async def test_the_appender_joins_small_files_once_they_fill_a_spark_batch(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)
    appender = GroupAppender(store, writer)
    for seq in range(14):  # 5,000-row files: 13 fill a 65,536-row batch, the 14th waits
        await appender.append(lambda conn, seq=seq: (0, rows_of(0, seq, 5000)))
    assert segment_sizes(writer.log, 70_000) == [(0, 65_000, False), (65_000, 5_000, False)]
    assert files(tmp_path) == indexed_files(store)
    assert read(tmp_path, 0) == [(0, seq, i, 5000) for seq in range(14) for i in range(5000)]
    store.close()


async def test_the_appender_works_a_backlog_off_one_group_a_write(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)
    for seq in range(39):  # small files a writer left behind (a restart, an older version)
        with store.transaction() as conn:
            writer.append(conn, 0, rows_of(0, seq, 5000))
    appender = GroupAppender(store, writer)
    batches = []
    for seq in range(39, 58):
        await appender.append(lambda conn, seq=seq: (0, rows_of(0, seq, 5000)))
        batches.append(sum(1 for _, rows, _ in segment_sizes(writer.log, 5000 * (seq + 1)) if rows == 65_000))
    # Nothing until its own appends fill a batch (the 14th), then one group each write until
    # the four full groups of 13 files are merged; the last six files wait for more.
    assert batches == [0] * 13 + [1, 2, 3, 4] + [4, 4]
    assert segment_sizes(writer.log, 290_000)[4:] == [(260_000 + 5000 * i, 5000, False) for i in range(6)]
    assert files(tmp_path) == indexed_files(store)
    assert read(tmp_path, 0) == [(0, seq, i, 5000) for seq in range(58) for i in range(5000)]
    store.close()


def test_every_range_planned_before_a_compaction_reads_its_rows_once_after_it(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)
    inline = HandoffWriter(HandoffLog(store), STREAM, SCHEMA)  # the same stream, its appends inline
    for seq, n in enumerate([3, 2, 3, 1, 3, 3, 2, 1, 3, 3]):
        with store.transaction() as conn:
            (inline if seq in (3, 6, 7) else writer).append(conn, 0, rows_of(0, seq, n))
    before = read(tmp_path, 0)
    end = len(before)
    storage = EmbeddedStorage(str(tmp_path))
    ranges = [OffsetRange(0, start, stop) for start in range(end) for stop in range(start + 1, end + 1)]
    splits, trimmed = storage.plan(STREAM, ranges), storage.plan(STREAM, ranges)
    # Half the reads have their first segment in hand when the compaction deletes the rest.
    reads = [split._segment_batches() for split in splits]
    got: list[list[pa.RecordBatch]] = [[next(r)] if n % 2 else [] for n, r in enumerate(reads)]

    # Groups of at most 9 rows: [0,9) and [9,18) become files; the files of [18,24) wait for more.
    assert compact(writer.log, STREAM, 0, SCHEMA.arrow, target_rows=9) == 8
    assert segment_sizes(writer.log, end) == [(0, 9, False), (9, 9, False), (18, 3, False), (21, 3, False)]
    for batches, rest in zip(got, reads, strict=True):
        batches += rest
    for r, batches in zip(ranges, got, strict=True):
        assert [tuple(row.values()) for b in batches for row in b.to_pylist()] == before[r.start : r.end], r
    assert files(tmp_path) == indexed_files(store)

    # After a trim of [0,9) too: a read whose rows were trimmed fails; none reads short or twice.
    assert writer.trim(0, 9) == 1
    lost = 0
    for r, split in zip(ranges, trimmed, strict=True):
        try:
            rows = [tuple(row.values()) for b in split.batches() for row in b.to_pylist()]
        except HandoffDataLostError:
            lost += 1
            assert r.start < 9, r
        else:
            assert rows == before[r.start : r.end], r
    assert lost == sum(r.start < 8 for r in ranges)  # [8,9) is inline: the read holds its row
    storage.close()
    store.close()


def test_readers_racing_appends_and_compactions_of_files_see_every_row_once(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)  # every append a file of its own
    stop, problems, spans = threading.Event(), list[str](), list[tuple[int, int]]()

    def reader() -> None:
        while not stop.is_set():
            end = writer.end_offsets().get(0, 0)
            start = random.randrange(end) if end else 0
            seen = read(tmp_path, 0, start, end)
            spans.append((start, end))
            whole = read(tmp_path, 0, 0, end)
            if seen != whole[start:]:
                problems.append(f"[{start}, {end}) read {len(seen)} rows, not {len(whole) - start}")
            seqs = [seq for _, seq, i, _ in whole if i == 0]
            if seqs != list(range(len(seqs))) or len(whole) != sum(1 + s % 3 for s in seqs):
                problems.append(f"appends {seqs[:20]}...: a gap or a repeat")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for seq in range(300):
            with store.transaction() as conn:
                writer.append(conn, 0, rows_of(0, seq, 1 + seq % 3))
            if seq % 4 == 3:  # files of 10 rows, then of 40: each compaction deletes files readers planned on
                compact(writer.log, STREAM, 0, SCHEMA.arrow, target_rows=10 if seq % 8 == 3 else 40)
    finally:
        stop.set()
        thread.join()
    assert not problems, problems[:5]
    assert len(spans) > 1
    assert len(read(tmp_path, 0)) == sum(1 + seq % 3 for seq in range(300))
    store.close()


KILLED_COMPACTION = """
import sys
from pathlib import Path
from tests.end_to_end.durable.test_handoff_group_commit import SCHEMA, STREAM, open_log, rows_of
from streams.backends.embedded.handoff_retention import compact
store, writer = open_log(Path(sys.argv[1]), inline_bytes=0)
seq = writer.end_offsets().get(0, 0)
while True:
    with store.transaction() as conn:
        writer.append(conn, 0, rows_of(0, seq, 1))
    seq += 1
    compact(writer.log, STREAM, 0, SCHEMA.arrow, target_rows=4)
    print(seq, flush=True)
"""


def test_a_compaction_killed_midway_leaves_every_row_readable_once_and_its_files_orphans(tmp_path: Path) -> None:
    rng = random.Random(7)
    root = Path(__file__).resolve().parents[3]
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_COMPACTION, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert proc.stdout is not None
        for _ in range(20 + rng.randrange(40)):
            proc.stdout.readline()
        time.sleep(rng.random() / 50)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        store, writer = open_log(tmp_path, inline_bytes=0)  # removes the orphans
        end = writer.end_offsets()[0]
        assert read(tmp_path, 0) == [(0, seq, 0, 1) for seq in range(end)]
        # New files left unindexed, old ones left unlinked: gone; only an append's file at the end waits.
        assert {f for f in files(tmp_path) - indexed_files(store) if int(Path(f).name[:20]) < end} == set()
        store.close()


def test_a_compaction_failing_midway_keeps_the_groups_before_and_leaves_no_file_behind(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)
    for seq in range(8):
        with store.transaction() as conn:
            writer.append(conn, 0, rows_of(0, seq, 3))
    before = read(tmp_path, 0)
    # A file of the second group [9,18) is unreadable (a bad disk, a stray write): each
    # compaction fails there, and the appender tries it again after every write.
    (bad,) = [s.file for s in writer.log.segments(STREAM, 0, 12, 13)]
    (tmp_path / bad).write_bytes(b"not an Arrow file")
    for _ in range(3):
        with pytest.raises(pa.ArrowInvalid):
            compact(writer.log, STREAM, 0, SCHEMA.arrow, target_rows=9)
        assert segment_sizes(writer.log, 24)[0] == (0, 9, False)  # the group before it: merged, once
        assert files(tmp_path) == indexed_files(store)  # no unindexed file piles up
    assert read(tmp_path, 0, 0, 9) == before[:9]
    store.close()


def test_compaction_rewrites_a_row_at_most_twice(tmp_path: Path) -> None:
    store, files_writer = open_log(tmp_path, inline_bytes=0)
    inline = HandoffWriter(HandoffLog(store), STREAM, SCHEMA)
    rng = random.Random(3)
    holder: dict[int, str] = {}  # offset -> the file (or '' inline) that holds it now
    rewrites: dict[int, int] = {}
    for seq in range(400):
        with store.transaction() as conn:  # appends of 1 to 25 rows, inline or files, a few at 20 or more
            (inline if rng.random() < 0.5 else files_writer).append(conn, 0, rows_of(0, seq, rng.randint(1, 25)))
        compact(files_writer.log, STREAM, 0, SCHEMA.arrow, target_rows=20)
        if seq % 50 == 49:
            files_writer.trim(0, files_writer.end_offsets()[0] // 2)
        start, end = files_writer.log.start_offsets(STREAM)[0], files_writer.end_offsets()[0]
        for s in files_writer.log.segments(STREAM, 0, start, end):
            for offset in range(s.first_offset, s.end_offset):
                if offset in holder and holder[offset] != s.file:
                    rewrites[offset] = rewrites.get(offset, 0) + 1
                holder[offset] = s.file
    assert max(rewrites.values()) == 2  # inline, a file of inline rows, a file of a Spark batch
    assert sum(rewrites.values()) < 2 * len(holder)
    store.close()


def test_files_a_compaction_left_unlinked_are_orphans_removed_under_a_reader_that_planned_on_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)
    for seq in range(7):  # [0,9) and [9,18) are joined, [18,21) waits
        with store.transaction() as conn:
            writer.append(conn, 0, rows_of(0, seq, 3))
    before, old = read(tmp_path, 0), files(tmp_path)
    storage = EmbeddedStorage(str(tmp_path))
    (split,) = storage.plan(STREAM, [OffsetRange(0, 4, 17)])
    reading = split._segment_batches()
    got = [next(reading)]  # rows 4..6 of the first old file
    with monkeypatch.context() as patch:  # killed after the commit, before deleting the old files
        patch.setattr(writer.log, "unlink", lambda files: None)
        assert compact(writer.log, STREAM, 0, SCHEMA.arrow, target_rows=9) == 6
    assert old < files(tmp_path) and len(indexed_files(store)) == 3  # two joined files and [18,21)
    got.append(next(reading))  # an old file, still there
    assert writer.log.remove_orphans(STREAM) == 6  # as after a Spark trim or at a writer's start
    assert files(tmp_path) == indexed_files(store)
    got += reading  # the rest, from the new file
    assert [tuple(r.values()) for b in got for r in b.to_pylist()] == before[4:17]
    storage.close()
    store.close()


async def test_an_appender_whose_compaction_fails_tries_again_after_another_batch_not_every_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, writer = open_log(tmp_path, inline_bytes=0)
    appender = GroupAppender(store, writer)
    for seq in range(13):
        await appender.append(lambda conn, seq=seq: (0, rows_of(0, seq, 5000)))
    (bad,) = [s.file for s in writer.log.segments(STREAM, 0, 0, 1)]
    (tmp_path / bad).write_bytes(b"not an Arrow file")  # each try fails on it
    for seq in range(13, 27):  # the 14th append fills a batch; the next 13 do not fill another
        await appender.append(lambda conn, seq=seq: (0, rows_of(0, seq, 5000)))
    tries = [r for r in caplog.records if r.getMessage().startswith("compacting handoff stream")]
    assert len(tries) == 1  # not one a write, each re-reading the group under the write lock
    assert files(tmp_path) == indexed_files(store)
    store.close()


def test_readers_racing_appends_and_compactions_see_every_row_once(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    writer.log.declare(STREAM, SCHEMA)
    appender = GroupAppender(store, writer, compact_bytes=4096)  # compact every few appends
    stop = threading.Event()
    problems: list[str] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            seen = read(tmp_path, 0)
            reads += 1
            by_append: dict[tuple[int, int], list[int]] = {}
            for w, seq, i, _ in seen:
                by_append.setdefault((w, seq), []).append(i)
            for (w, seq), got in by_append.items():
                if got != list(range(len(got))) or len(got) != 1 + seq % 3:
                    problems.append(f"append {(w, seq)} read as rows {got}")
            for w in {w for w, _ in by_append}:
                seqs = sorted(seq for ww, seq in by_append if ww == w)
                if seqs != list(range(len(seqs))):
                    problems.append(f"writer {w}: appends {seqs} (a gap or a repeat)")

    async def write() -> None:
        async def activation(w: int) -> None:
            for seq in range(40):
                await appender.append(lambda conn, w=w, seq=seq: (0, rows_of(w, seq, 1 + seq % 3)))

        async with anyio.create_task_group() as tg:
            for w in range(5):
                tg.start_soon(activation, w)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        anyio.run(write)
    finally:
        stop.set()
        thread.join()
    assert not problems, problems[:5]
    assert reads > 1 and len(files(tmp_path)) > 1  # the reads did race compactions
    assert len(read(tmp_path, 0)) == sum(1 + seq % 3 for seq in range(40)) * 5
    store.close()


KILLED_WRITER = """
import sys, anyio
from tests.end_to_end.durable.test_handoff_group_commit import SCHEMA, STREAM, open_log, rows_of
from streams.backends.embedded.handoff_commit import GroupAppender
from pathlib import Path
store, writer = open_log(Path(sys.argv[1]), inline_bytes=int(sys.argv[2]))
first = int(sys.argv[3])  # this run's writers are first, first + 1, ...
appender = GroupAppender(store, writer, compact_bytes=2048)

async def activation(w):
    for seq in range(10**6):
        await appender.append(lambda conn: (w % 2, rows_of(w, seq, 1 + seq % 3)))
        print(w, seq, flush=True)  # durable: the append returned

async def main():
    async with anyio.create_task_group() as tg:
        for w in range(first, first + 20):
            tg.start_soon(activation, w)
anyio.run(main)
"""


@pytest.mark.parametrize("inline_bytes", [0, 1 << 16], ids=["files", "inline"])
def test_a_writer_killed_mid_append_leaves_whole_appends_indexed(tmp_path: Path, inline_bytes: int) -> None:
    rng = random.Random(inline_bytes)
    root = Path(__file__).resolve().parents[3]
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(tmp_path), str(inline_bytes), str(100 * round_)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert proc.stdout is not None
        acknowledged = [proc.stdout.readline() for _ in range(50 + rng.randrange(200))]
        time.sleep(rng.random() / 20)
        proc.send_signal(signal.SIGKILL)
        later, _ = proc.communicate()
        # A line the kill cut short ("200 " with no sequence number) was never acknowledged.
        acknowledged += later.split("\n")[:-1] if later else []
        store, writer = open_log(tmp_path, inline_bytes=inline_bytes)
        appends: dict[tuple[int, int], list[int]] = {}
        for partition in (0, 1):
            rows = read(tmp_path, partition)  # readable: every indexed file exists, no gap
            assert len(rows) == writer.end_offsets()[partition]
            for w, seq, i, _ in rows:
                appends.setdefault((w, seq), []).append(i)
        for (_, seq), got in appends.items():  # each append whole, once
            assert got == list(range(1 + seq % 3))
        for w in {w for w, _ in appends}:  # each writer's appends: a prefix (each waited for the last)
            assert sorted(seq for ww, seq in appends if ww == w) == list(
                range(max(s for ww, s in appends if ww == w) + 1)
            )
        durable = {tuple(map(int, line.split())) for line in acknowledged if line.strip()}
        assert durable <= set(appends)  # what a caller was told is durable, is
        writer.log.remove_orphans(STREAM)
        ends = writer.end_offsets()
        for left in files(tmp_path) - indexed_files(store):  # kept only until an append passes them
            assert int(Path(left).name.partition("-")[0]) >= ends[int(Path(left).parent.name)]
        store.close()
    store, writer = open_log(tmp_path, inline_bytes=inline_bytes)
    for partition in (0, 1):
        with store.transaction() as conn:
            writer.append(conn, partition, rows_of(99, 0, 1))
    writer.log.remove_orphans(STREAM)
    assert files(tmp_path) == indexed_files(store)  # the kills' orphans: gone
    store.close()


async def test_the_sink_hands_off_the_windows_of_many_activations_once(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    sink = EmbeddedHandoffSink(store, Handoff("totals", {"count": "bigint"}))
    windows = {d: [WindowResult(f"k{d}", 5.0 * n, 5.0 * n + 5, n, None) for n in range(3)] for d in range(400)}

    async def activation(d: int) -> int:
        return await sink.write(f"dev/{d}", "Totals", d % 3, windows[d])

    counts: list[int] = []

    async def run_all() -> None:
        async def one(d: int) -> None:
            counts.append(await activation(d))

        async with anyio.create_task_group() as tg:
            for d in range(400):
                tg.start_soon(one, d)

    await run_all()
    assert counts == [3] * 400 and sink._appender.writes < 40
    counts.clear()
    await run_all()  # a replay after a crash: every window is marked handed off
    assert counts == [0] * 400
    log = HandoffLog(store)
    assert sum(log.end_offsets("totals").values()) == 1200
    store.close()


def test_retention_removes_a_prefix_of_whole_segments_by_size_and_by_age(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    log = writer.log
    for seq, (n, when) in enumerate([(2, 100.0), (3, 100.0), (4000, 200.0), (1, 200.0), (2, 300.0)]):
        with store.transaction() as conn:  # seq 2 is a file of its own, the rest inline
            segment = log.append(conn, STREAM, 0, rows_of(0, seq, n))
            conn.execute(
                "UPDATE handoff_segments SET appended = ? WHERE first_offset = ?", (when, segment.first_offset)
            )
    before = read(tmp_path, 0)
    by_size = RetentionPolicy(max_age=None, max_records_per_queue=4001)
    assert expire(log, STREAM, by_size, now=1000.0) == {
        0: 5
    }  # [0,2) and [2,5) go; [5,4005) holds row 4001 from the end
    assert log.start_offsets(STREAM) == {0: 5} and read(tmp_path, 0, 5) == before[5:]
    by_age = RetentionPolicy(max_age=750.0, max_records_per_queue=None)
    assert expire(log, STREAM, by_age, now=1000.0) == {0: 4001}  # appended before 250: the file and [4005,4006)
    assert files(tmp_path) == set() and read(tmp_path, 0, 4006) == before[4006:]
    assert expire(log, STREAM, by_age, now=1000.0) == {}
    assert log.end_offsets(STREAM) == {0: 4008}  # offsets never move
    store.close()


def test_a_compacted_file_is_as_young_as_its_newest_row(tmp_path: Path) -> None:
    store, writer = open_log(tmp_path)
    for seq, when in enumerate([100.0, 900.0]):
        with store.transaction() as conn:
            segment = writer.log.append(conn, STREAM, 0, rows_of(0, seq, 1))
            conn.execute(
                "UPDATE handoff_segments SET appended = ? WHERE first_offset = ?", (when, segment.first_offset)
            )
    assert compact(writer.log, STREAM, 0, SCHEMA.arrow) == 2
    assert expire(writer.log, STREAM, RetentionPolicy(max_age=500.0), now=1000.0) == {}  # row 1 is 100 s old
    assert expire(writer.log, STREAM, RetentionPolicy(max_age=50.0), now=1000.0) == {0: 2}
    store.close()


async def test_the_embedded_backend_bounds_its_handoff_log_by_the_queues_retention(tmp_path: Path) -> None:
    backend = EmbeddedBackend.open(
        tmp_path, queues=2, retention=RetentionPolicy(max_records_per_queue=10, interval=0.01)
    )
    sink = await backend.open_handoff_sink("w1", Handoff("totals", {"count": "bigint"}))
    for n in range(40):
        await sink.write("dev/1", "Totals", 0, [WindowResult("k", 5.0 * n, 5.0 * n + 5, n, None)])
        await anyio.sleep(0.011)  # past the interval: every write applies the retention
    log = HandoffLog(backend.store)
    assert log.end_offsets("totals") == {0: 40}
    assert log.start_offsets("totals") == {0: 30}  # whole one-row segments: exactly the limit is kept
    backend.store.close()
