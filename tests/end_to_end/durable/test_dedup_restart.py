"""Dedup across a crash, with real worker processes: the keys seen are saved with the
checkpoint, so a producer's retries that reach the next worker are still dropped (lettered
``duplicate``), and the window counts each event once."""

from __future__ import annotations

import signal
from pathlib import Path

from streams import StreamId, StreamProvider
from tests import helpers
from tests.helpers import counted_windows, handoff_count, persisted_checkpoint, saved_states, wait_until_async

WORKER = Path(__file__).with_name("dedup_worker.py")


async def test_retries_after_a_sigkill_are_still_dropped(tmp_path):
    meter = StreamId("meters", "m1")
    first = helpers.start_worker(WORKER, tmp_path)
    try:
        async with StreamProvider.embedded(tmp_path, queues=1).client() as client:
            for n in range(50):  # records 0..49, ids 0..49, all in window [0, 3600)
                await client.get_stream(meter).on_next({"id": n, "t": float(n)})
        await wait_until_async(lambda: persisted_checkpoint(tmp_path) == 49, 15)
        assert saved_states(tmp_path) == [("meters/m1", 49, 0)]  # the keys (and the window) saved
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
    second = helpers.start_worker(WORKER, tmp_path)
    try:
        async with StreamProvider.embedded(tmp_path, queues=1).client() as client:
            for n in range(40, 60):  # ids 40..49 retried (dropped), 50..59 new
                await client.get_stream(meter).on_next({"id": n, "t": float(n)})
            await client.get_stream(meter).on_next({"id": "close", "t": 4000.0})  # closes [0, 3600)
            await wait_until_async(lambda: handoff_count(tmp_path, "counts") >= 1, 15)
            letters = await client.dead_letters.list(reason="duplicate")
    finally:
        second.terminate()
        second.wait()
    assert counted_windows(tmp_path) == [(0.0, 3600.0, 60)]  # ids 0..59, each once
    assert sorted(letter.value["id"] for letter in letters) == list(range(40, 50))
    assert all(letter.stream == "meters/m1" and letter.sequence_number is not None for letter in letters)
