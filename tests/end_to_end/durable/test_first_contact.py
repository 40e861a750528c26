"""The first contact of many new streams in one queue read, on the embedded store: their
subscriptions and saved durable states are read in one query each for the whole read (counted in
the store's own statement trace), and each stream still gets exactly its events and its state;
a damaged state or a constructor that raises touches only its own stream."""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from streams import Durable, StreamId, StreamProvider
from streams.backends.embedded.store import EmbeddedStore
from tests.agents.delivery.conftest import drained
from tests.helpers import saved_states

FAST = {"max_event_delivery_time": 0.2, "delivery_retry_backoff": 0.01}
SAVED, NEW = 100, 100  # streams with a saved state, streams never seen


def devices(provider: StreamProvider, counts: dict[str, list[int]], broken: set[str]) -> None:
    """A durable count per "devices" stream (whose constructor raises for the keys in
    ``broken``); by key, the count after each batch."""

    @provider.implicit("devices")
    class Device:
        count = Durable(0)

        def __init__(self, stream_id: StreamId) -> None:
            if stream_id.key in broken:
                raise KeyError(f"no settings for {stream_id.key}")
            self.key = stream_id.key

        def on_next(self, batch: Any) -> None:
            self.count += len(batch)
            counts.setdefault(self.key, []).append(self.count)


def traced_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement the embedded store's connections run from now on (SQLite's own trace)."""
    statements: list[str] = []
    opened = EmbeddedStore._open_connection

    def open_traced(self: EmbeddedStore) -> sqlite3.Connection:
        conn = opened(self)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(EmbeddedStore, "_open_connection", open_traced)
    return statements


def count(statements: list[str], pattern: str) -> int:
    return sum(1 for sql in statements if re.search(pattern, sql))


async def test_a_read_of_many_new_streams_looks_them_up_once_and_each_gets_its_own_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    saved = [f"d{i}" for i in range(SAVED)]
    new = [f"n{i}" for i in range(NEW)]
    first: dict[str, list[int]] = {}
    worker = StreamProvider.embedded(tmp_path, queues=1)
    devices(worker, first, set())
    async with worker:
        for key in saved:
            await worker.get_stream(StreamId("devices", key)).send(1)
        await worker.flush()
        await drained(worker, 30)
    assert first == {key: [1] for key in saved} and len(saved_states(tmp_path)) == SAVED
    with sqlite3.connect(tmp_path / "headrace.db") as conn:  # d7's row damaged: not msgpack after the unit's mark
        conn.execute("UPDATE activation_states SET state = x'c1c1' WHERE stream = 'devices/d7'")

    # Every record is in the queue before the worker starts: its first read brings them all.
    async with StreamProvider.embedded(tmp_path, queues=1).client() as client:
        for key in [*saved, *new, "bad"]:
            await client.get_stream(StreamId("devices", key)).send_batch([2, 3])
        await client.flush()

    statements = traced_statements(monkeypatch)
    counts: dict[str, list[int]] = {}
    worker = StreamProvider.embedded(tmp_path, queues=1, **FAST)
    devices(worker, counts, {"bad"})
    caplog.set_level(logging.INFO, logger="headrace")
    async with worker:
        await drained(worker, 30)
        letters = await worker.dead_letters.list()

    restored = {key: [3] for key in saved if key != "d7"}
    assert counts == {**restored, "d7": [2], **{key: [2] for key in new}}
    assert [(x.reason, x.stream, x.value) for x in letters] == [
        ("activation_failed", "devices/bad", 2),
        ("activation_failed", "devices/bad", 3),
    ]
    refused = [r.getMessage() for r in caplog.records if "is not restored" in r.getMessage()]
    assert len(refused) == 1 and "devices/d7" in refused[0], refused
    # One read brought the 201 new streams: one query for their states, one for their
    # subscriptions, none stream by stream.
    assert count(statements, r"FROM activation_states WHERE queue = \S+ AND consumer = \S+ AND stream IN") == 1
    assert count(statements, r"FROM activation_states WHERE queue = \S+ AND consumer = \S+ AND stream =") == 0
    assert count(statements, r"FROM pubsub_subscriptions WHERE namespace = \S+ AND key IN") == 1
    assert count(statements, r"FROM pubsub_subscriptions WHERE namespace = \S+ AND key =") == 0
    # and each new state (and each one changed) is written: 201 rows, the damaged one replaced
    rows = dict((stream, seq) for stream, seq, _ in saved_states(tmp_path))
    assert len(rows) == SAVED + NEW and "devices/bad" not in rows
