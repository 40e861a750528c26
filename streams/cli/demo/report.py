"""What the demo shows as it runs and at its end: the live status line and the closing account in
which every published record has exactly one fate.

The demo's closing account: every published record has exactly one fate.

The counts come from independent places, so agreeing means something: the producers' own
tally, the windows the last stage (Spark) received and the events counted in them, the
dead-letter store, the handoff log's offsets, and the event-time processors' counters.

The demo's live status line: what goes in and out, the watermark, and every fate.

On a terminal it is one line redrawn in place (rich); otherwise (a pipe, a CI log) the same
line is printed every few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import anyio
from rich.console import Console
from rich.live import Live
from rich.text import Text

from streams.cli.common import plural
from streams.cli.demo.windows import Received, clock_text
from streams.observability import EventTimeTotals, dead_letter_counts, take_snapshot
from streams.runtime.provider import StreamProvider

# Dead-letter reasons of events an ordering policy dropped; every other reason is a record
# the runtime could not use (corrupt, no timestamp, windows closed, consumer failure).
POLICY_DROPS = ("early_arrival", "late_arrival", "out_of_order")


@dataclass(slots=True)
class Published:
    """What the producers published, by kind (each report counts once)."""

    events: int = 0  # every report, with or without a time
    out_of_order: int = 0
    late: int = 0
    early: int = 0
    no_time: int = 0
    corrupt: int = 0  # raw records that are not batch containers (not events)
    streams: int = 0


@dataclass(frozen=True, slots=True)
class Check:
    label: str
    left: int
    right: int

    @property
    def ok(self) -> bool:
        return self.left == self.right


@dataclass(frozen=True, slots=True)
class Ledger:
    """What was published against where it went.

    >>> ledger = Ledger(published=100, corrupt=2, processed=100, in_windows=97, adjusted=9,
    ...                 dead_letters={"early_arrival": 2, "invalid_timestamp": 1, "undecodable": 2},
    ...                 windows_handed_off=12, windows_received=12)
    >>> (ledger.kept, ledger.dropped, ledger.dead_lettered, ledger.reconciled)
    (88, 2, 3, True)

    ``late`` counts, by action, the events that arrived more than ``late_arrival`` behind
    their event time: not a fate of its own, they are in the adjusted, dropped or kept rows.
    """

    published: int  # events the producers published, with a time or not
    corrupt: int  # raw records that were never events
    processed: int  # events the event-time consumers observed
    in_windows: int  # events counted in the windows the last stage received
    adjusted: int  # of those, events whose timestamp was moved
    dead_letters: Mapping[str, int]  # the dead-letter store, by reason
    windows_handed_off: int
    windows_received: int
    late: Mapping[str, int] = field(default_factory=dict)  # "adjusted", "dropped", "accepted"

    @property
    def kept(self) -> int:
        return self.in_windows - self.adjusted

    @property
    def dropped(self) -> int:
        return sum(self.dead_letters.get(reason, 0) for reason in POLICY_DROPS)

    @property
    def dead_lettered(self) -> int:
        return sum(n for reason, n in self.dead_letters.items() if reason not in POLICY_DROPS)

    def checks(self, reader: str = "the reader") -> list[Check]:
        return [
            Check(
                "published = kept + adjusted + dropped + dead-lettered",
                self.published + self.corrupt,
                self.kept + self.adjusted + self.dropped + self.dead_lettered,
            ),
            Check("every published event reached its consumer once", self.published, self.processed),
            Check("corrupt records dead-lettered", self.corrupt, self.dead_letters.get("undecodable", 0)),
            Check(f"windows handed off = windows {reader} received", self.windows_handed_off, self.windows_received),
        ]

    @property
    def reconciled(self) -> bool:
        return all(check.ok for check in self.checks())

    def lines(self, reader: str) -> list[str]:
        """The summary, as printed."""

        def reasons(names: Iterable[str]) -> str:
            return ", ".join(f"{r} {self.dead_letters.get(r, 0):,}" for r in names)

        other = sorted(r for r, n in self.dead_letters.items() if r not in POLICY_DROPS and n)
        late = ", ".join(f"{self.late.get(a, 0):,} {a}" for a in ("adjusted", "dropped", "accepted"))
        out = [
            f"  published      {self.published + self.corrupt:>9,}  "
            f"({plural(self.published, 'toll report')}, {plural(self.corrupt, 'corrupt record')})",
            f"  kept           {self.kept:>9,}  in a window, timestamp as reported",
            f"  adjusted       {self.adjusted:>9,}  in a window, timestamp moved (late or out of order)",
            f"  dropped        {self.dropped:>9,}  {reasons(POLICY_DROPS)}",
            f"  dead-lettered  {self.dead_lettered:>9,}  {reasons(other) or '-'}",
            f"  late           {sum(self.late.values()):>9,}  more than late_arrival behind, in the rows above: {late}",
            f"  windows        {self.windows_handed_off:>9,}  handed off; {reader} received {self.windows_received:,} "
            f"holding {plural(self.in_windows, 'event')}",
        ]
        for check in self.checks(reader):
            mark, sign = ("ok", "=") if check.ok else ("MISMATCH", "!=")
            out.append(f"  {mark:<8} {check.label}: {check.left:,} {sign} {check.right:,}")
        return out


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
