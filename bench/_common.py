"""Small helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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


def keep_compiled_modules() -> None:
    """Let the Python processes this benchmark starts (Spark's Python workers, its streaming
    reader) load headrace's modules compiled, as from an installed package, instead of
    compiling them from source each time, as they would where the environment sets
    ``PYTHONDONTWRITEBYTECODE``: a cost the benchmark's minimal source, shipped by value,
    does not pay."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(__file__).resolve().parents[1] / ".venv" / "pycache"))


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def import_ms(statement: str, module: str, libs: str | None, rounds: int = 5) -> float:
    """Best of ``rounds``: the cumulative import time (-X importtime) of ``module`` in a fresh
    interpreter that runs ``statement`` (what it imports before is not counted)."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, libs) if p))
    best = float("inf")
    for _ in range(rounds):
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement], env=env, capture_output=True, text=True, check=False
        )
        for line in run.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] == module:
                best = min(best, int(parts[1]) / 1000)
    return best
