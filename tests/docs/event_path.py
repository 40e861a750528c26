"""Trace one event from ``send`` to the handoff's append on the embedded store.

Run as ``python -m tests.docs.event_path``: prints, as JSON, the project's files the process
enters (every thread) from the call of ``Stream.send`` until the window the event closes
reaches the embedded handoff sink's ``write``, in the order first entered, with how many
times each is entered. ``tests/docs/test_event_path.py`` checks docs/architecture.md
against it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from collections import Counter
from types import FrameType
from typing import Any

import anyio

import streams
from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.backends.embedded.adapter import EmbeddedAdapterFactory
from streams.backends.embedded.backend import EmbeddedBackend
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(streams.__file__)))
END = "EmbeddedHandoffSink.write"  # the embedded handoff sink's append
# The store's write transaction, committed when it returns: the first to return after the
# sink's append began is the one that appends the window to the handoff log.
COMMIT = "EmbeddedStore._call_in_transaction"


class Trace:
    """The files entered while on, from every thread."""

    def __init__(self) -> None:
        self.on = False
        self.writing = False  # the sink's append has begun
        self.done = False
        self.first: list[str] = []
        self.entries: Counter[str] = Counter()
        self._last: str | None = None

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        if event == "return":
            if self.writing and frame.f_code.co_qualname == COMMIT:
                self.on = False  # the append's transaction has committed
                self.done = True
            return
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(ROOT) or "/.venv/" in path or "/tests/" in path:
            return
        name = os.path.relpath(path, ROOT)
        if name != self._last:  # entered from another file
            self._last = name
            self.entries[name] += 1
            if self.entries[name] == 1:
                self.first.append(name)
        if frame.f_code.co_qualname == END:
            self.writing = True


async def run(path: str, trace: Trace) -> None:
    # The agent reads when the write wakes it, not on its timer: a timed read already in
    # flight when the event is sent would take it without the steps a read begins with. The
    # queue's checkpoint is written once its interval has passed (0.2 s by default): set
    # beyond the run, as the agent's timer is, it is not written by the traced read.
    queues = EmbeddedAdapterFactory(path, queues=1, checkpoint_persist_interval=60.0)
    provider = StreamProvider(EmbeddedBackend(queues), get_queue_msgs_timer_period=30.0)

    @provider.implicit("tolls")
    class BoothTotals:
        event_time = EventTime(OrderingPolicy(timestamp_by="time"), Tumbling(60), Count())
        handoff = Handoff("tolls", {"count": "bigint"})

        def __init__(self, stream_id: StreamId) -> None: ...

    async with provider:
        stream = provider.get_stream(StreamId("tolls", "booth-1"))
        await stream.send({"time": 1.0})  # opens the stream and its window: not traced
        await provider.flush()
        await provider.drain()
        await provider.drain()  # its read writes the checkpoint, with the open window's state
        await anyio.sleep(0.2)  # the agent's loop, woken by drain, is back waiting to be woken
        trace.on = True
        await stream.send({"time": 61.0})  # its watermark closes the first window
        with anyio.fail_after(30):
            while not trace.done:
                await anyio.sleep(0.005)
        await provider.drain()


def main() -> None:
    trace = Trace()
    threading.setprofile(trace)  # the store's threads too
    sys.setprofile(trace)
    with tempfile.TemporaryDirectory() as path:
        anyio.run(run, path, trace)
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    print(json.dumps({"files": trace.first, "entries": dict(trace.entries)}))


if __name__ == "__main__":
    main()
