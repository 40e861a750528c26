"""The whole demo pipeline, in one process.

toll plaza producers ─▶ queues (embedded store, or Kafka) ─▶ this process's worker: pulling
agents ─▶ one ``BoothTotals`` activation per plaza (ordering policy, 10 s tumbling windows)
─▶ handoff log ─▶ a Spark streaming query printing each micro-batch of finalized windows.

Spark's session takes about ten seconds to start, so it starts in a thread at once, while
the producers already publish. After ``duration`` the producers stop, every stream
completes (its last windows close), the worker drains, Spark reads the last windows, and
the summary reconciles the counts.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from rich.console import Console

from spark_sink import Handoff
from streams.cli.common import plural
from streams.cli.demo.settings import DemoSettings
from streams.cli.demo.status import StatusLine
from streams.cli.demo.summary import Ledger
from streams.cli.demo.traffic import NAMESPACE, POLICY, TollTraffic
from streams.cli.demo.windows import HANDOFF, BatchPrinter, HandoffTail, SparkWindows, WindowReader
from streams.cli.demo.windows import handed_off as windows_handed_off
from streams.core.errors import HeadraceError
from streams.core.ids import StreamId
from streams.eventtime import Action, Combined, Count, EventTime, Sum, Tumbling
from streams.kafka.adapter import KafkaAdapterFactory
from streams.kafka.clients import check_reachable
from streams.observability import configure_logging, dead_letter_counts, serve_metrics, take_snapshot
from streams.runtime.provider import StreamProvider

log = logging.getLogger("headrace.demo")


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
        if isinstance(self.provider.factory, KafkaAdapterFactory):  # a wrong address: say so in seconds
            await check_reachable(self.provider.factory.settings, s.kafka_reach_timeout)
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
            if s.metrics_port is not None:
                server = stack.enter_context(serve_metrics(provider, s.metrics_port))
                self.console.print(f"  metrics: http://127.0.0.1:{server.port}/metrics", highlight=False)
            status = StatusLine(self.console, provider, self.traffic.published, self.reader.received, s.duration)
            async with anyio.create_task_group() as tg:
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
