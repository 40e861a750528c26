"""Exact time through ``headrace simulate`` and a real worker on the embedded store: the same
sub-second windows on their edges as the exact reference (docs/event-time.md, "Exact
time"), in the results ``on_window`` gets and in the handoff log's timestamp columns."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgpack
import pytest

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import Count, EventTime, Hopping, OrderingPolicy, Session, Tumbling
from tests.agents.delivery.conftest import drained
from tests.end_to_end.durable.test_saved_state import wait_for_checkpoint
from tests.helpers import handoff_rows, saved_states, wait_until_async
from tests.streams.eventtime.exact_cases import EDGE_MS, windows_reference

T0_MS = 1_714_564_800_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def simulate(*args: object) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "simulate", *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize(("window", "size", "hop"), [("tumbling:100ms", 100, 100), ("hopping:1500ms:250ms", 1500, 250)])
def test_simulate_gives_the_exact_reference_s_sub_second_windows(
    tmp_path: Path, window: str, size: int, hop: int
) -> None:
    sample = tmp_path / "edges.csv"
    lines = [f"{(T0_MS + t) / 1000},{(T0_MS + t) / 1000},," for t in EDGE_MS]
    sample.write_text("arrival_time,event_time,key,value\n" + "\n".join(lines) + "\n")
    out = simulate("--window", window, "--flush", sample)
    got = [(w["start"], w["end"], w["count"]) for w in out if w["type"] == "window"]
    expected = [((T0_MS + s) / 1000, (T0_MS + e) / 1000, n) for s, e, n in windows_reference(EDGE_MS, size, hop)]
    assert got == expected


def test_simulate_prints_exact_bounds(tmp_path: Path) -> None:
    sample = tmp_path / "issue.csv"
    sample.write_text("arrival_time,event_time,key,value\n0.3,0.3,,\n0.7,0.7,,\n1.0,1.0,,\n2.3,2.3,,\n")
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "simulate", "--window", "tumbling:100ms", "--flush", str(sample)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    windows = [line for line in done.stdout.splitlines() if '"type": "window"' in line]
    assert [(json.loads(w)["start"], json.loads(w)["end"]) for w in windows] == [
        (0.3, 0.4),
        (0.7, 0.8),
        (1, 1.1),
        (2.3, 2.4),
    ]
    assert '"start": 0.3, "end": 0.4' in windows[0]  # as printed: no 0.30000000000000004


def exact_worker(path: Path, spec: EventTime, got: list[tuple[float, float, object]]) -> StreamProvider:
    provider = StreamProvider.embedded(path, queues=1)

    @provider.implicit("ticks")
    class Edges:
        event_time = spec
        handoff = Handoff("edges", {"n": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_window(self, w) -> None:
            got.append((w.start, w.end, w.value))

    return provider


def handed(path: Path) -> list[tuple[int, int, int]]:
    """The handoff log's windows, bounds as integer microseconds since the epoch."""
    us = timedelta(microseconds=1)
    return [
        ((r["window_start"] - EPOCH) // us, (r["window_end"] - EPOCH) // us, r["n"])
        for r in handoff_rows(path, "edges")
    ]


@pytest.mark.parametrize(
    ("spec", "size", "hop"), [(Tumbling(0.1), 100, 100), (Hopping(0.3, 0.1), 300, 100), (Tumbling(1.5), 1500, 1500)]
)
async def test_a_worker_on_the_embedded_store_closes_the_reference_s_windows_and_hands_them_off_exactly(
    tmp_path: Path, spec: Tumbling | Hopping, size: int, hop: int
) -> None:
    got: list[tuple[float, float, object]] = []
    provider = exact_worker(tmp_path, EventTime(OrderingPolicy(timestamp_by="t", unit="ms"), spec, Count()), got)
    async with provider:
        stream = provider.get_stream(StreamId("ticks", "edges"))
        for t in [*EDGE_MS, 60_000]:  # the last moves the watermark past every window of the others
            await stream.on_next({"t": T0_MS + t})
        await drained(provider)
        reference = windows_reference(EDGE_MS, size, hop)
        assert await wait_until_async(lambda: len(handed(tmp_path)) == len(reference), 20)
    assert got == [((T0_MS + s) / 1000, (T0_MS + e) / 1000, n) for s, e, n in reference]
    assert handed(tmp_path) == [((T0_MS + s) * 1000, (T0_MS + e) * 1000, n) for s, e, n in reference]


async def test_a_worker_s_sessions_exactly_a_gap_apart_are_two(tmp_path: Path) -> None:
    got: list[tuple[float, float, object]] = []
    provider = exact_worker(tmp_path, EventTime(OrderingPolicy(timestamp_by="t"), Session(0.1), Count()), got)
    async with provider:
        stream = provider.get_stream(StreamId("ticks", "edges"))
        for t in (0.007, 0.107, 0.206, 5.0):  # 0.007 + 0.1 > 0.107 in floats: exactly, they touch
            await stream.on_next({"t": t})
        await drained(provider)
        assert await wait_until_async(lambda: len(handed(tmp_path)) == 2, 20)
    assert got == [(0.007, 0.107, 1), (0.107, 0.306, 2)]
    assert handed(tmp_path) == [(7_000, 107_000, 1), (107_000, 306_000, 2)]


async def test_a_worker_refuses_saved_windows_of_the_float_format_in_one_line_and_goes_on(
    tmp_path: Path, caplog
) -> None:
    got: list[tuple[float, float, object]] = []
    spec = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10), Count())
    first = exact_worker(tmp_path, spec, got)
    async with first:
        stream = first.get_stream(StreamId("ticks", "edges"))
        for t in (1.0, 2.0):
            await stream.on_next({"t": t})
        await drained(first)
        assert await wait_for_checkpoint(tmp_path, 1) == 1  # the open window is in the saved state
    assert [stream for stream, _, _ in saved_states(tmp_path)] == ["ticks/edges"]
    # what a version keeping float seconds saved
    old = msgpack.packb({"format": 1, "input": [2.0, math.inf, False, math.inf, [2.0, 2.0, -math.inf, 0, -math.inf]]})
    with sqlite3.connect(tmp_path / "headrace.db") as conn:
        conn.execute("UPDATE activation_states SET state = ?", (old,))
    second = exact_worker(tmp_path, spec, got)
    with caplog.at_level(logging.ERROR):
        async with second:
            stream = second.get_stream(StreamId("ticks", "edges"))
            for t in (25.0, 40.0):
                await stream.on_next({"t": t})
            await drained(second)
            assert await wait_until_async(lambda: len(handed(tmp_path)) == 1, 20)
    refused = [r for r in caplog.records if "is not restored" in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None  # one line, no traceback
    assert "float seconds (saved state format 1)" in refused[0].getMessage()
    assert "Finish the queue with the version that saved it" in refused[0].getMessage()
    assert got == [(20.0, 30.0, 1)]  # it went on from the queue's checkpoint
