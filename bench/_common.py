"""Small helpers shared by the benchmark scripts."""

from __future__ import annotations

import gc
import os
import time


def _status_mb(field: str) -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    """This process's resident set size now, in MiB (Linux)."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (Linux)."""
    return _status_mb("VmHWM")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class Stopwatch:
    """Times a section; it starts after a full garbage collection, so that no side of a
    comparison pays for the garbage the set-up (or the other side) left behind."""

    def __enter__(self) -> Stopwatch:
        gc.collect()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
