"""Writers of the embedded store take turns: a process committing in a tight loop does not
starve another process's writes (without turns, a steady producer made a worker's deliveries,
checkpoints and lease renewals fail past busy_timeout)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from streams.backends.embedded.store import EmbeddedStore, WriteTurns
from tests.helpers import start_worker

HOT_WRITER = Path(__file__).with_name("hot_writer.py")


async def test_a_writer_beside_a_process_committing_in_a_tight_loop_gets_its_turns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = EmbeddedStore(tmp_path, busy_timeout=0.2)
    store.require_schema("mine", ["CREATE TABLE mine_rows(n INTEGER)"])
    with store.transaction() as conn:  # the schema exists before the other process starts
        conn.execute("SELECT 1")
    caplog.set_level(logging.WARNING, logger="headrace.store")
    hot = start_worker(HOT_WRITER, tmp_path, 6.0, ready="writing")
    written = 0
    try:
        while hot.poll() is None and written < 300:
            await store.write(lambda conn: conn.execute("INSERT INTO mine_rows VALUES (1)"))
            written += 1
    finally:
        out, _ = hot.communicate(timeout=30)
    assert hot.returncode == 0
    other_commits = int(out.strip())
    assert written == 300  # every write landed, none failed, while the other kept writing
    assert other_commits > 0
    # Turns, not SQLite's busy handler, ordered the writers: nobody had to back off.
    assert not [r for r in caplog.records if "backing off" in r.getMessage()]
    with store.snapshot() as conn:
        assert conn.execute("SELECT count(*) FROM mine_rows").fetchone()[0] == 300
    store.close()


def test_the_threads_of_a_process_take_turns_in_arrival_order(tmp_path: Path) -> None:
    turns = WriteTurns(tmp_path / "headrace.db")
    order: list[int] = []
    started: list[threading.Event] = [threading.Event() for _ in range(5)]

    def writer(n: int) -> None:
        started[n].set()
        with turns.turn():
            order.append(n)

    with turns.turn():
        threads = []
        for n in range(5):  # each queues up while the turn is held
            t = threading.Thread(target=writer, args=(n,))
            t.start()
            started[n].wait()
            while turns._local._next < n + 2:  # it has its ticket before the next one starts
                time.sleep(0.001)
            threads.append(t)
    for t in threads:
        t.join()
    assert order == [0, 1, 2, 3, 4]


def test_an_urgent_writer_goes_before_the_writers_already_waiting(tmp_path: Path) -> None:
    # A lease renewal queued behind a backlog of handoff appends would make the worker lose
    # its queues: it waits for the write in progress only.
    turns = WriteTurns(tmp_path / "headrace.db")
    order: list[str] = []

    def writer(name: str, urgent: bool) -> None:
        with turns.turn(urgent):
            order.append(name)

    def waiting(name: str, urgent: bool, tickets: int, urgents: int) -> threading.Thread:
        t = threading.Thread(target=writer, args=(name, urgent))
        t.start()
        while turns._local._next < tickets or turns._local._urgent < urgents:  # it has queued
            time.sleep(0.001)
        return t

    with turns.turn():
        threads = [
            waiting("append-1", False, 2, 0),
            waiting("append-2", False, 3, 0),
            waiting("renewal", True, 3, 1),
            waiting("append-3", False, 4, 1),
        ]
    for t in threads:
        t.join()
    assert order == ["renewal", "append-1", "append-2", "append-3"]


async def test_an_urgent_write_commits_like_any_other(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    store.require_schema("mine", ["CREATE TABLE mine_rows(n INTEGER)"])
    await store.write(lambda conn: conn.execute("INSERT INTO mine_rows VALUES (1)"), urgent=True)
    await store.write(lambda conn: conn.execute("INSERT INTO mine_rows VALUES (2)"))
    with store.snapshot() as conn:
        assert conn.execute("SELECT n FROM mine_rows ORDER BY n").fetchall() == [(1,), (2,)]
    store.close()


def test_a_turn_is_reentrant_in_its_thread(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    store.require_schema("mine", ["CREATE TABLE mine_rows(n INTEGER)"])
    with store.transaction() as conn:
        conn.execute("INSERT INTO mine_rows VALUES (1)")
        with store._turns.turn():  # a nested turn in the same thread does not wait on itself
            pass
    with store.snapshot() as conn:
        assert conn.execute("SELECT count(*) FROM mine_rows").fetchone()[0] == 1
    store.close()


async def test_writers_locked_out_by_a_writer_that_takes_no_turns_say_so_once_and_all_land(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = EmbeddedStore(tmp_path, busy_timeout=0.05)
    store.require_schema("mine", ["CREATE TABLE mine_rows(n INTEGER)"])
    with store.transaction() as conn:
        conn.execute("SELECT 1")
    caplog.set_level(logging.WARNING, logger="headrace.store")
    shell = sqlite3.connect(tmp_path / "headrace.db", isolation_level=None)
    shell.execute("BEGIN IMMEDIATE")  # the sqlite3 shell, mid-transaction

    def write(n: int) -> None:
        with store.transaction() as conn:
            conn.execute("INSERT INTO mine_rows VALUES (?)", (n,))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # ten busy_timeouts: the writer whose turn it is backs off, the others wait
    assert all(thread.is_alive() for thread in threads)
    shell.execute("ROLLBACK")
    shell.close()
    for thread in threads:
        thread.join(timeout=30)
    lines = [r.getMessage() for r in caplog.records if r.name == "headrace.store"]
    assert len(lines) == 2, lines
    assert "stayed locked by another writer for more than busy_timeout=0.05 s; backing off" in lines[0]
    assert "is writable again after " in lines[1]
    with store.snapshot() as conn:
        assert sorted(n for (n,) in conn.execute("SELECT n FROM mine_rows")) == [0, 1, 2, 3]
    store.close()
