"""The handoff's exactly-once marks go once no replay can need them (streams.backends.embedded.handoff_retention),
so a store fed by devices that come and go does not keep a mark for every device that ever
published; a mark a replay still needs stays, and the replay hands nothing off twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.backends.embedded.mark_retention import MarkRetention
from streams.eventtime import EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_saved_state import Distinct
from tests.helpers import handoff_rows, persisted_checkpoint, wait_until_async


def marks(path: Path) -> list[str]:
    with sqlite3.connect(path / "headrace.db") as conn:
        return [source for (source,) in conn.execute("SELECT source FROM handoff_marks ORDER BY source")]


def windows(path: Path) -> list[tuple[str, float, int]]:
    return sorted((r["stream_id"], r["window_start"].timestamp(), r["count"]) for r in handoff_rows(path, "distinct"))


def distinct_counts(path: Path) -> StreamProvider:
    """Tumbling 5 s distinct counts of field ``t``, handed off. A set cannot be saved with
    the checkpoint: an open window holds the checkpoint at its oldest event, and a restart
    replays from there (rebuilding, and closing again, windows already handed off)."""
    provider = StreamProvider.embedded(path, queues=1, get_queue_msgs_timer_period=0.01)

    @provider.implicit("devices")
    class Distincts:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(5), Distinct(), select="t")
        handoff = Handoff("distinct", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    return provider


async def publish(provider: StreamProvider, key: str, *times: float) -> None:
    for t in times:
        await provider.get_stream(StreamId("devices", key)).on_next({"t": t})


async def test_marks_a_replay_needs_stay_and_the_others_go(tmp_path, monkeypatch):
    monkeypatch.setattr(MarkRetention, "MARGIN", 0.0)  # no clock skew: one process
    monkeypatch.setattr(MarkRetention, "INTERVAL", 0.0)  # trim at every append
    first = distinct_counts(tmp_path)
    async with first:
        await publish(first, "quiet", 1.0)  # record 0: its open window holds the checkpoint
        await anyio.sleep(0.05)
        await publish(first, "busy", 1.0, 2.0, 6.0)  # records 1-3: [0, 5) handed off
        await drained(first)
        assert await wait_until_async(lambda: windows(tmp_path) == [("devices/busy", 0.0, 2)], 10)
        await publish(first, "other", 1.0, 7.0)  # another append: a trim
        await drained(first)
        assert await wait_until_async(lambda: len(windows(tmp_path)) == 2, 10)
        # busy's mark was written after record 0, the first a restart reads again: kept.
        assert marks(tmp_path) == ["devices/busy", "devices/other"]
    assert persisted_checkpoint(tmp_path) is None  # quiet's window [0, 5) holds record 0

    second = distinct_counts(tmp_path)  # replays records 0-5: busy's [0, 5) closes again
    async with second:
        await drained(second)
        await publish(second, "quiet", 8.0)  # record 6: quiet's [0, 5) closes
        for key in ("quiet", "busy", "other"):  # records 7-9: every window closes
            await second.get_stream(StreamId("devices", key)).on_completed()
        await drained(second)
        assert await wait_until_async(lambda: len(windows(tmp_path)) == 6, 10), windows(tmp_path)
        assert await wait_until_async(lambda: persisted_checkpoint(tmp_path) == 9, 10)
        await publish(second, "last", 1.0)  # record 10, written after every mark so far
        await second.get_stream(StreamId("devices", "last")).on_completed()
        await drained(second)
        assert await wait_until_async(lambda: len(windows(tmp_path)) == 7, 10), windows(tmp_path)
        # At the append of last's window (a trim), the first record a restart could read
        # again is record 10: every mark written before it went.
        assert marks(tmp_path) == ["devices/last"]
    assert windows(tmp_path) == [  # each window once
        ("devices/busy", 0.0, 2),
        ("devices/busy", 5.0, 1),
        ("devices/last", 0.0, 1),
        ("devices/other", 0.0, 1),
        ("devices/other", 5.0, 1),
        ("devices/quiet", 0.0, 1),
        ("devices/quiet", 5.0, 1),
    ]
