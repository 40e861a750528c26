"""The picture ``headrace simulate --plot`` draws, after the ASA documentation's figures:
event time against arrival time, each watermark as a step line, adjusted events with an
arrow from their original time, dropped and dead-lettered events marked, windows as bands.

Made to be read at a glance: times as ``HH:MM:SS`` (the date, once, in the axis label) or
plain seconds, never matplotlib's offset notation; window labels (events in the window)
only where they overlap neither another label nor a point; the legend outside the data,
with every colour used; and with ``--sweep``, one small panel per swept setting, sharing
their axes so that they compare directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import cycle
from typing import Any

import numpy as np
from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.patches import Patch
from matplotlib.ticker import ScalarFormatter
from matplotlib.transforms import Bbox

from streams.eventtime.policy import Action
from streams.eventtime.replay import ReplayOptions, Row
from streams.eventtime.results import (
    ADJUSTED,
    DEAD_LETTER,
    DROPPED,
    EventOutcome,
    TraceItem,
    WatermarkAdvance,
    WindowResult,
)
from streams.eventtime.windows import Session, Sliding

_LANE_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
WINDOW_SHADES = ("#fdd9a0", "#c7e0f4")  # alternate, so that neighbouring windows stay apart
WINDOW_LABEL_GID = "window-label"  # how tests (and anyone) find the window labels
_MAX_TICK_LINES = 200
_POINT_PX = 5  # half a marker's size on screen, for keeping labels off the points
_MAX_COLUMNS = 3


@dataclass(frozen=True, slots=True)
class Panel:
    """One replay to draw: its trace under ``options``, headed by ``title``."""

    title: str
    trace: Sequence[TraceItem]
    options: ReplayOptions


def draw(path: str, rows: Sequence[Row], panels: Sequence[Panel], form: Any, swept: str | None = None) -> None:
    """Write the PNG of ``panels`` (one replay, or one per value of the ``swept`` setting)
    to ``path``. ``form`` maps times for the axes (a :class:`streams.cli.simulate.TimeForm`)."""
    figure(rows, panels, form, swept).savefig(path, format="png")


def figure(rows: Sequence[Row], panels: Sequence[Panel], form: Any, swept: str | None = None) -> Figure:
    """The figure :func:`draw` saves, its labels placed; ``swept`` names the setting the
    panels vary (left out of the common title)."""
    iso = bool(form.iso)
    x: Callable[[float], Any] = form.to_datetime if iso else (lambda t: t)
    small = len(panels) > 1
    columns = grid_columns(len(panels))
    lines = math.ceil(len(panels) / columns)
    size = (11, 7.5) if not small else (4.3 * columns + 0.8, 3.6 * lines + 2.0)
    fig = Figure(figsize=size, dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(lines, columns, sharex=True, sharey=True, squeeze=False)
    axes = list(grid.flat)
    for spare in axes[len(panels) :]:
        spare.remove()
    bounds = _bounds(rows)
    date = f", {form.to_datetime(bounds[0]):%Y-%m-%d} UTC" if iso else ", s"
    for n, (ax, panel) in enumerate(zip(axes, panels)):
        _panel(ax, rows, panel, x, bounds, small)
        _time_axes(ax, iso)
        if n + columns >= len(panels):  # no panel below: this one shows the times
            ax.tick_params(axis="x", labelbottom=True)
            ax.set_xlabel(f"arrival time (processing clock{date})", fontsize=9)
        if n % columns == 0:
            ax.set_ylabel(f"event time{'' if iso else ' (s)'}", fontsize=9)
    fig.suptitle(_title(panels[0].options, leave_out=swept), fontsize=11)
    _legend(fig, axes[: len(panels)], any(isinstance(i, WindowResult) for p in panels for i in p.trace))
    fig.canvas.draw()  # the layout is final now: labels are placed in screen space
    for ax, panel in zip(axes, panels):
        _window_labels(ax, rows, panel.trace, x, bounds[1], small)
    return fig


def grid_columns(panels: int) -> int:
    """Columns for ``panels`` panels: at most three, in the fewest rows, then with the fewest
    empty cells: four panels make a 2 x 2 grid, not three and one.

    >>> [grid_columns(n) for n in range(1, 8)]
    [1, 2, 3, 2, 3, 3, 3]
    """
    choices = range(1, min(panels, _MAX_COLUMNS) + 1)
    return min(choices, key=lambda c: (math.ceil(panels / c), math.ceil(panels / c) * c - panels))


def _bounds(rows: Sequence[Row]) -> tuple[float, float]:
    arrivals = [row.arrival_time for row in rows] or [0.0]
    left, right = min(arrivals), max(arrivals)
    pad = (right - left) * 0.03 or 1.0
    return left - pad, right + pad


def _panel(
    ax: Axes, rows: Sequence[Row], panel: Panel, x: Callable[[float], Any], bounds: tuple[float, float], small: bool
) -> None:
    left, right = bounds
    trace = panel.trace
    _windows(ax, [i for i in trace if isinstance(i, WindowResult)], rows, x, right)
    times = [r.event_time for r in rows if r.event_time is not None] + [r.arrival_time for r in rows] or [0.0]
    low, high = min(times), max(times)
    ax.plot([x(low), x(high)], [x(low), x(high)], color="0.6", lw=0.8, ls="--", label="event time = arrival time")
    _watermarks(ax, [i for i in trace if isinstance(i, WatermarkAdvance)], x, right)
    _events(ax, [i for i in trace if isinstance(i, EventOutcome)], x, small)
    for row in [r for r in rows if r.event_time is None][:_MAX_TICK_LINES]:
        ax.axvline(x(row.arrival_time), color="0.85", lw=0.6, zorder=0)
    ax.set_xlim(x(left), x(right))
    ax.grid(True, color="0.92")
    if small:
        ax.set_title(panel.title, fontsize=8)


def _time_axes(ax: Axes, iso: bool) -> None:
    """``HH:MM:SS`` for clock times, plain numbers for seconds: no offset or date above the
    axis (the date is in the axis label)."""
    for axis in (ax.xaxis, ax.yaxis):
        if iso:
            axis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=7))
            axis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        else:
            plain = ScalarFormatter(useOffset=False)
            plain.set_scientific(False)
            axis.set_major_formatter(plain)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.tick_params(axis="y", labelsize=8)


def _windows(
    ax: Axes, windows: list[WindowResult], rows: Sequence[Row], x: Callable[[float], Any], right: float
) -> None:
    # One band per window span (per-key results of the same window share it).
    for n, ((low, high), start, stop, _) in enumerate(_spans(windows, rows, right)):
        ax.fill_between([x(start), x(stop)], x(low), x(high), color=WINDOW_SHADES[n % 2], alpha=0.45, lw=0, zorder=0)
    _key_outlines(ax, windows, rows, x, right)


KEY_OUTLINE_GID = "key-window"  # how tests find the per-key outlines
_MAX_KEYS_NAMED = 6  # keys named in the legend; the others share one entry


def _key_outlines(
    ax: Axes, windows: list[WindowResult], rows: Sequence[Row], x: Callable[[float], Any], right: float
) -> None:
    """With windows per key (``--group-by-key``), each key's window is outlined in the key's
    colour, from its own first event's arrival to its own close, nested a little inside the
    previous key's: the keys that share a band stay apart."""
    keys = list(dict.fromkeys(w.key for w in windows if w.key is not None))
    colours = dict(zip(keys, cycle(_LANE_COLOURS)))
    for window in windows:
        if window.key is None:
            continue
        members = [rows[i].arrival_time for i in window.value]
        start = min(members) if members else window.start
        stop = window.closed_at if window.closed_at is not None else right
        n = keys.index(window.key)
        label = f"window of key {window.key}" if n < _MAX_KEYS_NAMED else "window of another key"
        inset = (window.end - window.start) * 0.03 * (n % 8)  # nested: the keys' outlines stay apart
        low, high = window.start + inset, window.end - inset
        (outline,) = ax.plot(
            [x(start), x(stop), x(stop), x(start), x(start)],
            [x(low), x(low), x(high), x(high), x(low)],
            color=colours[window.key],
            lw=1.0,
            ls=(0, (4, 2)),
            label=label,
            zorder=1,
        )
        outline.set_gid(KEY_OUTLINE_GID)


def _spans(
    windows: list[WindowResult], rows: Sequence[Row], right: float
) -> list[tuple[tuple[float, float], float, float, int]]:
    """Per window span: its bounds, the arrival of its first event, when it closed, and how
    many events it holds (over every key)."""
    spans: dict[tuple[float, float], list[WindowResult]] = {}
    for window in windows:
        spans.setdefault((window.start, window.end), []).append(window)
    result = []
    for (low, high), results in spans.items():
        members = [rows[i].arrival_time for w in results for i in w.value]
        closes = [w.closed_at if w.closed_at is not None else right for w in results]
        result.append(((low, high), min(members) if members else low, max(closes), sum(len(w.value) for w in results)))
    return result


def _watermarks(ax: Axes, advances: list[WatermarkAdvance], x: Callable[[float], Any], right: float) -> None:
    lanes: dict[Hashable, list[tuple[float, float]]] = {}
    for step in advances:
        if step.arrival_time is not None and math.isfinite(step.watermark) and step.partition is not None:
            lanes.setdefault(step.substream, []).append((step.arrival_time, step.watermark))
    for (lane, points), colour in zip(lanes.items(), cycle(_LANE_COLOURS)):
        points.append((right, points[-1][1]))  # hold the last value to the right edge
        ax.step(
            [x(a) for a, _ in points],
            [x(w) for _, w in points],
            where="post",
            color=colour,
            lw=1.4,
            label="watermark" if lane is None else f"watermark {lane}",
        )


def _events(ax: Axes, events: list[EventOutcome], x: Callable[[float], Any], small: bool) -> None:
    size = 12 if small else 20

    def scatter(items: list[EventOutcome], at: Callable[[EventOutcome], float], **style: Any) -> None:
        if items:
            ax.scatter([x(e.record.arrival_time) for e in items], [x(at(e)) for e in items], zorder=3, **style)

    kept = [e for e in events if e.status not in (ADJUSTED, DROPPED, DEAD_LETTER)]
    adjusted = [e for e in events if e.status == ADJUSTED]
    dropped = [e for e in events if e.status == DROPPED]
    dead = [e for e in events if e.status == DEAD_LETTER]
    scatter(kept, _timestamp, s=size, color="#1f77b4", label="kept")
    scatter(adjusted, _timestamp, s=size, color="#ff7f0e", label="adjusted (arrow from its event time, ○)")
    scatter(adjusted, _event_time, s=size, facecolors="none", edgecolors="#ff7f0e", lw=0.8)
    for e in adjusted:
        ax.annotate(
            "",
            xy=(x(e.record.arrival_time), x(_timestamp(e))),
            xytext=(x(e.record.arrival_time), x(_event_time(e))),
            arrowprops={"arrowstyle": "->", "color": "#ff7f0e", "lw": 0.8},
            zorder=3,
        )
    scatter(dropped, _event_time, s=size * 1.6, marker="x", color="#d62728", label="dropped")
    scatter(dead, _timestamp, s=size * 1.4, marker="s", color="#7f3c8d", label="dead-lettered (window closed)")


def _legend(fig: Figure, axes: Sequence[Axes], windows: bool) -> None:
    """One legend for every panel, outside the data: each label once, and the windows'
    alternating shades together in one entry."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if windows:
        shades = tuple(Patch(facecolor=shade, alpha=0.45) for shade in WINDOW_SHADES)
        handles = {"window, first event's arrival → close (shades alternate)": shades, **handles}
        handles["n: events in the window (where the label fits)"] = Patch(visible=False)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncols=3,
        fontsize=8,
        frameon=False,
        handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
    )


def _window_labels(
    ax: Axes, rows: Sequence[Row], trace: Sequence[TraceItem], x: Callable[[float], Any], right: float, small: bool
) -> None:
    """Each window's event count just above its top left corner (else its top right one,
    else inside), kept only where it overlaps no other label and no point, and stays in the
    panel. Events arrive after their event time, so above a band's left end is mostly empty."""
    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    frame = ax.get_window_extent(renderer)
    taken = [_point_box(ax, px, py) for px, py in _points(ax)]
    placed: list[Bbox] = []
    windows = [i for i in trace if isinstance(i, WindowResult)]
    for (_low, high), start, stop, count in _spans(windows, rows, right):
        for at, ha, va, dy in ((start, "left", "bottom", 1), (stop, "right", "bottom", 1), (start, "left", "top", -1)):
            text = ax.annotate(
                str(count),
                (x(at), x(high)),
                xytext=(0, 2 * dy),
                textcoords="offset points",
                fontsize=6 if small else 7,
                color="0.25",
                ha=ha,
                va=va,
                gid=WINDOW_LABEL_GID,
                zorder=4,
            )
            text.set_in_layout(False)
            box = text.get_window_extent(renderer)
            if (
                frame.contains(box.x0, box.y0)
                and frame.contains(box.x1, box.y1)
                and not any(box.overlaps(other) for other in (*placed, *taken))
            ):
                placed.append(box)
                break
            text.remove()


def _points(ax: Axes) -> list[tuple[float, float]]:
    """Every scatter point of ``ax``, in screen coordinates."""
    found: list[Any] = []
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets())
        if len(offsets) and collection.get_zorder() >= 3:
            found.extend(ax.transData.transform(offsets))
    return [(float(px), float(py)) for px, py in found]


def _point_box(ax: Axes, px: float, py: float) -> Bbox:
    return Bbox.from_extents(px - _POINT_PX, py - _POINT_PX, px + _POINT_PX, py + _POINT_PX)


def _timestamp(e: EventOutcome) -> float:
    assert e.timestamp is not None  # only a dropped event has none
    return e.timestamp


def _event_time(e: EventOutcome) -> float:
    assert e.event_time is not None  # a replayed event always has one (no timestamp_by)
    return e.event_time


def _title(options: ReplayOptions, *, leave_out: str | None = None) -> str:
    p = options.policy
    parts = [] if leave_out == "out_of_order" else [f"out_of_order={p.out_of_order:g}s"]
    if p.late_arrival is not None and leave_out != "late_arrival":
        parts.append(f"late_arrival={p.late_arrival:g}s")
    if p.early_arrival is not None and leave_out != "early_arrival":
        parts.append(f"early_arrival={p.early_arrival:g}s")
    parts.append(f"action={Action(p.action).value}")
    if p.over is not None:
        parts.append("substreams")
    if options.window is not None:
        w = options.window
        if isinstance(w, Session):
            kind = f"session {w.gap:g}s"
        elif isinstance(w, Sliding):
            kind = f"sliding {w.span:g}s"
        elif w.events is not None:
            kind = f"tumbling {w.events} events" if w.every == w.events else f"hopping {w.events}/{w.every} events"
        else:
            kind = f"tumbling {w.size:g}s" if w.hop == w.size else f"hopping {w.size:g}s/{w.hop:g}s"
        lateness = w.allowed_lateness and leave_out != "allowed_lateness"
        parts.append(kind + (f", lateness {w.allowed_lateness:g}s" if lateness else ""))
    if leave_out is not None:
        parts.append(f"one panel per {leave_out}")
    return "headrace simulate: " + ", ".join(parts)
