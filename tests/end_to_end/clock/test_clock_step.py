"""A worker whose wall clock steps (libfaketime: +10 minutes and back, -10 minutes and back;
its monotonic clock true) while a producer with the true clock publishes: its windows, dead
letters and handoff rows are those of the run with no step, it loses no lease, replays
nothing, and a processing-time timer set before the step fires once, when it was set for."""

from __future__ import annotations

import math
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from streams import StreamId, StreamProvider
from tests.helpers import counted_windows, start_worker, wait_until

WORKER = Path(__file__).with_name("stepped_worker.py")
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
STEP_AT, BACK_AT, PUBLISH_FOR, TIMER_IN = 0.8, 2.4, 3.5, 2.0


def faked(offset_file: Path) -> dict[str, str]:
    """The environment of a process whose wall clock (only) follows ``offset_file``.
    libfaketime re-reads the file once a second: read on every call (its no-cache mode),
    the worker's every read of the time costs a file read, and a loaded machine slows it
    by seconds."""
    return {
        "LD_PRELOAD": str(FAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_CACHE_DURATION": "1",
        "DONT_FAKE_MONOTONIC": "1",
    }


@pytest.fixture(autouse=True)
def _libfaketime() -> None:
    """The suite installs it (.ci/run); a machine without it fails here, saying so."""
    if not FAKETIME.exists() or shutil.which("faketime") is None:
        pytest.fail("these tests need libfaketime: apt-get install faketime (Debian)")


async def _publish(where: Path, offset_file: Path, step: int) -> tuple[list[float], float]:
    """Meters at 20 a second for PUBLISH_FOR seconds, a reminder first and a mark on its
    stream once it is due; the worker's clock stepped by ``step`` seconds from STEP_AT to
    BACK_AT. The event times and the monotonic time the reminder is due at."""
    times: list[float] = []
    async with StreamProvider.embedded(where, queues=1).client() as client:
        began = time.monotonic()
        reminders = client.get_stream(StreamId("reminders", "r"))
        await reminders.on_next({"at": time.time() + TIMER_IN})
        due = began + TIMER_IN
        meter, stepped, back, marked = client.get_stream(StreamId("meters", "m")), False, False, False
        while (elapsed := time.monotonic() - began) < PUBLISH_FOR:
            if not marked and elapsed >= TIMER_IN:
                await reminders.on_next({"mark": time.time()})  # it arrives after the reminder's time
                marked = True
            if not stepped and elapsed >= STEP_AT:
                offset_file.write_text(f"{step:+d}\n")
                stepped = True
            if not back and elapsed >= BACK_AT:
                offset_file.write_text("+0\n")
                back = True
            t = time.time()
            await meter.on_next({"t": t})
            times.append(t)
            await anyio.sleep(0.05)
    return times, due


def _expected(times: list[float]) -> list[tuple[float, float, int]]:
    counts = Counter(math.floor(t) for t in times)
    return [(float(s), float(s + 1), n) for s, n in sorted(counts.items())]


@pytest.mark.parametrize("step", [0, 600, -600], ids=["no step", "+10 min and back", "-10 min and back"])
def test_a_worker_whose_wall_clock_steps_gives_the_results_of_one_whose_clock_does_not(tmp_path, step):
    where, out, offset_file = tmp_path / "store", tmp_path / "out.txt", tmp_path / "offset"
    offset_file.write_text("+0\n")
    out.touch()
    env = faked(offset_file)
    with (tmp_path / "worker.log").open("w") as log:
        worker = start_worker(WORKER, where, out, env=env, stderr=log)
        try:
            times, due = anyio.run(_publish, where, offset_file, step)
            expected = _expected(times)
            # Every window closes (end + late_arrival by the processing clock), then one more.
            wait_until(lambda: len(counted_windows(where)) >= len(expected), 10.0)
            time.sleep(0.5)  # and any window given twice (asserted below)
            wait_until(lambda: {"fired", "mark"} <= set(out.read_text().split()), 10.0)
            # The step back is said by the worker's next balancing round (slowed for a
            # second or two by libfaketime after each step).
            wait_until(
                lambda: (tmp_path / "worker.log").read_text().count("the wall clock stepped") >= 2 * bool(step), 10.0
            )
        finally:
            worker.send_signal(signal.SIGINT)
            worker.wait(10)
    logged = (tmp_path / "worker.log").read_text()
    assert "lease lost" not in logged, logged
    assert counted_windows(where) == expected  # each event in its own window, each window once
    assert "dead-letter" not in logged and "late" not in logged
    lines = out.read_text().split()
    sets = [float(lines[i + 2]) for i in range(0, len(lines), 3) if lines[i] == "set"]
    fired = [float(lines[i + 2]) for i in range(0, len(lines), 3) if lines[i] == "fired"]
    marks = [float(lines[i + 2]) for i in range(0, len(lines), 3) if lines[i] == "mark"]
    assert len(sets) == 1, lines  # set once: never replayed
    assert len(fired) == len(marks) == 1, lines  # fired once
    # Not before the elapsed time it was set for: a clock that followed the +10 minutes
    # fires it at the step, 1.2 s early. Nor later than the worker's own progress allows: the
    # queue's clock never runs ahead of its records, so it lags the true time by the
    # worker's read latency, seconds on a loaded machine (whose pauses stall the producer
    # too); but once the worker has read a record that arrived after the timer's time (the
    # mark), its clock is past that time, and the timer fires at the activation's next tick,
    # a timer period (0.1 s) later: a second allows for the machine's pauses in between. A
    # clock that stands still until a later read, or a tick that waits on anything else (a
    # write, a collection), fails here however fast or slow the machine.
    assert due - 0.05 <= fired[0] <= marks[0] + 1.0, (fired[0] - due, marks[0] - due)
    steps = [line for line in logged.splitlines() if "the wall clock stepped" in line]
    if step:
        # At most a line each way, with its size. The watch looks once a balancing round, and
        # libfaketime re-reads its file once a second, so a loaded machine can miss a step this
        # short: tests/streams/core/test_clock.py holds the one line per step.
        assert len(steps) <= 2, logged
        sizes = {f"stepped {step:+.1f} s", f"stepped {-step:+.1f} s"}
        assert all(any(size in line for size in sizes) for line in steps), steps
    else:
        assert steps == []
