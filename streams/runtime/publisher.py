"""The producer side of a provider: events buffered per stream and written in the background.

``stream.send(value)`` only buffers: it returns at once, and waits only while the buffer
holds ``max_buffered`` events (backpressure, bounded memory). A writer task takes what is
buffered after a few milliseconds (``linger``; at once when a stream has ``max_batch`` events
buffered, or the buffer a quarter of ``max_buffered``: the runtime's costs are per container,
so fuller containers are cheaper to read), makes each stream's events into batch
containers of at most ``max_batch`` events, and writes them all in one call of the adapter
(one transaction, one group commit, on the embedded store; one pipelined round of produce
requests on Kafka), one write at a time, so every stream's events stay in order.
``stream.on_next(value)`` buffers the same way but waits until its event is written, and
its write does not linger: concurrent ``on_next`` calls share a write (and a container, on
one stream). Punctuation and completion travel the same way, in order with the events.

``flush()`` returns once everything buffered before it is written, and raises
:class:`~streams.core.errors.PublishError` with the count of events ``send`` buffered that were
not written since the previous flush, and why (``on_next`` raises to its own caller).

>>> import anyio
>>> from streams import StreamId, StreamProvider
>>> async def publish():
...     async with StreamProvider.memory(queues=2).client() as provider:
...         stream = provider.get_stream(StreamId("sensors", "s-1"))
...         for n in range(1000):
...             await stream.send({"n": n})
...         await provider.flush()
>>> anyio.run(publish)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from streams.adapters.protocols import EventWriter, QueueAdapter, QueueMapper, Times
from streams.core.batch import BatchKind
from streams.core.clock import WALL_CLOCK, Clock
from streams.core.codec import encode_batches
from streams.core.errors import EncodeError, ProviderClosedError, PublishError
from streams.core.ids import QueueId, StreamId


class QueueReader(Protocol):
    """What reads a queue in this process (its pulling agent): woken when a write reaches it."""

    def wake(self) -> None: ...


log = logging.getLogger("headrace.publisher")


class ContainerWriter:
    """Events as batch containers, written with the adapter's ``queue_message_batches``."""

    def __init__(self, adapter: QueueAdapter, clock: Clock = WALL_CLOCK, max_event_size: int = 1 << 20) -> None:
        self._adapter = adapter
        self._clock = clock  # stamps each container with its arrival time
        self._max_size = max_event_size  # no container written is larger

    def encode(
        self, queue: QueueId, stream_id: StreamId, kind: BatchKind, values: list[Any], times: Times
    ) -> list[Any]:
        now = self._clock.now()
        return [
            (queue, stream_id, payload)
            for payload in encode_batches(stream_id, kind, now, values, times, self._max_size)
        ]

    async def write(self, items: list[Any]) -> None:
        await self._adapter.queue_message_batches(items)


class _Run:
    """Consecutive events of one stream that go into the same containers."""

    __slots__ = ("encoded", "kind", "open", "times", "values")

    def __init__(
        self, kind: BatchKind, values: list[Any], times: Times, open_: bool, encoded: list[Any] | None
    ) -> None:
        self.kind = kind
        self.values = values
        self.times = times  # None while no event of the run has an event time
        self.open = open_  # takes more events (send's data); a whole batch or a control batch does not
        self.encoded = encoded  # its items when the caller's add encoded it already (on_next_batch)


class _Round:
    """What is buffered between two writes: each stream's runs of events, in order."""

    __slots__ = ("_done", "awaited", "error", "events", "finished", "full", "streams", "urgent")

    def __init__(self) -> None:
        self.streams: dict[StreamId, list[_Run]] = {}
        self.events = 0
        self.awaited = 0  # of which callers wait for (on_next): they hear of a failure
        self.urgent = False  # an on_next caller waits: write without lingering
        self.full = False  # a stream's container is full: write without lingering
        self.finished = False
        self._done: anyio.Event | None = None  # made only when someone waits: most rounds have no waiter
        self.error: Exception | None = None  # why the write failed (every event of it)

    async def written(self) -> None:
        """Return once this round's write has ended (well or not)."""
        if not self.finished:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()


class Publisher:
    """Buffers a provider's events and writes them (see the module's docstring)."""

    def __init__(
        self,
        writer: EventWriter,
        mapper: QueueMapper,
        readers: Mapping[QueueId, QueueReader],
        *,
        linger: float = 0.002,
        max_batch: int = 1000,
        max_buffered: int = 100_000,
    ) -> None:
        self._writer = writer
        self._mapper = mapper
        self._readers = readers  # the local agents by queue, woken by a write to theirs
        self._linger = linger
        self._max_batch = max_batch
        self._max_buffered = max_buffered
        # A write takes at most linger's worth of sends, or this many events, or a full
        # container of one stream, whichever comes first.
        self._round_events = max(max_buffered // 4, max_batch)
        self._open = _Round()
        self._writing: _Round | None = None
        self._buffered = 0  # events buffered or being written
        self._room: anyio.Event | None = None  # set when a write ends, for senders waiting for room
        self._pending = anyio.Event()  # set when the open round got its first event
        self._since_yield = 0
        self._failed = 0  # events send() buffered that were not written, since the last flush
        self._reasons: list[str] = []
        self._closed = False

    async def send(self, stream_id: StreamId, value: Any, event_time: float | None) -> None:
        """Buffer one event (``stream.send``): :meth:`add` for one value, without waiting, that
        joins the stream's open run at once when it takes it (the common case)."""
        if not self._joined(stream_id, (value,), None if event_time is None else (event_time,)):
            await self.add(stream_id, BatchKind.DATA, [value], None if event_time is None else [event_time], wait=False)
        elif self._since_yield >= self._max_batch:
            await self._let_others_run()

    async def add(
        self,
        stream_id: StreamId,
        kind: BatchKind,
        values: list[Any],
        times: Times,
        *,
        wait: bool,
        whole: bool = False,
    ) -> None:
        """Buffer ``values`` (with ``times``, or None) for ``stream_id``; with ``wait``,
        return once they are written (raising why not); ``whole``: as one batch container
        of their own (``on_next_batch``), not merged with the stream's other events."""
        if self._closed:
            raise ProviderClosedError("the provider has closed: it publishes nothing more")
        encoded = None
        if wait or whole:  # the caller hears of its own unencodable value, now
            queue = self._mapper.get_queue_for_stream(stream_id)
            encoded = self._writer.encode(queue, stream_id, kind, values, times)
            if wait and self._writing is None and not self._open.events:
                await self._write_now(queue, encoded, max(len(values), 1))  # nothing to join or wait for
                return
        while self._buffered >= self._max_buffered:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        r = self._open
        idle = self._writing is None and not r.events  # nothing to wait for or join
        if not (kind is BatchKind.DATA and not whole and self._joined(stream_id, values, times)):
            self._start_run(stream_id, kind, values, times, whole, encoded)
        if wait:
            await self._written_with(r, max(len(values), 1), idle)
            return
        if not self._pending.is_set():
            self._pending.set()
        if self._since_yield >= self._max_batch:
            await self._let_others_run()

    def _joined(self, stream_id: StreamId, values: Sequence[Any], times: Sequence[float | None] | None) -> bool:
        """Add data ``values`` (with ``times``, or None) to the stream's last run in the open
        round if it takes them now (it is open, its container has room, and so has the buffer);
        whether it did."""
        r = self._open
        runs = r.streams.get(stream_id)
        if runs is None or self._closed or self._buffered >= self._max_buffered:
            return False
        last, n = runs[-1], len(values)
        if not last.open or len(last.values) + n > self._max_batch:
            return False
        if times is not None or last.times is not None:
            if last.times is None:
                last.times = [None] * len(last.values)
            last.times.extend(times or [None] * n)
        last.values.extend(values)
        if len(last.values) == self._max_batch:
            r.full = True
        r.events += n or 1  # not max(): a builtin call costs more than the rest of a send
        self._buffered += n or 1
        self._since_yield += n
        return True

    def _start_run(
        self,
        stream_id: StreamId,
        kind: BatchKind,
        values: list[Any],
        times: Times,
        whole: bool,
        encoded: list[Any] | None,
    ) -> None:
        """Put ``values`` in the open round as a run of their own: one that later data events
        join (its lists its own), or a whole container or a control batch, encoded already."""
        r = self._open
        runs = r.streams.get(stream_id)
        if runs is None:
            runs = r.streams[stream_id] = []
        open_run = kind is BatchKind.DATA and not whole
        runs.append(_Run(kind, list(values), times and list(times), open_run, None if open_run else encoded))
        r.events += len(values) or 1
        self._buffered += len(values) or 1
        self._since_yield += len(values)

    async def _let_others_run(self) -> None:
        """Yield to the other tasks: a producer looping on send() would never let the writer
        (or the network) run."""
        self._since_yield = 0
        await anyio.lowlevel.checkpoint()

    async def _written_with(self, r: _Round, events: int, idle: bool) -> None:
        """Return once round ``r``, which ``events`` a caller waits for joined, is written
        (raising why not); ``idle``: nothing else was being written or buffered, so the
        caller writes it here and now, with no hop through the writer task."""
        r.urgent = True
        r.awaited += events
        if idle:
            await self._take_and_write()
        else:
            if not self._pending.is_set():
                self._pending.set()
            await r.written()
        if r.error is not None:
            raise r.error

    async def run(self) -> None:
        """The writer: one write at a time, for as long as the provider runs."""
        while True:
            await self._pending.wait()
            self._pending = anyio.Event()  # only this task replaces it: it waits on it
            r = self._open
            if not (r.urgent or r.full or r.events >= self._round_events):
                # Let more sends join this write: each stream's events go in fewer, fuller
                # containers (the runtime's costs are per container), for at most linger.
                await anyio.sleep(self._linger)
            while self._writing is not None:  # an on_next caller is writing: one at a time
                await self._writing.written()
            if self._open.events:
                await self._take_and_write()

    async def _take_and_write(self) -> None:
        """Write the open round (a new one opens for what comes meanwhile)."""
        r, self._open = self._open, _Round()
        self._writing = r
        try:
            await self._write(r)
        finally:
            self._ended(r)

    async def _write_now(self, queue: QueueId, items: list[Any], events: int) -> None:
        """Write one caller's items at once, as a round of their own (nothing else was
        buffered or being written); a failure raises to that caller."""
        r = self._writing = _Round()
        r.events = r.awaited = events
        self._buffered += events
        try:
            await self._writer.write(items)
        finally:
            self._ended(r)
        reader = self._readers.get(queue)
        if reader is not None:
            reader.wake()

    def _ended(self, r: _Round) -> None:
        """A write ended: its waiters, and senders waiting for room, go on."""
        self._writing = None
        self._buffered -= r.events
        r.finish()
        room, self._room = self._room, None
        if room is not None:
            room.set()
        if self._open.events and not self._pending.is_set():
            self._pending.set()  # what came meanwhile: the writer task's turn

    async def _write(self, r: _Round) -> None:
        items: list[Any] = []
        queues: set[QueueId] = set()
        for stream_id, runs in r.streams.items():
            queue = self._mapper.get_queue_for_stream(stream_id)
            queues.add(queue)
            for run in runs:
                items.extend(self._encode(queue, stream_id, run))
        try:
            if items:
                await self._writer.write(items)
        except Exception as exc:  # any adapter's failure: counted and reported, not lost
            r.error = exc
            self._failed += r.events - r.awaited  # the rest raise to their callers
            self._reasons.append(f"{type(exc).__name__}: {exc}")
            log.warning("a write of %d event(s) failed: %s", r.events, exc)
            return
        readers = self._readers
        for queue in queues:
            reader = readers.get(queue)
            if reader is not None:
                reader.wake()

    def _encode(self, queue: QueueId, stream_id: StreamId, run: _Run) -> list[Any]:
        """The items of one run; a run holding a value that cannot be encoded goes without it
        (each such value, which send() buffered, counts as failed)."""
        kind, values, times = run.kind, run.values, run.times
        if not run.open:  # one container, as the caller made it
            return (
                run.encoded if run.encoded is not None else self._writer.encode(queue, stream_id, kind, values, times)
            )
        chunks = range(0, max(len(values), 1), self._max_batch)
        try:
            return [
                item
                for at in chunks
                for item in self._writer.encode(
                    queue,
                    stream_id,
                    kind,
                    values[at : at + self._max_batch],
                    None if times is None else times[at : at + self._max_batch],
                )
            ]
        except EncodeError:
            pass
        items = []
        for i, value in enumerate(values):  # find the culprits: encode one by one
            try:
                items.extend(
                    self._writer.encode(queue, stream_id, kind, [value], None if times is None else [times[i]])
                )
            except EncodeError as exc:
                self._failed += 1
                self._reasons.append(str(exc))
        return items

    async def flush(self) -> None:
        """Return once everything buffered so far is written; raise :class:`PublishError`
        for the events ``send`` buffered since the previous flush that were not."""
        r = self._open
        if r.events:
            r.urgent = True
            await r.written()
        elif self._writing is not None:
            await self._writing.written()
        failed, reasons = self._failed, self._reasons
        if failed:
            self._failed, self._reasons = 0, []
            raise PublishError(failed, reasons)

    async def close(self) -> None:
        """Flush, then refuse further events."""
        try:
            await self.flush()
        finally:
            self._closed = True


async def start_publisher(
    stack: contextlib.AsyncExitStack,
    adapter: QueueAdapter,
    mapper: QueueMapper,
    readers: Mapping[QueueId, QueueReader],
    unwritten: list[PublishError],
    clock: Clock = WALL_CLOCK,
    max_event_size: int = 1 << 20,
) -> Publisher:
    """A running publisher to ``adapter`` (through its own ``event_writer`` if it has one,
    else a :class:`ContainerWriter`), closed when ``stack`` is: flushed then, and what it
    could not write appended to ``unwritten``. No record it writes is over ``max_event_size``
    bytes."""
    writer: EventWriter = adapter.event_writer(max_event_size) or ContainerWriter(adapter, clock, max_event_size)
    publisher = Publisher(writer, mapper, readers)
    # Entered and left by hand: as a context of the stack it would be handed the
    # block's own error on leaving, and wrap it in an exception group.
    tg = anyio.create_task_group()
    await tg.__aenter__()

    async def close() -> None:
        try:
            await publisher.close()
        except PublishError as exc:
            unwritten.append(exc)
        finally:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    stack.push_async_callback(close)
    tg.start_soon(publisher.run)
    return publisher
