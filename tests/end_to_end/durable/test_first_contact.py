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

import anyio
import pytest

from streams import Durable, StreamId, StreamProvider
from streams.backends.embedded.store import EmbeddedStore
from tests.agents.delivery.conftest import Recorder, drained
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
    assert count(statements, r"FROM activation_states WHERE queue = \S+ AND consumer_id = \(.+?\) AND stream IN") == 1
    assert count(statements, r"FROM activation_states WHERE queue = \S+ AND consumer_id = \(.+?\) AND stream =") == 0
    assert count(statements, r"FROM pubsub_subscriptions WHERE namespace = \S+ AND key IN") == 1
    assert count(statements, r"FROM pubsub_subscriptions WHERE namespace = \S+ AND key =") == 0
    # and each new state (and each one changed) is written: 201 rows, the damaged one replaced
    rows = dict((stream, seq) for stream, seq, _ in saved_states(tmp_path))
    assert len(rows) == SAVED + NEW and "devices/bad" not in rows


async def test_the_new_streams_of_one_read_get_every_kind_of_consumer_exactly_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams new to the worker, attached in one pass for the read that brings them: each
    gets its implicit activation (with its durable count saved), the durable subscriptions
    its pub-sub record names and the in-process observers subscribed to it (whose streams
    went quiet and were deactivated before), each taking exactly the stream's events, in
    order; a stream with none of the extras gets none."""
    audited = [StreamId("devices", f"a{i}") for i in range(10)]  # a durable subscription of Audit each
    plain = [StreamId("devices", f"p{i}") for i in range(30)]
    watched = [StreamId("lamps", f"w{i}") for i in range(10)]  # an in-process observer each
    audit: dict[str, list[int]] = {}

    def register(provider: StreamProvider, counts: dict[str, list[int]]) -> None:
        devices(provider, counts, set())

        @provider.consumer("Audit")
        class Audit:
            def __init__(self, stream_id: StreamId) -> None:
                self.key = stream_id.key

            def on_next(self, batch: Any) -> None:
                audit.setdefault(self.key, []).extend(batch.values)

    worker = StreamProvider.embedded(tmp_path, queues=1)
    register(worker, {})
    async with worker:
        for sid in audited:
            await worker.get_stream(sid).subscribe(worker.registry.get_type("Audit"))

    statements = traced_statements(monkeypatch)
    counts: dict[str, list[int]] = {}
    observers = {sid.key: Recorder() for sid in watched}
    worker = StreamProvider.embedded(tmp_path, queues=1, stream_inactivity_period=0.2)
    register(worker, counts)
    async with worker:
        for sid in watched:  # (a subscribe activates its stream, which goes quiet)
            await worker.get_stream(sid).subscribe(observers[sid.key])
        with anyio.fail_after(10):
            while any(agent.stream_ids() for agent in worker.agents):
                await anyio.sleep(0.05)
        statements.clear()
        for sid in [*plain, *audited, *watched]:  # one write: the worker's next read brings every stream new
            await worker.get_stream(sid).send_batch([1, 2])
            await worker.get_stream(sid).send_batch([3])
        await worker.flush()
        await drained(worker, 30)

    assert counts == {sid.key: [2, 3] for sid in [*plain, *audited]}
    assert audit == {sid.key: [1, 2, 3] for sid in audited}
    assert {key: observer.values for key, observer in observers.items()} == {sid.key: [1, 2, 3] for sid in watched}
    assert [s for s, _, _ in saved_states(tmp_path)] == sorted(str(sid) for sid in [*plain, *audited])
    # Their subscriptions were read together, not stream by stream.
    assert count(statements, r"FROM pubsub_subscriptions WHERE namespace = \S+ AND key IN") >= 1
    assert count(statements, r"FROM pubsub_subscriptions WHERE namespace = \S+ AND key =") == 0
