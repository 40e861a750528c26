"""The demo's live status line: what goes in and out, the watermark, and every fate.

On a terminal it is one line redrawn in place (rich); otherwise (a pipe, a CI log) the same
line is printed every few seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
from rich.console import Console
from rich.live import Live
from rich.text import Text

from streams.cli.demo.summary import POLICY_DROPS
from streams.cli.demo.traffic import Published
from streams.cli.demo.windows import Received, clock_text
from streams.observability import EventTimeTotals, dead_letter_counts, take_snapshot
from streams.runtime.provider import StreamProvider


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the pipeline's counts."""

    at: float
    published: int
    event_time: EventTimeTotals
    dead_lettered: int
    received: int


class StatusLine:
    """Reads the pipeline every ``period`` seconds and shows rates since the last reading."""

    def __init__(
        self, console: Console, provider: StreamProvider, published: Published, received: Received, duration: float
    ) -> None:
        self.console = console
        self.provider = provider
        self.published = published
        self.received = received
        self.duration = duration
        self._started = time.monotonic()

    async def sample(self) -> Sample:
        letters = await dead_letter_counts(self.provider.dead_letters)
        return Sample(
            time.monotonic(),
            self.published.events,
            take_snapshot(self.provider).event_time,
            sum(n for reason, n in letters.items() if reason not in POLICY_DROPS),
            self.received.windows,
        )

    def render(self, now: Sample, before: Sample) -> Text:
        dt = max(now.at - before.at, 1e-9)
        et = now.event_time
        rate_in = (now.published - before.published) / dt
        rate_out = (et.counters["events"] - before.event_time.counters["events"]) / dt
        if et.watermark is None:
            mark = "watermark -"
        else:
            mark = f"watermark {clock_text(et.watermark)} (delay {et.delay or 0:.1f}s)"
        elapsed = min(now.at - self._started, self.duration)
        return Text.assemble(
            (f"{elapsed:4.0f}/{self.duration:.0f}s ", "dim"),
            f"in {rate_in:6,.0f}/s  out {rate_out:6,.0f}/s  {mark}  ",
            ("late ", "yellow"),
            f"{et.late:,}  ",
            ("adjusted ", "yellow"),
            f"{et.counters['adjusted']:,}  ",
            ("dropped ", "red"),
            f"{et.dropped:,}  ",
            ("dead-lettered ", "red"),
            f"{now.dead_lettered:,}  ",
            ("windows ", "green"),
            f"{et.counters['windows_emitted']:,} closed, {now.received:,} read",
        )

    async def run(self, period: float = 0.5, plain_every: float = 5.0) -> None:
        """Show the line until cancelled."""
        before = await self.sample()
        if not self.console.is_terminal:
            while True:
                await anyio.sleep(plain_every)
                now = await self.sample()
                self.console.print(self.render(now, before), highlight=False)
                before = now
        with Live(console=self.console, refresh_per_second=4) as live:
            while True:
                await anyio.sleep(period)
                now = await self.sample()
                live.update(self.render(now, before))
                before = now
