"""The embedded store's table of saved states: consumer types by id, and a store written in
the layout before them (store layout 1, each row naming its type) upgraded in place, every
state read back exactly."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import msgpack
import pytest

from streams.backends.embedded.changelog_copy import open_changelog_copy
from streams.backends.embedded.queue_tables import (
    QUEUE_SCHEMA,
    STATE_AREA,
    STATE_SCHEMA,
    every_state,
    expire_states,
    read_states,
    saved_state,
    saved_states,
    write_states,
)
from streams.backends.embedded.store import LAYOUT, EmbeddedStore
from streams.core.errors import StoreError
from streams.core.ids import SequenceToken
from streams.core.state import (
    PROCESSING_TIME,
    Durable,
    TimerTable,
    _declares,
    _next_timer,
    decode,
    pack_unit,
    unpack_unit,
    wake_and_declares,
)
from tests.streams.cli.helpers import clean_env, headrace

# The SQL that made the state table in layout 1, as that headrace ran it.
LAYOUT_1_STATES = [
    "CREATE TABLE store_areas(area TEXT PRIMARY KEY)",
    "CREATE TABLE activation_states("
    " queue INTEGER NOT NULL, consumer TEXT NOT NULL, stream TEXT NOT NULL,"
    " seq INTEGER NOT NULL, idx INTEGER NOT NULL, state BLOB NOT NULL,"
    " touched REAL, wake REAL, durable INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (queue, consumer, stream))",
    "CREATE INDEX activation_states_touched ON activation_states(queue, consumer, touched) WHERE durable",
    "CREATE INDEX activation_states_restored ON activation_states(queue) WHERE NOT durable OR wake IS NOT NULL",
    "INSERT INTO store_areas(area) VALUES ('activation_state')",
    "PRAGMA user_version = 1",
]

# (queue, consumer, stream, seq, idx, state, touched, wake, durable): window states (not
# durable), durable ones with and without a timer, never touched, two types sharing streams.
OLD_ROWS = [
    (0, "app.Meter", "devices/1", 41, 0, b"\xc1\x95\x01\x90", 1_700_000_000.25, None, 1),
    (0, "app.Meter", "devices/2", 42, 3, b"\x00" * 300, 1_700_000_100.5, 1_700_000_900.0, 1),
    (0, "app.Windows", "devices/1", 7, 1, b"windows", None, None, 0),
    (1, "app.Meter", "devices/3", 9, 0, b"", 1_600_000_000.0, None, 1),
    (1, "app.Windows", "devices/\u00e9", 2**40, 65535, bytes(range(256)), 5.0, 6.0, 0),
    (3, "app.Zeta", "z/0", 0, 0, b"z", None, 1.5, 1),
]


def layout_1_store(path: Path, rows: list[tuple[object, ...]] = OLD_ROWS) -> None:
    path.mkdir(parents=True)
    conn = sqlite3.connect(path / EmbeddedStore.FILE_NAME)
    try:
        for sql in LAYOUT_1_STATES:
            conn.execute(sql)
        conn.executemany("INSERT INTO activation_states VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.commit()
    finally:
        conn.close()


def every_column(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    """Every state row as ``OLD_ROWS`` has it; a row never touched reads as touched at 0 (the
    upgrade's stand-in, which every sweep finds expired, as it found the NULL)."""
    return conn.execute(
        "SELECT s.queue, c.name, s.stream, s.seq, s.idx, s.state, NULLIF(s.touched, 0), s.wake, s.durable"
        " FROM activation_states s JOIN state_consumers c ON c.id = s.consumer_id ORDER BY 1, 2, 3"
    ).fetchall()


def test_a_store_of_layout_1_is_upgraded_in_place_and_reads_every_state_exactly(tmp_path: Path) -> None:
    layout_1_store(tmp_path / "store")
    with EmbeddedStore(tmp_path / "store") as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.snapshot() as conn:
            assert every_column(conn) == sorted(OLD_ROWS)
            assert conn.execute("PRAGMA user_version").fetchone() == (LAYOUT,) == (2,)
            assert [a for (a,) in conn.execute("SELECT area FROM store_areas")] == [STATE_AREA]
            assert every_state(conn) == sorted(
                [(q, c, s, SequenceToken(seq, idx), state) for q, c, s, seq, idx, state, *_ in OLD_ROWS],
                key=lambda row: (row[1], row[2]),
            )
            # what a worker reads at start: window states and durable ones with a timer
            assert read_states(0, conn) == {
                ("app.Meter", "devices/2"): (SequenceToken(42, 3), b"\x00" * 300),
                ("app.Windows", "devices/1"): (SequenceToken(7, 1), b"windows"),
            }
            assert read_states(3, conn) == {("app.Zeta", "z/0"): (SequenceToken(0, 0), b"z")}
            # and the parked ones, by key
            assert saved_state(1, ("app.Meter", "devices/3"), conn) == (SequenceToken(9, 0), b"")
            assert saved_state(1, ("app.Meter", "devices/1"), conn) is None  # another queue's
            assert saved_state(0, ("app.Other", "devices/1"), conn) is None  # a type with no states
            assert saved_states(
                0, [("app.Meter", "devices/1"), ("app.Windows", "devices/1"), ("app.Nope", "x")], conn
            ) == {
                ("app.Meter", "devices/1"): (SequenceToken(41, 0), b"\xc1\x95\x01\x90"),
                ("app.Windows", "devices/1"): (SequenceToken(7, 1), b"windows"),
            }
        with store.transaction() as conn:
            # rows of a type the upgrade named, of a new one, and a delete, all by name
            write_states(
                0,
                (
                    [("app.Meter", "devices/1", 50, 0, b"m"), ("app.New", "devices/1", 51, 0, b"n")],
                    [("app.Windows", "devices/1")],
                ),
                conn,
                written_at=10.0,
            )
            assert expire_states(1, "app.Meter", 1_600_000_001.0, conn) == 1  # devices/3's
        with store.snapshot() as conn:
            assert saved_states(
                0, [("app.Meter", "devices/1"), ("app.New", "devices/1"), ("app.Windows", "devices/1")], conn
            ) == {
                ("app.Meter", "devices/1"): (SequenceToken(50, 0), b"m"),
                ("app.New", "devices/1"): (SequenceToken(51, 0), b"n"),
            }
            ids = dict(conn.execute("SELECT name, id FROM state_consumers").fetchall())
            assert sorted(ids) == ["app.Meter", "app.New", "app.Windows", "app.Zeta"]
            assert len(set(ids.values())) == 4
            assert saved_state(1, ("app.Meter", "devices/3"), conn) is None


def test_an_upgrade_that_fails_leaves_the_store_in_layout_1(tmp_path: Path) -> None:
    # The upgrade made to fail midway: a table of the name it makes is there already.
    layout_1_store(tmp_path / "store")
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        conn.execute("CREATE TABLE state_consumers(x)")
    with EmbeddedStore(tmp_path / "store") as store:
        store.require_schema("queue", QUEUE_SCHEMA)  # made first, as a worker makes it
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with pytest.raises(StoreError, match="state_consumers already exists"), store.connection():
            pass
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        assert conn.execute("SELECT * FROM activation_states ORDER BY 1, 2, 3").fetchall() == sorted(OLD_ROWS)
        # the build that wrote it still reads it: the areas it knows are as it made them
        assert conn.execute("SELECT area FROM store_areas ORDER BY area").fetchall() == [
            ("activation_state",),
            ("queue",),
        ]


def test_a_process_that_leaves_the_states_as_they_are_leaves_the_store_in_layout_1(tmp_path: Path) -> None:
    layout_1_store(tmp_path / "store")
    with EmbeddedStore(tmp_path / "store") as store:
        store.require_schema("queue", QUEUE_SCHEMA)  # a process that reads no states
        with store.connection():
            pass
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)  # an older build still reads it
        assert conn.execute("SELECT * FROM activation_states ORDER BY 1, 2, 3").fetchall() == sorted(OLD_ROWS)
    with EmbeddedStore(tmp_path / "store") as store:  # and a worker of this one upgrades it
        store.require_schema("queue", QUEUE_SCHEMA)
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.snapshot() as conn:
            assert conn.execute("PRAGMA user_version").fetchone() == (LAYOUT,)
            assert every_column(conn) == sorted(OLD_ROWS)


# What the build of layout 1 runs on the state table (its headrace state, its workers).
LAYOUT_1_STATEMENTS = [
    "SELECT queue, consumer, stream, seq, idx, state FROM activation_states ORDER BY consumer, stream",
    "SELECT seq, idx, state FROM activation_states WHERE queue = 0 AND consumer = 'app.Meter' AND stream = 'devices/1'",
    "INSERT INTO activation_states(queue, consumer, stream, seq, idx, state, touched, wake, durable)"
    " VALUES (0, 'app.Meter', 'devices/1', 99, 0, x'00', NULL, NULL, 1)"
    " ON CONFLICT(queue, consumer, stream) DO UPDATE SET seq = excluded.seq",
    "DELETE FROM activation_states WHERE queue = 0 AND consumer = 'app.Meter' AND stream = 'devices/1'",
]


@pytest.mark.parametrize("statement", LAYOUT_1_STATEMENTS)
def test_an_older_builds_statement_fails_on_an_upgraded_store_rather_than_misread_it(
    tmp_path: Path, statement: str
) -> None:
    # An older build's `headrace state` does not check the layout, and its worker started
    # before the upgrade has checked it already: each must fail, not read ids as names.
    layout_1_store(tmp_path / "store")
    with EmbeddedStore(tmp_path / "store") as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.connection():
            pass
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        with pytest.raises(sqlite3.OperationalError, match="(no such column: consumer|has no column named consumer)$"):
            conn.execute(statement)
        assert every_column(conn) == sorted(OLD_ROWS)


def test_headrace_state_shows_a_store_of_layout_1_as_it_does_once_upgraded_and_changes_nothing(tmp_path: Path) -> None:
    layout_1_store(tmp_path / "store")
    before = headrace("state", "--path", tmp_path / "store", "app.Meter", "--json", cwd=tmp_path)
    assert (before.returncode, before.stderr) == (0, "")
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)  # read, not upgraded
    with EmbeddedStore(tmp_path / "store") as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.connection():
            pass
    after = headrace("state", "--path", tmp_path / "store", "app.Meter", "--json", cwd=tmp_path)
    assert (after.returncode, after.stderr) == (0, "")
    shown = [(s["queue"], s["stream"], s["position"]) for s in map(json.loads, after.stdout.splitlines())]
    assert shown == [(0, "devices/1", [41, 0]), (0, "devices/2", [42, 3]), (1, "devices/3", [9, 0])]
    assert before.stdout == after.stdout


def test_headrace_state_refuses_a_store_of_a_newer_layout_in_one_line(tmp_path: Path) -> None:
    layout_1_store(tmp_path / "store")
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        conn.execute(f"PRAGMA user_version = {LAYOUT + 1}")
    shown = headrace("state", "--path", tmp_path / "store", "app.Meter", cwd=tmp_path)
    assert shown.returncode != 0 and "Traceback" not in shown.stderr, shown.stderr
    (line,) = shown.stderr.strip().splitlines()
    assert f"has layout {LAYOUT + 1}, newer than this headrace reads" in line, line


def test_a_type_name_is_kept_once_however_many_streams_it_has(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.transaction() as conn:
            write_states(
                0, ([("a.long.module.path.ConsumerType", f"ns/{n}", n, 0, b"s") for n in range(500)], []), conn
            )
        with store.snapshot() as conn:
            assert conn.execute("SELECT count(*) FROM state_consumers").fetchone() == (1,)
            assert conn.execute("SELECT count(*) FROM activation_states").fetchone() == (500,)
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'activation_states'").fetchone()
            assert "consumer_id INTEGER" in sql and "WITHOUT ROWID" in sql


def test_a_local_state_store_of_layout_1_is_upgraded_too(tmp_path: Path) -> None:
    layout_1_store(tmp_path / "states" / "worker-0")

    async def main() -> None:
        copy = open_changelog_copy(tmp_path / "states")
        try:
            assert copy.saved_state(0, ("app.Meter", "devices/2")) == (SequenceToken(42, 3), b"\x00" * 300)
            assert copy.count(1) == 2
            assert await copy.idle_keys(0, "app.Meter", 1_700_000_050.0) == [("app.Meter", "devices/1")]
            assert await copy.idle_keys(0, "app.Never", float("inf")) == []  # a type with no id
        finally:
            copy.close()

    anyio.run(main)


class _Meter:
    total = Durable(0)


class _Plain:
    pass


def _units() -> list[bytes]:
    meter = _Meter()
    meter.total = 3
    both = TimerTable(event_time=True)
    both.at_event_time(5.0, "e")
    both.at_processing_time(1_700_000_000.5, "p")
    both.at_processing_time(1_700_000_009.0, "q")
    event_only = TimerTable(event_time=True)
    event_only.at_event_time(5.0)
    return [
        pack_unit(meter, None, None),  # durable fields
        pack_unit(_Plain(), b"w" * 5000, None),  # windows only
        pack_unit(_Plain(), b"w", None, held=b"h" * 300),  # windows and held events
        pack_unit(meter, b"w" * 100, both),  # fields, windows, processing timers: woken
        pack_unit(_Plain(), None, event_only),  # an event-time timer: no wake, declares
        pack_unit(_Plain(), None, TimerTable(event_time=False)),  # an empty table
        b"\xc1" + msgpack.packb([2, None, {"a": 1}, None]),  # four parts
        b"\xc1" + msgpack.packb([1, None, {}, [[PROCESSING_TIME, "", 5.0, None]], None]),  # format 1
        b"\x82\xa1a\x01\xa1b\x02",  # a window-only snapshot (a map)
    ]


@pytest.mark.parametrize("unit", _units())
def test_what_a_store_keeps_beside_a_state_is_read_as_from_the_whole_unit(unit: bytes) -> None:
    # wake_and_declares leaves windows and held events unread: the same answer as reading all
    whole = decode(unit[1:]) if unit[:1] == b"\xc1" else None
    expected = (_next_timer(whole), _declares(whole)) if whole is not None else (None, False)
    assert wake_and_declares(unit) == expected


def test_the_wake_of_a_unit_with_processing_timers_is_its_first(tmp_path: Path) -> None:
    timers = TimerTable(event_time=False)
    timers.at_processing_time(1_700_000_009.0, "q")
    timers.at_processing_time(1_700_000_000.5, "p")
    assert wake_and_declares(pack_unit(_Plain(), b"w" * 100, timers)) == (1_700_000_000.5, True)
    with EmbeddedStore(tmp_path) as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.transaction() as conn:
            write_states(0, ([("T", "s/1", 1, 0, pack_unit(_Plain(), None, timers))], []), conn)
            assert conn.execute("SELECT wake, durable FROM activation_states").fetchall() == [(1_700_000_000.5, 1)]


class _Grid:
    cells = Durable(dict)


def test_a_unit_the_store_takes_is_restored_with_the_keys_it_was_saved_with() -> None:
    # A store takes a unit once it reads what it keeps beside it; the unit must then be
    # restorable, tuple keys (msgpack arrays) included, not refused at the next activation.
    grid = _Grid()
    grid.cells = {(1, 2): "x", (3, 4): "y"}
    unit = pack_unit(grid, b"w", None)
    assert wake_and_declares(unit) == (None, True)
    restored = _Grid()
    assert unpack_unit(restored, unit, None) == (b"w", None)
    assert restored.cells == {(1, 2): "x", (3, 4): "y"}


def test_a_worker_reads_the_states_it_restores_without_reading_the_parked_ones(tmp_path: Path) -> None:
    # read_states goes through the index of what a worker restores: the work it does follows
    # the 2 states it returns, not the 20,000 parked durable ones beside them.
    meter = _Meter()
    meter.total = 1
    parked = [("app.Meter", f"devices/{n}", n, 0, pack_unit(meter, None, None)) for n in range(20_000)]
    with EmbeddedStore(tmp_path) as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.transaction() as conn:
            write_states(
                0, ([*parked, ("app.Windows", "w/1", 1, 0, b"w"), ("app.Windows", "w/2", 2, 0, b"w")], []), conn
            )
        with store.snapshot() as conn:
            steps: list[None] = []
            conn.set_progress_handler(lambda: steps.append(None), 1000)  # every 1,000 VM steps
            try:
                assert sorted(read_states(0, conn)) == [("app.Windows", "w/1"), ("app.Windows", "w/2")]
            finally:
                conn.set_progress_handler(None, 0)
            assert len(steps) < 5, f"{len(steps) * 1000:,} steps"


def test_an_expiry_sweep_reads_the_expired_states_not_every_parked_one(tmp_path: Path) -> None:
    # expire_states is a range on the index of when each durable state was written: its work
    # follows the 2 states it deletes, not the 20,000 fresh ones of the same type and queue.
    meter = _Meter()
    meter.total = 1
    fresh = [("app.Meter", f"devices/{n}", n, 0, pack_unit(meter, None, None)) for n in range(20_000)]
    old = [("app.Meter", f"old/{n}", n, 0, pack_unit(meter, None, None)) for n in range(2)]
    with EmbeddedStore(tmp_path) as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.transaction() as conn:
            write_states(0, (old, []), conn, written_at=1_000.0)
            write_states(0, (fresh, []), conn, written_at=2_000.0)
        with store.transaction() as conn:
            steps: list[None] = []
            conn.set_progress_handler(lambda: steps.append(None), 1000)  # every 1,000 VM steps
            try:
                assert expire_states(0, "app.Meter", 1_500.0, conn) == 2
            finally:
                conn.set_progress_handler(None, 0)
            assert len(steps) < 5, f"{len(steps) * 1000:,} steps"
            (left,) = conn.execute("SELECT count(*) FROM activation_states").fetchone()
            assert left == 20_000


def test_headrace_state_shows_a_field_with_tuple_keys(tmp_path: Path) -> None:
    grid = _Grid()
    grid.cells = {(1, 2): "x", (3, 4): b"\x01"}
    with EmbeddedStore(tmp_path / "store") as store:
        store.require_schema(STATE_AREA, STATE_SCHEMA)
        with store.transaction() as conn:
            write_states(0, ([("app.Grid", "grids/1", 5, 0, pack_unit(grid, None, None))], []), conn)
    listed = headrace("state", "--path", tmp_path / "store", "Grid", cwd=tmp_path)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert '{"cells": {"(1, 2)": "x", "(3, 4)": "01"}}' in listed.stdout
    for shown in (
        headrace("state", "--path", tmp_path / "store", "Grid", "--json", cwd=tmp_path),
        headrace("state", "--path", tmp_path / "store", "Grid", "grids/1", cwd=tmp_path),
    ):
        assert (shown.returncode, shown.stderr) == (0, "")
        assert json.loads(shown.stdout)["fields"] == {"cells": {"(1, 2)": "x", "(3, 4)": "01"}}


def test_an_id_given_in_a_write_that_rolls_back_is_given_again_to_whoever_writes_next(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as first, EmbeddedStore(tmp_path) as second:  # two writers, as two processes
        first.require_schema(STATE_AREA, STATE_SCHEMA)
        second.require_schema(STATE_AREA, STATE_SCHEMA)
        with pytest.raises(RuntimeError), first.transaction() as conn:
            write_states(0, ([("app.One", "s/1", 1, 0, b"one")], []), conn)
            raise RuntimeError("the checkpoint fails after its states are written")
        with second.transaction() as conn:
            write_states(0, ([("app.Two", "s/1", 2, 0, b"two")], []), conn)
        with first.transaction() as conn:
            write_states(0, ([("app.One", "s/2", 3, 0, b"one again")], []), conn)
            # a sweep of a type that has no id yet touches nothing
            assert expire_states(0, "app.Never", float("inf"), conn) == 0
        with first.snapshot() as conn:
            assert [(c, s, state) for _, c, s, _, state in every_state(conn)] == [
                ("app.One", "s/2", b"one again"),
                ("app.Two", "s/1", b"two"),
            ]
            assert conn.execute("SELECT name FROM state_consumers ORDER BY id").fetchall() == [
                ("app.Two",),
                ("app.One",),
            ]


_OPEN_AND_READ = """
import sys
from streams.backends.embedded.queue_tables import QUEUE_SCHEMA, STATE_AREA, STATE_SCHEMA, saved_state
from streams.backends.embedded.store import EmbeddedStore
with EmbeddedStore(sys.argv[1]) as store:
    store.require_schema("queue", QUEUE_SCHEMA)
    store.require_schema(STATE_AREA, STATE_SCHEMA)
    with store.snapshot() as conn:
        found = sum(saved_state(2, ("app.Many", f"m/{n}"), conn) is not None for n in range(20_000))
        print(conn.execute("PRAGMA user_version").fetchone()[0], found)
"""


def test_two_processes_opening_a_store_of_layout_1_at_once_upgrade_it_once(tmp_path: Path) -> None:
    many = [(2, "app.Many", f"m/{n}", n, 0, b"x" * 40, 1.0, None, 1) for n in range(20_000)]
    layout_1_store(tmp_path / "store", OLD_ROWS + many)
    env = clean_env()
    opened = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AND_READ, str(tmp_path / "store")], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=60)[0].split() for process in opened]
    assert [process.returncode for process in opened] == [0, 0]
    assert outputs == [[str(LAYOUT), "20000"]] * 2  # each reads every state, in the new layout
    with sqlite3.connect(tmp_path / "store" / EmbeddedStore.FILE_NAME) as conn:
        assert every_column(conn) == sorted(OLD_ROWS + many)
        assert sorted(a for (a,) in conn.execute("SELECT area FROM store_areas")) == [STATE_AREA, "queue"]
