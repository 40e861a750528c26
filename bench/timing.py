"""The one timing helper of the benchmarks: a run timed from inside the consumer's own hooks.

A task that polls counters on the worker's own event loop is not scheduled while the agents
drain a prefetched backlog, so its span would begin late and its rate be extrapolated from
the cheap tail of the run. A :class:`Clock` cannot be fooled that way: the consumer's code
stamps it itself, in the hooks the runtime calls.

- ``clock.taken(n)`` at the start of a hook that takes ``n`` events (``on_next``; the raw
  loop after ``getmany``). The first call stamps the run's start, before those events.
- ``clock.begin()`` in the first hook of a consumer that sees no events one by one (a
  windowed consumer's ``__init__``: the runtime activates it when its stream's first event is
  taken).
- ``clock.result(n)`` when a result is out (``on_window``, ``on_completed``, the end of an
  ``on_next``); ``n`` counts the events the result accounts for, for a consumer that counts
  through its results (a window's count). The last result once every event is done is the
  run's end.

At each stamp it reads ``time.perf_counter()`` and ``time.process_time()`` (this process's
CPU time: on a shared machine it moves less than the wall clock, and CPU over wall-clock time
says how much of the run the process waited). It reports both for the whole run and for its
steady part (from the stamp at which 10 % of the events were done to the one at which 90 %
were), and the share of the events the timed span covers: events counted at a stamp that
was the run's start (a poller's first look) happened before the span and are not covered.
A report covering under 90 % refuses to give a rate (:meth:`Report.rate` is ``None``, and
:meth:`Report.row` prints the refusal instead of a figure).

A micro-benchmark times each round of its calls with :func:`timed` and prints
:func:`per_call`'s time a call, wall-clock and CPU, of the round :func:`best` keeps.

Every script ends with :func:`save_run`: its figures, with the machine, the load, the Python
and package versions, the git commit and the date, as one JSON file under ``bench/results/``,
which docs/benchmarks.md quotes (``tests/docs/test_bench_results.py`` checks the page against
them).
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

# Under this share of the events inside the timed span a rate is an extrapolation: refused.
MIN_COVERAGE = 0.9
STEADY = (0.1, 0.9)  # the steady part: from 10 % of the events done to 90 %

Stamp = tuple[float, float, int]  # perf_counter, process_time, events done at that instant


def _now(done: int) -> Stamp:
    return time.perf_counter(), time.process_time(), done


@dataclass(frozen=True)
class Report:
    """A run's times, as stamped. Wall-clock and CPU seconds are NaN where a span is missing."""

    expected: int
    covered: int  # events done inside the timed span (after its first stamp)
    first_at: int  # the event the span began at (1 when it began before the first event)
    wall: float
    cpu: float
    steady_events: int
    steady_wall: float
    steady_cpu: float

    @property
    def coverage(self) -> float:
        return self.covered / self.expected if self.expected else 0.0

    @property
    def refused(self) -> bool:
        return not self.coverage >= MIN_COVERAGE or not self.wall > 0

    @property
    def rate(self) -> float | None:
        """Events a wall-clock second over the whole span; None when the span is refused."""
        return None if self.refused else self.covered / self.wall

    @property
    def cpu_rate(self) -> float | None:
        return None if self.refused or not self.cpu > 0 else self.covered / self.cpu

    @property
    def steady_rate(self) -> float | None:
        ok = not self.refused and self.steady_wall > 0
        return self.steady_events / self.steady_wall if ok else None

    @property
    def steady_cpu_share(self) -> float:
        """CPU over wall-clock time in the steady part: under 1, the process waited."""
        return self.steady_cpu / self.steady_wall if self.steady_wall > 0 else math.nan

    def refusal(self) -> str:
        return (
            f"no rate: the timed span covers {self.coverage:.0%} of the {self.expected:,} events "
            f"(from event {self.first_at:,}), under {MIN_COVERAGE:.0%}"
        )


def best(reports: Iterable[Report]) -> Report:
    """The best of several runs: the fastest one whose span is not refused (a shared machine
    only slows runs down), or the first refused one when all are."""
    runs = list(reports)
    good = [r for r in runs if not r.refused]
    return min(good, key=lambda r: r.wall) if good else runs[0]


class Clock:
    """Stamps a run of ``expected`` events from the consumer's hooks (see the module's doc).

    Made before the run, it collects the set-up's garbage (no side pays for what the other
    left) and, with ``freeze``, freezes what the set-up left alive (the events, the counts to
    check against): no side's garbage collections walk them."""

    def __init__(self, expected: int, *, freeze: bool = True) -> None:
        gc.collect()
        if freeze:
            gc.freeze()
        self.expected = expected
        self.done = 0
        self.start: Stamp | None = None
        self.end: Stamp | None = None
        self.steady: list[Stamp] = []
        # The next count at which a stamp is due (10 %, 90 %, then every event done): one
        # comparison a call until then, so that the hooks stay cheap.
        self._due = [max(1, math.ceil(expected * s)) for s in STEADY] + [expected]

    def begin(self) -> None:
        """The first event is being taken now (idempotent: only the first call stamps)."""
        if self.start is None:
            self.start = _now(self.done)

    def taken(self, n: int = 1) -> None:
        """``n`` events are being taken now, before the hook handles them."""
        if self.start is None:
            self.start = _now(self.done)
        if self.done >= self._due[0]:
            self._passed(self.done)
        self.done += n

    def result(self, n: int = 0) -> None:
        """A result is out now, accounting for ``n`` more events (0: they were counted by
        :meth:`taken`). The last one once every event is done ends the run."""
        self.done += n
        if self.start is None:  # the first stamp comes after these events: not covered
            self.start = _now(self.done)
        if self.done >= self._due[0]:
            self._passed(self.done)

    def _passed(self, done: int) -> None:
        stamp = _now(done)
        while len(self._due) > 1 and done >= self._due[0]:
            self.steady.append(stamp)
            self._due.pop(0)
        if done >= self.expected:
            self.end = stamp

    @property
    def complete(self) -> bool:
        """Every expected event is done (the bench may stop the run; the stamps are taken)."""
        return self.done >= self.expected

    def report(self) -> Report:
        """The run as stamped so far: take it before shutting the run down, whose results
        (windows a shutdown closes) would stamp later."""
        nan = math.nan
        if self.start is None:
            return Report(self.expected, 0, 0, nan, nan, 0, nan, nan)
        end = self.end or (self.steady[-1] if self.steady else self.start)
        wall0, cpu0, at = self.start
        wall1, cpu1, done = end
        steady = self.steady if len(self.steady) == 2 else None
        return Report(
            expected=self.expected,
            covered=done - at,
            first_at=at + 1,
            wall=wall1 - wall0,
            cpu=cpu1 - cpu0,
            steady_events=steady[1][2] - steady[0][2] if steady else 0,
            steady_wall=steady[1][0] - steady[0][0] if steady else nan,
            steady_cpu=steady[1][1] - steady[0][1] if steady else nan,
        )


@contextmanager
def timed(events: int, *, freeze: bool = True) -> Iterator[Clock]:
    """A section that does ``events`` events' work by itself, start to end: a synchronous
    loop (nothing else runs while it does, so nothing can be starved), or a producer's calls
    up to its flush. It begins at entry and has its one result at exit; a section that stamps
    its own steps (``taken`` / ``result``) inside gets its steady part as well.

    >>> with timed(10, freeze=False) as clock:
    ...     _ = sum(range(1000))
    >>> report = clock.report()
    >>> report.coverage, report.first_at, report.refused
    (1.0, 1, False)
    """
    clock = Clock(events, freeze=freeze)
    clock.begin()
    yield clock
    clock.result(events - clock.done)


def figure(report: Report, scale: float = 1.0) -> str:
    """``report``'s rate (times ``scale``) as printed, or its refusal."""
    return report.refusal() if report.rate is None else f"{report.rate * scale:,.0f}"


def cpu_figure(report: Report, scale: float = 1.0) -> str:
    """``report``'s rate per CPU second (times ``scale``) as printed, or its refusal: the
    column a table of :func:`figure` rates prints beside them.

    >>> report = Report(1_000, 1_000, 1, 0.5, 0.25, 0, math.nan, math.nan)
    >>> figure(report), cpu_figure(report)
    ('2,000', '4,000')
    """
    return report.refusal() if report.cpu_rate is None else f"{report.cpu_rate * scale:,.0f}"


class PerCall(NamedTuple):
    """Wall-clock and CPU time a call (an event) took over a report's whole span."""

    wall: float
    cpu: float


def per_call(report: Report, scale: float = 1e6) -> PerCall:
    """``report``'s wall-clock and CPU seconds over the events its span covers, times ``scale``
    (1e6: microseconds a call; 1e9: nanoseconds): a micro-benchmark's figure, from a
    :func:`timed` section of ``n`` calls. NaN when the span covers no event.

    >>> per_call(Report(250_000, 250_000, 1, 0.5, 0.25, 0, math.nan, math.nan))
    PerCall(wall=2.0, cpu=1.0)
    >>> per_call(Report(1_000, 1_000, 1, 0.5, 0.25, 0, math.nan, math.nan), scale=1e9).wall
    500000.0
    """
    if not report.covered:
        return PerCall(math.nan, math.nan)
    return PerCall(report.wall * scale / report.covered, report.cpu * scale / report.covered)


def coverage_line(reports: Iterable[Report]) -> str:
    """The share of their events the timed spans of ``reports`` cover, for a table whose
    rows show only rates (each row under :data:`MIN_COVERAGE` shows its refusal instead).

    >>> with timed(10, freeze=False) as clock:
    ...     pass
    >>> coverage_line([clock.report()])
    'timed spans (bench/timing.py): 100%–100% of their events; under 90% a row gives no rate'
    """
    shares = [r.coverage for r in reports]
    return (
        f"timed spans (bench/timing.py): {min(shares):.0%}–{max(shares):.0%} of their events; "
        f"under {MIN_COVERAGE:.0%} a row gives no rate"
    )


HEADER = (
    f"{'':58} {'events/s':>10} {'vs base':>7} {'per CPU s':>10} {'vs base':>7} "
    f"{'steady/s':>10} {'CPU/wall':>8}  timed span"
)


def row(name: str, report: Report, base: Report | None = None) -> str:
    """One benchmark row: rates over the whole span (and against ``base``'s), the steady
    part's rate and CPU over wall-clock time, and the share of events the span covers; or,
    under :data:`MIN_COVERAGE`, a refusal in place of every figure."""
    span = f"{report.coverage:4.0%} of {report.expected:,}, from event {report.first_at:,}"
    rate, cpu_rate, steady = report.rate, report.cpu_rate, report.steady_rate
    _note_row(name.strip(), report, base)
    if rate is None:
        return f"{name:58} {report.refusal()}"
    vs = f"{rate / base.rate:6.2f}x" if base is not None and base.rate else f"{'':7}"
    vs_cpu = f"{cpu_rate / base.cpu_rate:6.2f}x" if cpu_rate and base is not None and base.cpu_rate else f"{'':7}"
    # A section timed only from its start to its end has no steady part: "-".
    steady_text = f"{steady:10,.0f} {report.steady_cpu_share:8.2f}" if steady else f"{'-':>10} {'-':>8}"
    return f"{name:58} {rate:10,.0f} {vs} {cpu_rate or math.nan:10,.0f} {vs_cpu} {steady_text}  {span}"


_ROWS: dict[str, float] = {}  # the figures of every row printed so far: what save_run writes


def note(name: str, value: float) -> float:
    """Keep ``value`` as the figure ``name`` of this run, for :func:`save_run` (what a script
    prints that is not a :func:`row`); returns it, to print."""
    _ROWS[f"{_SECTION[0]}{name}"] = value
    return value


_SECTION = [""]


def note_ratio(name: str, report: Report, base: Report, *, cpu: bool = False) -> None:
    """Keep ``report``'s rate over ``base``'s (per CPU second with ``cpu``) as the figure
    ``name``, as docs/benchmarks.md names it; nothing when either rate is refused."""
    ours, theirs = (report.cpu_rate, base.cpu_rate) if cpu else (report.rate, base.rate)
    if ours and theirs:
        note(name, ours / theirs)


def section(name: str) -> None:
    """Prefix the figures noted from now on with ``name`` (a round trip, a garbage-collector
    setting): one script run that prints the same rows for several settings."""
    _SECTION[0] = f"{name}: " if name else ""


def _note_row(name: str, report: Report, base: Report | None) -> None:
    rate, cpu_rate = report.rate, report.cpu_rate
    if rate is None:
        return
    name = f"{_SECTION[0]}{name}"
    _ROWS[f"{name}, events/s"] = rate
    if cpu_rate:
        _ROWS[f"{name}, per CPU second"] = cpu_rate
    if base is not None and base.rate:
        _ROWS[f"{name}, vs base"] = rate / base.rate
        if cpu_rate and base.cpu_rate:
            _ROWS[f"{name}, vs base per CPU second"] = cpu_rate / base.cpu_rate
    if report.steady_rate:
        _ROWS[f"{name}, steady CPU/wall"] = report.steady_cpu_share


class StampFile:
    """The stamps of one process of a run that several processes share (``bench/scale.py``'s
    workers), written to ``path`` as the process's consumers take events: a line
    ``perf_counter process_time events-done`` before the first event and then whenever
    another ``every`` events are done. ``perf_counter`` is the system's monotonic clock on
    Linux, the same in every process, so :func:`merged` puts the processes' stamps on one
    time line."""

    def __init__(self, path: str, every: int) -> None:
        self._file = open(path, "a", buffering=1)  # a line each, written as it is made  # noqa: SIM115
        self.every = every
        self.done = 0
        self._due = 0

    def taken(self, n: int) -> None:
        """``n`` events are being taken now (stamped before them when a stamp is due)."""
        if self.done >= self._due:
            self._stamp()
        self.done += n

    def result(self) -> None:
        """The events taken so far are done (stamped when a stamp is due)."""
        if self.done >= self._due:
            self._stamp()

    def _stamp(self) -> None:
        wall, cpu, done = _now(self.done)
        self._file.write(f"{wall!r} {cpu!r} {done}\n")
        self._due = self.done + self.every


def merged(paths: Iterable[str], expected: int) -> Report:
    """One report of a run that several processes shared, from their :class:`StampFile` s:
    from the first event any took to the stamp at which all of them together had done
    ``expected`` (or their last stamp), CPU time summed over the processes from each one's
    first stamp; the steady part from 10 % to 90 % of ``expected`` done, all processes
    together."""
    stamps: list[tuple[float, float, int, int]] = []
    for n, path in enumerate(paths):
        with open(path) as f:
            for line in f:
                wall, cpu, done = line.split()
                stamps.append((float(wall), float(cpu), int(done), n))
    stamps.sort()
    nan = math.nan
    if not stamps:
        return Report(expected, 0, 0, nan, nan, 0, nan, nan)
    first_cpu: dict[int, float] = {}
    cpu_now: dict[int, float] = {}
    done_now: dict[int, int] = {}
    line: list[Stamp] = []  # all processes together: (wall, CPU since their first stamps, done)
    for wall, cpu, done, n in stamps:
        first_cpu.setdefault(n, cpu)
        cpu_now[n], done_now[n] = cpu, done
        line.append((wall, sum(cpu_now[p] - first_cpu[p] for p in cpu_now), sum(done_now.values())))
    start = line[0]
    end = next((s for s in line if s[2] >= expected), line[-1])
    due = [max(1, math.ceil(expected * s)) for s in STEADY]
    steady = [next((s for s in line if s[2] >= d), None) for d in due]
    low, high = steady
    has_steady = low is not None and high is not None and high[2] > low[2]
    return Report(
        expected=expected,
        covered=end[2] - start[2],
        first_at=start[2] + 1,
        wall=end[0] - start[0],
        cpu=end[1] - start[1],
        steady_events=high[2] - low[2] if has_steady else 0,  # type: ignore[index]
        steady_wall=high[0] - low[0] if has_steady else nan,  # type: ignore[index]
        steady_cpu=high[1] - low[1] if has_steady else nan,  # type: ignore[index]
    )


RESULTS = Path(__file__).resolve().parent / "results"
# The packages whose versions decide a figure: headrace's own and what the benches compare with.
PACKAGES = ("headrace", "aiokafka", "msgspec", "pyspark", "pyarrow", "quixstreams", "bytewax", "tenacity", "stamina")
_LOAD_AT_START = os.getloadavg()  # the load when the script started (imported at its top)


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return done.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def save_run(
    script: str, figures: dict[str, float], *, params: dict[str, object] | None = None, to: Path = RESULTS
) -> Path:
    """Write one run of ``script`` (its file name, or ``__file__``) as JSON under ``to``:
    ``figures`` (name -> number, as docs/benchmarks.md quotes them), the parameters it ran
    with, and where and when it ran, beside the figures of every :func:`row` printed. NaN
    figures (a refused rate) are left out.

    >>> import tempfile
    >>> _ROWS.clear()  # the rows other examples printed are not this run's
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     path = save_run("core.py", {"ratio": 0.5, "refused": math.nan}, to=Path(d))
    ...     run = json.loads(path.read_text())
    run saved to ...
    >>> run["script"], run["source"], run["figures"], sorted(run["load"])
    ('core.py', 'measured', {'ratio': 0.5}, ['end', 'start'])
    """
    name = Path(script).name
    now = datetime.now(UTC)
    run = {
        "source": "measured",
        "script": name,
        "command": " ".join(["python", f"bench/{name}", *sys.argv[1:]]),
        "date": now.isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
        "load": {"start": list(_LOAD_AT_START), "end": list(os.getloadavg())},
        "python": platform.python_version(),
        "packages": _versions(),
        "params": params or {},
        "figures": {k: v for k, v in {**_ROWS, **figures}.items() if not (isinstance(v, float) and math.isnan(v))},
    }
    to.mkdir(parents=True, exist_ok=True)
    path = to / f"{Path(name).stem}-{now:%Y%m%dT%H%M%S}.json"
    path.write_text(json.dumps(run, indent=2, ensure_ascii=False, default=str) + "\n")  # a Path parameter as text
    print(f"run saved to {path}")
    return path
