"""The clock: product code reads the wall clock only through streams/core/clock.py; the
manual clock steps its wall clock apart from the monotonic one; a step is noticed once."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import anyio

from streams.core.clock import ManualClock, StepWatch

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("streams", "agents", "cache", "balancer", "spark_sink")
ALLOWED = {Path("streams/core/clock.py")}
# Functions that read the wall clock (called with no time given, or referenced).
WALL_READS = {
    ("time", "time"),
    ("time", "time_ns"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
}
NO_ARGUMENT_READS = {("time", "localtime"), ("time", "gmtime"), ("time", "ctime"), ("time", "asctime")}


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def wall_clock_reads(source: str) -> list[int]:
    """The lines of ``source`` that read the wall clock other than through streams.core.clock.

    >>> wall_clock_reads("import time\\nx = time.time()\\ny = time.monotonic()")
    [2]
    """
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and (_name(node.value), node.attr) in WALL_READS:
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (_name(node.func.value), node.func.attr) in NO_ARGUMENT_READS
            and not node.args
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            names = {alias.name for alias in node.names}
            if node.module == "time" and names & {"time", "time_ns"}:
                lines.append(node.lineno)
    return sorted(lines)


def test_the_checker_finds_every_kind_of_wall_clock_read():
    source = "\n".join(
        [
            "import time, datetime",
            "a = time.time()",
            "b = datetime.datetime.now(datetime.UTC)",
            "c = field(default_factory=time.time)",
            "d = time.gmtime()",
            "e = time.gmtime(0)",  # a given time: no read
            "from time import time_ns",
            "f = datetime.date.today()",
            "g = time.monotonic()",
        ]
    )
    assert wall_clock_reads(source) == [2, 3, 4, 5, 7, 8]


def test_product_code_reads_the_wall_clock_only_in_clock_py():
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative in ALLOWED:
                continue
            found += [f"{relative}:{line}" for line in wall_clock_reads(path.read_text())]
    assert found == [], "read the wall clock through streams.core.clock (wall_time or a Clock)"


def test_a_manual_clock_steps_its_wall_clock_alone_and_sleepers_wait_on_elapsed_time():
    clock = ManualClock(1000.0)
    woke: list[float] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await clock.sleep(10)
                woke.append(clock.monotonic())

            tg.start_soon(sleeper)
            await clock.until_sleeping()
            clock.step(600)  # the wall clock jumps: no sleeper wakes
            await anyio.sleep(0)
            assert woke == []
            clock.advance(10)

    anyio.run(main)
    assert woke == [1010.0]
    assert (clock.now(), clock.monotonic()) == (1610.0, 1010.0)


def test_a_step_is_one_warning_with_its_size_and_drift_is_none(caplog):
    clock = ManualClock(1000.0)
    watch = StepWatch(clock)
    with caplog.at_level(logging.WARNING, logger="headrace.clock"):
        for _ in range(20):  # slow drift, half a second a look: never a step
            clock.advance(5)
            clock.step(0.5)
            assert watch.check() == 0.0
        clock.step(-600)
        assert watch.check() == -600.0
        assert watch.check() == -600.0  # the same step: said once
        clock.step(600)
        assert watch.check() == 0.0
    steps = [r.getMessage() for r in caplog.records]
    assert len(steps) == 2
    assert steps[0].startswith("the wall clock stepped -600.0 s")
    assert steps[1].startswith("the wall clock stepped +600.0 s")
