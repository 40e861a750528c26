"""The whole demo pipeline, in one process.

toll plaza producers ─▶ queues (embedded store, or Kafka) ─▶ this process's worker: pulling
agents ─▶ one ``BoothTotals`` activation per plaza (ordering policy, 10 s tumbling windows)
─▶ handoff log ─▶ a Spark streaming query printing each micro-batch of finalized windows.

Spark's session takes about ten seconds to start, so it starts in a thread at once, while
the producers already publish. After ``duration`` the producers stop, every stream
completes (its last windows close), the worker drains, Spark reads the last windows, and
the summary reconciles the counts.

Toll traffic for the demo: one producer per toll plaza, one stream per plaza.

Each plaza's booths report the cars that pass (booth, vehicle class, toll, ``time``) in small
batches, as a roadside unit does. Most reports arrive within half a second of the passage;
a realistic share does not:

- *out of order*: the uplink buffered the report for 1–6 s, so it arrives after newer ones;
- *late*: the booth was offline and sends its backlog 20–45 s after the passages;
- *early*: a booth whose clock runs ten minutes ahead;
- *no time*: a report that lost its ``time`` field;
- *corrupt*: a few records that are not batch containers at all (a buggy producer), written
  to the queue as raw bytes.

The ordering policy the demo's consumer declares (:data:`POLICY`) adjusts the first two,
drops the early ones and dead-letters the rest, so every kind of fate shows up.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from rich.console import Console

from balancer.base import BalancerOptions
from spark_sink import Handoff
from streams.cli.common import plural
from streams.cli.demo.report import Ledger, Published, StatusLine
from streams.cli.demo.settings import DemoSettings
from streams.cli.demo.windows import HANDOFF, BatchPrinter, HandoffTail, SparkWindows, WindowReader
from streams.cli.demo.windows import handed_off as windows_handed_off
from streams.cli.page import PageSource
from streams.core.clock import wall_time
from streams.core.errors import HeadraceError
from streams.core.ids import StreamId
from streams.eventtime import Action, Combined, Count, EventTime, OrderingPolicy, Sum, Tumbling
from streams.observability import configure_logging, dead_letter_counts, serve_metrics, take_snapshot
from streams.runtime.history import StatusHistory
from streams.runtime.provider import StreamProvider
from streams.runtime.status import StatusReporter

log = logging.getLogger("headrace.demo")

PAGE_SAMPLE_EVERY = 2.0  # seconds between the status page's plot samples: a short run still draws lines


class DemoError(HeadraceError):
    """The demo could not finish its run."""


def booth_totals_type(window: float) -> type:
    """The demo's consumer type: cars and tolls per booth and window, handed off to Spark."""

    class BoothTotals:
        event_time = EventTime(
            POLICY, Tumbling(window), Combined({"cars": Count(), "tolls": Sum()}), group_by="booth", select="toll"
        )
        handoff = Handoff(HANDOFF, {"cars": "bigint", "tolls": "double"})

        def __init__(self, stream_id: StreamId) -> None:
            self.stream_id = stream_id

    return BoothTotals


class DemoPipeline:
    """One run of the demo; :meth:`run` returns the exit code (0 when the counts reconcile).
    Build it on the event loop that runs it."""

    def __init__(self, settings: DemoSettings, store: Path, work: Path, console: Console) -> None:
        self.settings = settings
        self.store = store
        self.console = console
        printer = BatchPrinter(console, "spark" if settings.spark else "handoff")
        self.provider, self.source = self._provider()
        self.reader: WindowReader = (
            SparkWindows(self.source, work, printer, settings.trigger)
            if settings.spark
            else HandoffTail(self.source, printer, settings.trigger)
        )
        self.provider.implicit(NAMESPACE)(booth_totals_type(settings.window))
        self.traffic = TollTraffic(settings.streams, settings.booths, settings.rate, seed=settings.seed)
        self._worker_started = anyio.Event()  # the worker has declared the handoff stream
        self._reading = anyio.Event()

    def _provider(self) -> tuple[StreamProvider, dict[str, str]]:
        """The worker's provider, and the DataSource options of its handoff log."""
        s = self.settings
        if s.kafka is None:
            return StreamProvider.embedded(self.store, queues=s.queues), {"path": str(self.store)}
        # New topics (queues and handoff): the run reconciles alone.
        topic = f"headrace-demo-{uuid.uuid4().hex[:8]}"
        kafka = {**s.kafka_options, "handoff_prefix": topic}
        provider = StreamProvider.kafka(s.kafka, topic, queues=s.queues, group_id=topic, store=self.store, kafka=kafka)
        return provider, {"kafka.bootstrap.servers": s.kafka, "topicPrefix": topic}

    async def run(self) -> int:
        s = self.settings
        await self.provider.backend.check_reachable(s.kafka_reach_timeout)  # a wrong address: said in seconds
        self._print_header()
        stderr = cast(TextIO, _CurrentStderr())  # the log handler only writes and flushes it
        handler = configure_logging("warning", s.log_format, stream=stderr, worker=self.provider.worker_name)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._start_reader)  # Spark starts while the producers publish
                ledger = await self._run_worker()
                tg.cancel_scope.cancel()
        finally:
            logging.getLogger().removeHandler(handler)
            await anyio.to_thread.run_sync(self.reader.stop)
        reader = "Spark" if s.spark else "the handoff reader"
        self.console.print(f"headrace demo: summary after {s.duration:g} s of traffic", highlight=False)
        for line in ledger.lines(reader):
            self.console.print(line, highlight=False)
        self.console.print("reconciled" if ledger.reconciled else "NOT reconciled", highlight=False)
        return 0 if ledger.reconciled else 1

    async def _start_reader(self) -> None:
        await _in_daemon_thread(self.reader.prepare)
        await self._worker_started.wait()
        await anyio.to_thread.run_sync(self.reader.start)
        self._reading.set()

    async def _run_worker(self) -> Ledger:
        s, provider = self.settings, self.provider
        async with provider, contextlib.AsyncExitStack() as stack:
            self._worker_started.set()
            # The status page (and the metrics) while the demo runs: a free port unless one is given.
            history = StatusHistory(every=PAGE_SAMPLE_EVERY)
            timeout = BalancerOptions().suspicion_timeout
            page = PageSource(provider.backend, timeout, f"--path {self.store}", history, provider.worker_name)
            stack.push_async_callback(page.close)
            server = stack.enter_context(serve_metrics(provider, s.metrics_port or 0, status=page.serve))
            self.console.print(
                f"  status page: http://127.0.0.1:{server.port}/ (live while the demo runs; metrics at /metrics)",
                highlight=False,
            )
            status = StatusLine(self.console, provider, self.traffic.published, self.reader.received, s.duration)
            async with anyio.create_task_group() as tg:
                board = provider.backend.status_board()
                if board is not None:  # what `headrace status` and the page read
                    await tg.start(StatusReporter(provider, board, PAGE_SAMPLE_EVERY / 2).run)
                tg.start_soon(history.run, provider)
                tg.start_soon(status.run)
                await self.traffic.run(provider, s.duration, s.corrupt_records)
                await self.traffic.complete(provider)
                with anyio.move_on_after(s.drain_timeout) as drain:
                    await provider.drain()
                if drain.cancelled_caught:
                    raise DemoError(f"the worker did not finish its queues within {s.drain_timeout:g} s")
                processed = take_snapshot(provider).event_time
                handed_off = await anyio.to_thread.run_sync(windows_handed_off, self.source)
                await self._wait_for_reader(handed_off)
                tg.cancel_scope.cancel()
            letters = await dead_letter_counts(provider.dead_letters)
        published = self.traffic.published
        return Ledger(
            published=published.events,
            corrupt=published.corrupt,
            processed=processed.counters["events"],
            in_windows=self.reader.received.events,
            adjusted=processed.counters["adjusted"],
            dead_letters=letters,
            windows_handed_off=handed_off,
            windows_received=self.reader.received.windows,
            late={a: processed.counters[f"late_arrival_{a}"] for a in ("adjusted", "dropped", "accepted")},
        )

    async def _wait_for_reader(self, handed_off: int) -> None:
        """Until the reader has every window handed off (it runs on its own trigger)."""
        with anyio.move_on_after(self.settings.drain_timeout):
            await self._reading.wait()
            while self.reader.received.windows < handed_off:
                failure = self.reader.failure()
                if failure is not None:
                    log.error("the window reader failed: %s", failure)
                    return
                await anyio.sleep(0.2)

    def _print_header(self) -> None:
        s = self.settings
        queues = f"Kafka at {s.kafka}" if s.kafka else f"the embedded store {self.store}"
        p = POLICY
        reader = (
            f"  spark: starting a local session (about 10 s); micro-batches every {s.trigger:g} s"
            if s.spark
            else "  no Spark: the windows are read from the handoff log directly"
        )
        lines = [
            f"headrace demo: {plural(s.streams, 'toll plaza')} × {plural(s.booths, 'booth')}, "
            f"{s.rate:,.0f} reports/s for {s.duration:g} s, {plural(s.queues, 'queue')} on {queues}",
            f"  consumer: cars and tolls per booth, {s.window:g} s tumbling windows; out_of_order {p.out_of_order:g}s, "
            f"late_arrival {p.late_arrival:g}s, early_arrival {p.early_arrival:g}s, action {Action(p.action).value}",
            reader,
        ]
        for line in lines:
            self.console.print(line, highlight=False)


async def _in_daemon_thread(fn: Callable[[], None]) -> None:
    """Run blocking ``fn`` in a daemon thread and wait for it: an interrupted demo (Ctrl-C)
    exits at once instead of waiting for Spark's session to finish starting."""
    done = anyio.Event()
    failure: list[BaseException] = []
    token = anyio.lowlevel.current_token()

    def target() -> None:
        try:
            fn()
        except BaseException as exc:
            failure.append(exc)
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=target, name="demo-reader-start", daemon=True).start()
    await done.wait()
    if failure:
        raise failure[0]


class _CurrentStderr:
    """``sys.stderr`` as it is at each write: rich's live display swaps it to print log lines
    above the status line."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@contextlib.contextmanager
def work_directory(path: Path | None) -> Iterator[tuple[Path, Path]]:
    """``(store, work)``: the store directory and a place for Spark's files; a temporary
    directory removed afterwards unless ``path`` is given."""
    if path is not None:
        yield path, path
        return
    with tempfile.TemporaryDirectory(prefix="headrace-demo-") as tmp:
        yield Path(tmp) / "store", Path(tmp)


NAMESPACE = "tolls"

# Out of order up to 2 s is normal jitter; beyond 15 s an event is late; more than 60 s
# ahead of its arrival, the clock is wrong.
POLICY = OrderingPolicy(timestamp_by="time", out_of_order=2, late_arrival=15, early_arrival=60, action="adjust")

# (vehicle class, toll): cars, vans, lorries, coaches
CLASSES: tuple[tuple[str, float], ...] = (("1", 2.10), ("2", 3.40), ("3", 5.80), ("4", 8.90))
CLASS_WEIGHTS = (80, 12, 6, 2)


@dataclass(frozen=True, slots=True)
class Shares:
    """The share of reports in each kind of trouble (the rest are on time)."""

    out_of_order: float = 0.08
    late: float = 0.01
    early: float = 0.002
    no_time: float = 0.001


class TollTraffic:
    """Cars at ``plazas`` toll plazas of ``booths`` booths each, ``rate`` reports per second
    in all, published to ``provider``; ``corrupt`` raw records spread over the run.

    >>> traffic = TollTraffic(plazas=2, booths=2, rate=10.0, seed=1)
    >>> [str(s) for s in traffic.streams]
    ['tolls/plaza-01', 'tolls/plaza-02']
    """

    TICK = 0.1  # seconds between two reports of a plaza

    def __init__(self, plazas: int, booths: int, rate: float, *, shares: Shares = Shares(), seed: int = 7) -> None:
        self.streams = [StreamId(NAMESPACE, f"plaza-{p:02d}") for p in range(1, plazas + 1)]
        self.booths = booths
        self.rate = rate
        self.shares = shares
        self.published = Published(streams=plazas)
        self._seed = seed

    async def run(self, provider: StreamProvider, duration: float, corrupt: int) -> None:
        """Publish for ``duration`` seconds, then return (the streams stay open)."""
        until = time.monotonic() + duration
        async with anyio.create_task_group() as tg:
            for number, stream_id in enumerate(self.streams):
                tg.start_soon(self._plaza, provider, stream_id, random.Random(self._seed * 1000 + number), until)
            tg.start_soon(self._corrupt_records, provider, corrupt, duration, random.Random(self._seed))

    async def complete(self, provider: StreamProvider) -> None:
        """End every stream: its last windows close (a final watermark)."""
        for stream_id in self.streams:
            await provider.get_stream(stream_id).on_completed()

    async def _plaza(self, provider: StreamProvider, stream_id: StreamId, rng: random.Random, until: float) -> None:
        stream = provider.get_stream(stream_id)
        booths = [f"{stream_id.key[-2:]}-{b}" for b in range(1, self.booths + 1)]
        per_tick = self.rate * self.TICK / len(self.streams)
        owed = rng.random()  # plazas do not all report at the same instant
        next_tick = time.monotonic()
        while next_tick < until:
            owed += per_tick
            count, owed = int(owed), owed - int(owed)
            if count:
                now = wall_time()
                await stream.on_next_batch([self._report(rng, booths, now) for _ in range(count)])
            next_tick += self.TICK
            await anyio.sleep(max(0.0, next_tick - time.monotonic()))

    def _report(self, rng: random.Random, booths: Sequence[str], now: float) -> dict[str, Any]:
        published, shares = self.published, self.shares
        published.events += 1
        vehicle, toll = rng.choices(CLASSES, CLASS_WEIGHTS)[0]
        report: dict[str, Any] = {"booth": rng.choice(booths), "class": vehicle, "toll": toll}
        roll = rng.random()
        if roll < shares.no_time:
            published.no_time += 1
            return report
        roll -= shares.no_time
        if roll < shares.early:
            published.early += 1
            delay = -600.0
        elif roll - shares.early < shares.late:
            published.late += 1
            delay = rng.uniform(20, 45)
        elif roll - shares.early - shares.late < shares.out_of_order:
            published.out_of_order += 1
            delay = rng.uniform(1, 6)
        else:
            delay = rng.uniform(0, 0.5)
        report["time"] = round(now - delay, 3)
        return report

    async def _corrupt_records(self, provider: StreamProvider, count: int, duration: float, rng: random.Random) -> None:
        """Raw bytes straight into the queues, as a buggy producer would write them."""
        if count <= 0:
            return
        adapter = await provider.factory.create_adapter()  # the provider's own (one per factory)
        for n in range(count):
            await anyio.sleep(duration / (count + 1))
            stream_id = rng.choice(self.streams)
            queue = provider.mapper.get_queue_for_stream(stream_id)
            await adapter.queue_message_batch(queue, stream_id, b"\x00corrupt %d " % n + rng.randbytes(12))
            self.published.corrupt += 1
