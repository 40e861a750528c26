"""headrace's retry helper (streams/core/retry.py) against tenacity and stamina: import time,
the cost of a call that succeeds at once (every receiver read and acknowledgement goes
through it), the cost of each failed attempt, how soon an anyio cancel scope ends each one
mid back-off, and which of the features headrace uses each one has. Each measured section is
timed with ``bench/timing.py``: wall-clock and CPU time, the round fastest by wall clock of 5.

The libraries are not headrace dependencies; install them beside it to run this:
    pip install --target /tmp/retry-libs stamina tenacity
    .venv/bin/python bench/retry_libs.py --libs /tmp/retry-libs
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import timing  # noqa: E402
from bench._common import import_ms  # noqa: E402
from bench.timing import PerCall, Report, best, per_call, timed  # noqa: E402
from streams.core.retry import Backoff, OutageLog, retry  # noqa: E402

CALLS = 20_000


async def ok() -> int:
    return 1


def flaky(failures: int) -> Callable[[], Awaitable[int]]:
    """An operation that fails ``failures`` times with ConnectionRefusedError, then answers."""
    left = [failures]

    async def call() -> int:
        if left[0]:
            left[0] -= 1
            raise ConnectionRefusedError("refused")
        return 1

    return call


async def per_call_us(run: Callable[[], Awaitable[Any]], calls: int = CALLS) -> PerCall:
    """µs a call of ``run``, wall-clock and CPU: the fastest of 5 timed rounds of ``calls // 5``."""
    runs: list[Report] = []
    for _ in range(5):
        with timed(calls // 5, freeze=False) as clock:
            for _ in range(calls // 5):
                await run()
        runs.append(clock.report())
    return per_call(best(runs))


def sides(libs_present: bool) -> dict[str, Callable[[Callable[[], Awaitable[int]]], Awaitable[int]]]:
    """Each way of running ``operation`` with retries, no pause between attempts, no give-up."""
    quiet = logging.getLogger("bench.retry")
    quiet.disabled = True
    outage = OutageLog("server", quiet)
    ways: dict[str, Callable[[Callable[[], Awaitable[int]]], Awaitable[int]]] = {
        "plain await (no retry)": lambda op: op(),
        "headrace retry()": lambda op: retry(op, what="x", backoff=Backoff(0, 0)),
        "headrace retry() + outage log": lambda op: retry(op, what="x", outage=outage, backoff=Backoff(0, 0)),
    }
    if not libs_present:
        return ways
    import stamina
    import tenacity

    stamina.instrumentation.set_on_retry_hooks([])  # by default it logs (and counts) every retry

    async def tenacity_loop(op: Callable[[], Awaitable[int]]) -> int:
        async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(OSError), wait=tenacity.wait_none(), reraise=True
        ):
            with attempt:
                return await op()
        raise AssertionError("unreachable")

    @tenacity.retry(retry=tenacity.retry_if_exception_type(OSError), wait=tenacity.wait_none(), reraise=True)
    async def tenacity_decorated(op: Callable[[], Awaitable[int]]) -> int:
        return await op()

    @stamina.retry(on=OSError, attempts=None, timeout=None, wait_initial=0, wait_max=0, wait_jitter=0)
    async def stamina_decorated(op: Callable[[], Awaitable[int]]) -> int:
        return await op()

    async def stamina_context(op: Callable[[], Awaitable[int]]) -> int:
        async for attempt in stamina.retry_context(
            on=OSError, attempts=None, timeout=None, wait_initial=0, wait_max=0, wait_jitter=0
        ):
            with attempt:
                return await op()
        raise AssertionError("unreachable")

    ways["tenacity AsyncRetrying loop"] = tenacity_loop
    ways["tenacity @retry"] = tenacity_decorated
    ways["stamina @retry"] = stamina_decorated
    ways["stamina retry_context"] = stamina_context
    return ways


async def cancelled_after(way: Callable[[], Awaitable[Any]]) -> PerCall:
    """Seconds (wall-clock, CPU) until a 50 ms cancel scope ends a retry that is backing off for 10 s."""
    with timed(1, freeze=False) as clock:
        with anyio.move_on_after(0.05):
            await way()
    return per_call(clock.report(), scale=1)


async def cancellation(libs_present: bool) -> dict[str, PerCall]:
    always = flaky(10**9)
    ways: dict[str, Callable[[], Awaitable[Any]]] = {
        "headrace retry()": lambda: retry(always, what="x", backoff=Backoff(10, 10)),
    }
    if libs_present:
        import stamina
        import tenacity

        ways["tenacity"] = lambda: tenacity.AsyncRetrying(wait=tenacity.wait_fixed(10))(always)

        @stamina.retry(on=OSError, attempts=None, timeout=None, wait_initial=10, wait_max=10, wait_jitter=0)
        async def stamina_way() -> int:
            return await always()

        ways["stamina"] = stamina_way
    return {name: await cancelled_after(way) for name, way in ways.items()}


FEATURES = """\
what headrace's callers use                     headrace retry()    tenacity             stamina
async, anyio sleep (cancel scopes, trio)        yes                 asyncio.sleep unless yes (sniffio: asyncio
                                                                    sleep= is given      or trio)
is_transient(exc) predicate                     yes                 retry_if_exception   on=callable
give up after N seconds of failures             yes                 stop_after_delay     timeout=
the give-up error says what failed and why      yes (QueueAdapter-  retry_error_callback no: the last error
  (one line for the user)                       Error, HeadraceError)                    is re-raised
exponential back-off, cap, jitter               yes (+0-20 %)       wait_exponential_    yes (wait_jitter is
                                                                    jitter               seconds added)
outage logged once when it starts and ends,     yes (OutageLog,     before_sleep for the no per call: hooks are
  shared by every client of one server          passed per call)    start; the end by    process-wide, and by
                                                                    the caller           default log every retry
per-attempt timeout (attempt_timeout)           yes                 no (caller wraps)    no (caller wraps)
stop(attempt) for a shutting-down caller        yes (RetryStopped)  stop= callable       no
on_failure(exc, attempt) (read-failure metric)  yes                 after= callback      no (global hooks)
blocking variant (SQLite busy, in a thread)     retry_blocking      Retrying             sync decorator
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libs", help="a folder holding stamina and tenacity (pip install --target)")
    args = parser.parse_args()
    if args.libs:
        sys.path.insert(1, args.libs)
    try:
        import stamina  # noqa: F401
        import tenacity  # noqa: F401

        libs_present = True
    except ImportError:
        libs_present = False
        print("stamina / tenacity not installed: headrace's figures only (see --libs)\n")

    print("import time, best of 5 (ms, cumulative -X importtime, after `import anyio, streams.core.errors`):")
    for module in ("streams.core.retry", "tenacity", "stamina"):
        ms = import_ms(f"import anyio, streams.core.errors; import {module}", module, args.libs)
        print(f"  {module:<30} {ms:7.1f}" if ms != float("inf") else f"  {module}: not installed")

    ways = sides(libs_present)

    async def measure() -> None:
        print("\nµs per call that succeeds at once (best of 5 rounds):")
        print(f"  {'':32} {'wall':>7} {'CPU':>7}")
        for name, way in ways.items():
            us = await per_call_us(lambda: way(ok))
            print(f"  {name:<32} {timing.note(f'{name}, µs a call', us.wall):7.2f} {us.cpu:7.2f}")
        print("\nµs per failed attempt (9 failures then success, no pause; best of 5 rounds):")
        print(f"  {'':32} {'wall':>7} {'CPU':>7}")
        for name, way in ways.items():
            if name.startswith("plain"):
                continue
            whole = await per_call_us(lambda: way(flaky(9)), 2000)
            print(
                f"  {name:<32} {timing.note(f'{name}, µs a failed attempt', whole.wall / 10):7.2f} {whole.cpu / 10:7.2f}"
            )
        print("\nseconds until a 50 ms anyio cancel scope ends a retry backing off for 10 s:")
        print(f"  {'':32} {'wall':>7} {'CPU':>7}")
        for name, seconds in (await cancellation(libs_present)).items():
            print(f"  {name:<32} {seconds.wall:7.3f} {seconds.cpu:7.3f}")

    anyio.run(measure)
    print("\n" + FEATURES)
    timing.save_run(__file__, {}, params={"libs": args.libs})


if __name__ == "__main__":
    main()
