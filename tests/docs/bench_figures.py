"""The runs under bench/results/ and how docs/benchmarks.md and the README write their figures.

A run file holds one run of one script (``bench/timing.py``'s ``save_run``): its ``figures``
map a figure's name to a number. A page quotes a figure in a table cell: a ratio (a name with
" / ") as ``0.54x``, a whole number with thousands separators, anything else with the decimals
it was measured to. :func:`matches` says whether a cell quotes a value, to the cell's own
precision.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
MISSING = "—"


def runs_by_script(results: Path = RESULTS) -> dict[str, list[dict[str, Any]]]:
    """Every run, by script, oldest first (by date, then file name)."""
    runs: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path in sorted(results.glob("*.json")):
        run = json.loads(path.read_text())
        run["file"] = path.name
        runs.setdefault(run["script"], []).append((run["date"], path.name, run))
    return {script: [run for _, _, run in sorted(found)] for script, found in runs.items()}


def cell(name: str, value: float | None) -> str:
    """How a page writes ``value`` as the figure ``name``.

    >>> cell("headrace / baseline", 0.5), cell("events/s", 1234567), cell("ms", 0.051), cell("x", None)
    ('0.50x', '1,234,567', '0.051', '—')
    """
    if value is None:
        return MISSING
    if " / " in name:
        return f"{value:.2f}x"
    if isinstance(value, int) or (abs(value) >= 100 and float(value).is_integer()):
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    text = repr(float(value))
    decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
    if decimals > 3:
        decimals = 3 if abs(value) < 1 else 2
    return f"{value:.{decimals}f}"


def parse(text: str) -> tuple[float, int]:
    """A cell's number and its decimals: ``'1,234.5x'`` -> ``(1234.5, 1)``."""
    number = re.fullmatch(r"\s*(-?[\d,]+(?:\.(\d+))?)\s*[x%]?\s*", text)
    if number is None:
        raise ValueError(f"not a figure: {text!r}")
    return float(number.group(1).replace(",", "")), len(number.group(2) or "")


def matches(text: str, value: float) -> bool:
    """Whether the cell ``text`` quotes ``value`` to its own precision.

    >>> matches("0.54x", 0.5412), matches("0.54x", 0.546), matches("2,371,663", 2371663)
    (True, False, True)
    """
    number, decimals = parse(text)
    return math.isclose(number, value, abs_tol=0.5 * 10**-decimals + 1e-9)
