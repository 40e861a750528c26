"""The Kafka workers' local state store on its own (streams.backends.embedded.changelog_copy):
a slot per worker, the changelog offset that moves only over contiguous writes, a damaged
file or one of another layout moved aside, the full check at open skipped only for files a
clean close left as they are."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

import pytest

from streams import Durable
from streams.backends.embedded.changelog_copy import EXPIRED_A_SWEEP, open_changelog_copy
from streams.backends.embedded.store import LAYOUT
from streams.backends.kafka.changelog import KafkaChangelog
from streams.backends.kafka.settings import KafkaSettings
from streams.core.errors import LocalStoreDamagedError, QueueFailedError
from streams.core.ids import SequenceToken
from streams.core.retry import OutageLog
from streams.core.state import pack_unit

ROW = ("Counts", "m/1", 41, 0, b"s")


class Device:
    count = Durable(0)

    def __init__(self) -> None:
        self.count = 1


async def test_two_workers_on_one_machine_take_two_files_and_a_restart_takes_its_own_back(tmp_path: Path) -> None:
    first, second = open_changelog_copy(tmp_path), open_changelog_copy(tmp_path)
    try:
        assert (first.path.parent.name, second.path.parent.name) == ("worker-0", "worker-1")
        await first.apply(0, ([ROW], []), next_offset=1)
        assert second.offset(0) is None and second.count(0) == 0
    finally:
        first.close()
    again = open_changelog_copy(tmp_path)  # the slot first let go of (as a killed process's lock goes)
    try:
        assert again.path.parent.name == "worker-0"
        assert again.offset(0) == 1
        assert again.saved_state(0, ("Counts", "m/1")) == (SequenceToken(41, 0), b"s")
    finally:
        again.close()
        second.close()


async def test_the_offset_moves_only_over_writes_that_follow_it(tmp_path: Path) -> None:
    copy = open_changelog_copy(tmp_path)
    try:
        await copy.apply(0, ([ROW], []), next_offset=5)
        await copy.apply(0, ([("Counts", "m/2", 7, 0, b"t")], []), next_offset=6, after=5)  # offset 5: next
        assert copy.offset(0) == 6
        # Records of others between (offsets 6..7 not this write's): the rows land, the offset stays,
        # so a restart reads those records again.
        await copy.apply(0, ([], [("Counts", "m/1")]), next_offset=9, after=8)
        assert copy.offset(0) == 6
        assert copy.saved_states(0, [("Counts", "m/1"), ("Counts", "m/2")]) == {
            ("Counts", "m/2"): (SequenceToken(7, 0), b"t")
        }
        assert await copy.forget(0) == 1
        assert copy.offset(0) is None and copy.count(0) == 0
    finally:
        copy.close()


async def test_states_copied_from_the_changelog_age_from_their_writes_and_expire_a_sweep_at_a_time(
    tmp_path: Path,
) -> None:
    copy = open_changelog_copy(tmp_path)
    unit = pack_unit(Device(), None, None)  # a durable state: its time to live applies
    try:
        then = time.time() - 3600
        many = [("Device", f"d/{n}", n, 0, unit) for n in range(EXPIRED_A_SWEEP + 5)]
        await copy.apply(0, (many, []), next_offset=len(many), written_at=then)  # a copy: written an hour ago
        await copy.apply(0, ([("Device", "d/new", 1, 0, unit)], []), next_offset=len(many) + 1)  # written now
        offset, synced = copy.synced(0) or (None, 0.0)
        assert offset == len(many) + 1 and abs(synced - time.time()) < 60
        idle = await copy.idle_keys(0, "Device", time.time() - 60)
        assert len(idle) == EXPIRED_A_SWEEP and ("Device", "d/new") not in idle  # one sweep's worth
        assert await copy.idle_keys(0, "Device", then - 1) == []  # not idle before they were written
    finally:
        copy.close()


async def test_a_damaged_file_is_moved_aside_and_started_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = open_changelog_copy(tmp_path)
    await copy.apply(3, ([ROW], []), next_offset=1)
    database = copy.path
    copy.close()
    for part in (database, database.with_name("headrace.db-wal")):
        if part.exists():
            part.write_bytes(b"\x00garbage" * 4096)
    with caplog.at_level(logging.WARNING, "headrace.kafka"):
        reopened = open_changelog_copy(tmp_path)
    try:
        assert reopened.path == database
        assert reopened.offset(3) is None and reopened.count(3) == 0
        assert (tmp_path / "worker-0.damaged").is_dir()
        assert "is damaged" in caplog.text and "rebuilt from the changelog" in caplog.text
    finally:
        reopened.close()


async def test_a_file_of_another_layout_is_set_aside_and_started_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy left by a newer headrace (say, before a downgrade) is not an error that stops
    the worker: the changelog holds every state, so the copy is rebuilt from it."""
    copy = open_changelog_copy(tmp_path)
    await copy.apply(3, ([ROW], []), next_offset=1)
    database = copy.path
    copy.close()
    with sqlite3.connect(database) as conn:
        conn.execute(f"PRAGMA user_version = {LAYOUT + 1}")
    conn.close()
    with caplog.at_level(logging.WARNING, "headrace.kafka"):
        reopened = open_changelog_copy(tmp_path)
    try:
        assert reopened.offset(3) is None and reopened.count(3) == 0
        await reopened.apply(3, ([ROW], []), next_offset=1)
        assert reopened.offset(3) == 1
        assert (tmp_path / "worker-0.damaged").is_dir()
        assert f"has layout {LAYOUT + 1}" in caplog.text and "rebuilt from the changelog" in caplog.text
    finally:
        reopened.close()


async def test_the_full_check_at_open_is_skipped_only_after_a_clean_close_or_a_death_in_this_boot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files as a clean close left them, or as a killed worker left them while the machine
    stayed up, are opened unchecked; files a clean close did not leave so, or a killed
    worker's after a reboot, are checked. Damage a skipped check would have found is found
    by the first read of its page: the file is set aside then."""
    caplog.set_level(logging.DEBUG, "headrace.kafka")
    copy = open_changelog_copy(tmp_path)
    await copy.apply(3, ([("Counts", f"m/{i}", i, 0, b"s" * 100) for i in range(5000)], []), next_offset=1)
    database, note = copy.path, copy.path.parent / "closed-cleanly"
    copy.close()
    assert note.is_file()
    reopened = open_changelog_copy(tmp_path)  # a restart after a clean stop
    assert not note.exists()  # taken away while open: a crash from here leaves none
    assert "as a clean close left it: not checked" in caplog.text
    assert reopened.count(3) == 5000 and reopened.offset(3) == 1

    def killed() -> None:  # gone without a close, as a SIGKILLed worker goes
        reopened.store.close()
        os.close(reopened._lock)

    killed()
    caplog.clear()
    reopened = open_changelog_copy(tmp_path)  # the same boot: not checked, and sound
    assert "last open in this boot: not checked" in caplog.text and reopened.count(3) == 5000
    killed()
    (database.parent / "opened-on-boot").write_text("another boot")  # as after a reboot
    caplog.clear()
    reopened = open_changelog_copy(tmp_path)
    assert "not checked" not in caplog.text and reopened.count(3) == 5000  # checked, and sound
    killed()

    def damage() -> None:  # a page in the middle overwritten, the size unchanged
        with database.open("r+b") as file:
            file.seek(database.stat().st_size // 2 // 4096 * 4096)
            file.write(b"\xff" * 4096)

    damage()
    caplog.clear()
    reopened = open_changelog_copy(tmp_path)  # not checked: found by the first read of the page
    assert "not checked" in caplog.text and "is damaged" not in caplog.text
    every = [("Counts", f"m/{i}") for i in range(5000)]
    with pytest.raises(LocalStoreDamagedError, match="set aside and started empty"):
        reopened.saved_states(3, every)
    assert "is damaged" in caplog.text and reopened.set_aside == 1
    assert reopened.count(3) == 0 and reopened.offset(3) is None  # its queues are rebuilt
    await reopened.apply(3, ([ROW], []), next_offset=1)
    reopened.close()

    damage()  # after a clean close: the files are not as it left them
    caplog.clear()
    damaged = open_changelog_copy(tmp_path)
    try:
        assert "not checked" not in caplog.text and "is damaged" in caplog.text
        assert damaged.count(3) == 0 and damaged.offset(3) is None  # its queues are rebuilt
    finally:
        damaged.close()


async def test_a_state_dir_a_worker_cannot_write_fails_its_queue_with_the_fix(tmp_path: Path) -> None:
    """Not retried for ever: the queue fails, in one line naming the setting."""
    (tmp_path / "a-file").write_text("")
    settings = KafkaSettings("127.0.0.1:9", "sensors", state_dir=tmp_path / "a-file")
    changelog = KafkaChangelog(settings, OutageLog("test", logging.getLogger("test")), open_local=open_changelog_copy)
    with pytest.raises(QueueFailedError, match="give state_dir a directory this worker may write"):
        await changelog.local_states()
    assert changelog.local is None
