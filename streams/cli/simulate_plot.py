"""The picture ``headrace simulate --plot`` draws, after the ASA documentation's figures:
event time against arrival time, each watermark as a step line, adjusted events with an
arrow from their original time, dropped and dead-lettered events marked, windows as bands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from itertools import cycle
from typing import Any

from matplotlib import dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..eventtime.policy import Action
from ..eventtime.processor import ADJUSTED, DEAD_LETTER, DROPPED, EventOutcome, WatermarkAdvance, WindowResult
from ..eventtime.replay import ReplayOptions, Row, TraceItem

_LANE_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_MAX_TICK_LINES = 200


def draw(path: str, rows: Sequence[Row], trace: Sequence[TraceItem], options: ReplayOptions, form: Any) -> None:
    """Write the PNG for one replay to ``path``. ``form`` maps times for the axes (a
    :class:`streams.cli.simulate.TimeForm`)."""
    x: Callable[[float], Any] = form.to_datetime if form.iso else (lambda t: t)
    fig = Figure(figsize=(11, 6.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    arrivals = [row.arrival_time for row in rows] or [0.0]
    left, right = min(arrivals), max(arrivals)
    pad = (right - left) * 0.03 or 1.0
    left, right = left - pad, right + pad

    events = [item for item in trace if isinstance(item, EventOutcome)]
    _windows(ax, [i for i in trace if isinstance(i, WindowResult)], rows, x, right)
    times = [r.event_time for r in rows if r.event_time is not None] + arrivals
    low, high = min(times), max(times)
    ax.plot([x(low), x(high)], [x(low), x(high)], color="0.6", lw=0.8, ls="--", label="event time = arrival time")
    _watermarks(ax, [i for i in trace if isinstance(i, WatermarkAdvance)], x, right)
    _events(ax, events, x)
    for row in [r for r in rows if r.event_time is None][:_MAX_TICK_LINES]:
        ax.axvline(x(row.arrival_time), color="0.85", lw=0.6, zorder=0)

    ax.set_xlim(x(left), x(right))
    ax.set_xlabel("arrival time (processing clock)")
    ax.set_ylabel("event time")
    ax.set_title(_title(options), fontsize=10)
    ax.grid(True, color="0.92")
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    if form.iso:
        for axis in (ax.xaxis, ax.yaxis):
            locator = mdates.AutoDateLocator()
            axis.set_major_locator(locator)
            axis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    fig.tight_layout()
    fig.savefig(path, format="png")


def _windows(
    ax: Any, windows: list[WindowResult], rows: Sequence[Row], x: Callable[[float], Any], right: float
) -> None:
    # One band per window span: per-key results of the same window share it and its label.
    spans: dict[tuple[float, float], list[WindowResult]] = {}
    for window in windows:
        spans.setdefault((window.start, window.end), []).append(window)
    shades = cycle(("#fdd9a0", "#c7e0f4"))
    for n, ((low, high), results) in enumerate(spans.items()):
        members = [rows[i].arrival_time for w in results for i in w.value]
        closes = [w.closed_at if w.closed_at is not None else right for w in results]
        start, stop = (min(members) if members else low), max(closes)
        ax.fill_between(
            [x(start), x(stop)], x(low), x(high), color=next(shades), alpha=0.45, lw=0, zorder=0,
            label=None if n else "window (first event's arrival → close)",
        )
        tag = ", ".join(str(len(w.value)) if w.key is None else f"{w.key}: {len(w.value)}" for w in results)
        ax.annotate(tag, (x(stop), x(high)), fontsize=7, color="0.3", ha="right", va="top")


def _watermarks(ax: Any, advances: list[WatermarkAdvance], x: Callable[[float], Any], right: float) -> None:
    lanes: dict[Hashable, list[tuple[float, float]]] = {}
    for step in advances:
        if step.arrival_time is not None and math.isfinite(step.watermark) and step.partition is not None:
            lanes.setdefault(step.substream, []).append((step.arrival_time, step.watermark))
    for (lane, points), colour in zip(lanes.items(), cycle(_LANE_COLOURS)):
        points.append((right, points[-1][1]))  # hold the last value to the right edge
        ax.step(
            [x(a) for a, _ in points], [x(w) for _, w in points], where="post", color=colour, lw=1.6,
            label="watermark" if lane is None else f"watermark {lane}",
        )


def _events(ax: Any, events: list[EventOutcome], x: Callable[[float], Any]) -> None:
    def scatter(items: list[EventOutcome], at: Callable[[EventOutcome], float], **style: Any) -> None:
        if items:
            ax.scatter([x(e.record.arrival_time) for e in items], [x(at(e)) for e in items], zorder=3, **style)

    kept = [e for e in events if e.status not in (ADJUSTED, DROPPED, DEAD_LETTER)]
    adjusted = [e for e in events if e.status == ADJUSTED]
    dropped = [e for e in events if e.status == DROPPED]
    dead = [e for e in events if e.status == DEAD_LETTER]
    scatter(kept, _timestamp, s=22, color="#1f77b4", label="kept")
    scatter(adjusted, _timestamp, s=26, color="#ff7f0e", label="adjusted (arrow from its event time)")
    scatter(adjusted, _event_time, s=26, facecolors="none", edgecolors="#ff7f0e")
    for e in adjusted:
        ax.annotate(
            "", xy=(x(e.record.arrival_time), x(_timestamp(e))), xytext=(x(e.record.arrival_time), x(_event_time(e))),
            arrowprops={"arrowstyle": "->", "color": "#ff7f0e", "lw": 1.0}, zorder=3,
        )
    scatter(dropped, _event_time, s=40, marker="x", color="#d62728", label="dropped")
    scatter(dead, _timestamp, s=36, marker="s", color="#7f3c8d", label="dead-lettered (window closed)")


def _timestamp(e: EventOutcome) -> float:
    assert e.timestamp is not None  # only a dropped event has none
    return e.timestamp


def _event_time(e: EventOutcome) -> float:
    assert e.event_time is not None  # a replayed event always has one (no timestamp_by)
    return e.event_time


def _title(options: ReplayOptions) -> str:
    p = options.policy
    parts = [f"out_of_order={p.out_of_order:g}s"]
    if p.late_arrival is not None:
        parts.append(f"late_arrival={p.late_arrival:g}s")
    if p.early_arrival is not None:
        parts.append(f"early_arrival={p.early_arrival:g}s")
    parts.append(f"action={Action(p.action).value}")
    if p.over is not None:
        parts.append("substreams")
    if options.window is not None:
        w = options.window
        kind = f"tumbling {w.size:g}s" if w.hop == w.size else f"hopping {w.size:g}s/{w.hop:g}s"
        parts.append(kind + (f", lateness {w.allowed_lateness:g}s" if w.allowed_lateness else ""))
    return "headrace simulate: " + ", ".join(parts)
