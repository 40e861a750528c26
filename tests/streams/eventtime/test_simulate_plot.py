"""``headrace simulate --plot``, read at a glance: HH:MM:SS (or plain seconds) on the axes and
no offset text, window labels that overlap neither each other nor a point, every window
colour in the legend, and with ``--sweep`` one panel per swept value. The PNG itself is
looked at by a person; here what the figure holds is checked."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from itertools import combinations
from pathlib import Path

import pytest
from matplotlib import dates as mdates
from matplotlib.ticker import ScalarFormatter

from streams.cli.simulate import TimeForm, _options, parse_sweep, plot_panels, read_rows
from streams.cli.simulate_plot import KEY_OUTLINE_GID, WINDOW_LABEL_GID, WINDOW_SHADES, _point_box, _points, figure
from streams.eventtime.replay import replay

DATA = Path(__file__).parent / "data"


def sample(path: Path, iso: bool = True, n: int = 300) -> Path:
    """``n`` events from four keys, a second or so apart, most a little late, some very."""
    rng = random.Random(3)
    t0 = datetime(2024, 5, 1, 12, tzinfo=UTC)
    text = lambda s: (t0 + timedelta(seconds=s)).isoformat().replace("+00:00", "Z") if iso else f"{1714564800 + s:.3f}"  # noqa: E731
    lines, arrival = ["arrival_time,event_time,key"], 0.0
    for _ in range(n):
        arrival += rng.expovariate(1.0)
        delay = rng.choice([0.2, 0.5, 1, 2, 3, 8, 15]) if rng.random() < 0.9 else rng.uniform(20, 40)
        lines.append(f"{text(arrival)},{text(arrival - delay)},{rng.choice(['north', 'south', 'east', 'west'])}")
    path.write_text("\n".join(lines) + "\n")
    return path


def build(csv: Path, *cli: str, sweep: str | None = None):  # type: ignore[no-untyped-def]
    import argparse

    from streams.cli import build_parser

    args: argparse.Namespace = build_parser().parse_args(["simulate", *cli, str(csv)])
    options, form = _options(args), TimeForm()
    rows = read_rows(str(csv), form)
    swept = parse_sweep(sweep) if sweep else None
    panels = plot_panels(rows, options, replay(rows, options), swept)
    return figure(rows, panels, form, swept[0] if swept else None)


HOPPING = ("--window", "hopping:20s:5s", "--group-by-key", "--out-of-order", "5s")


def test_one_panel_per_swept_value_sharing_their_axes(tmp_path):
    fig = build(sample(tmp_path / "s.csv"), *HOPPING, sweep="out_of_order=0s,2s,5s,30s")
    axes = fig.get_axes()
    assert [ax.get_title().split("\n")[0].split(": ")[0] for ax in axes] == [
        "out_of_order=0s",
        "out_of_order=2s",
        "out_of_order=5s",
        "out_of_order=30s",
    ]
    # each title shows the mean delay the sweep is there to show, and four panels make 2 x 2
    assert all(re.fullmatch(r"mean delay \d+\.\d s", ax.get_title().split("\n")[0].split(": ")[1]) for ax in axes)
    assert len({round(ax.get_position().x0, 3) for ax in axes}) == 2
    assert len({round(ax.get_position().y0, 3) for ax in axes}) == 2
    assert all(ax.get_shared_x_axes().joined(axes[0], ax) for ax in axes)
    # the panels differ as the table does: fewer adjusted events as the tolerance grows
    adjusted = [int(ax.get_title().split("\n")[1].split()[0]) for ax in axes]
    assert adjusted == sorted(adjusted, reverse=True) and adjusted[0] > adjusted[-1]
    renderer = fig.canvas.get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in axes]
    assert not any(a.overlaps(b) for a, b in combinations(titles, 2))


def test_clock_times_read_hh_mm_ss_with_no_offset_text(tmp_path):
    fig = build(sample(tmp_path / "s.csv"), *HOPPING)
    [ax] = fig.get_axes()
    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        assert isinstance(formatter, mdates.DateFormatter) and formatter.fmt == "%H:%M:%S"
        labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
        assert len(labels) >= 3 and all(re.fullmatch(r"\d\d:\d\d:\d\d", label) for label in labels), labels
        assert axis.get_offset_text().get_text() == ""
    assert ax.get_xlabel() == "arrival time (processing clock, 2024-05-01 UTC)"


def test_seconds_read_as_plain_numbers(tmp_path):
    fig = build(sample(tmp_path / "s.csv", iso=False, n=60), "--window", "tumbling:10s")
    [ax] = fig.get_axes()
    for axis in (ax.xaxis, ax.yaxis):
        assert isinstance(axis.get_major_formatter(), ScalarFormatter)
        assert axis.get_offset_text().get_text() == ""  # not "+1.7145648e9"
        assert all(re.fullmatch(r"17145\d{5}", t.get_text()) for t in axis.get_ticklabels() if t.get_text())


def test_window_labels_overlap_no_label_and_no_point(tmp_path):
    fig = build(sample(tmp_path / "s.csv"), *HOPPING, sweep="out_of_order=0s,30s")
    renderer = fig.canvas.get_renderer()
    for ax in fig.get_axes():
        labels = [t.get_window_extent(renderer) for t in ax.texts if t.get_gid() == WINDOW_LABEL_GID]
        assert len(labels) >= 20  # most windows keep their label
        assert not any(a.overlaps(b) for a, b in combinations(labels, 2))
        points = [_point_box(ax, px, py) for px, py in _points(ax)]
        assert len(points) >= 300
        assert not any(label.overlaps(point) for label in labels for point in points)
        frame = ax.get_window_extent(renderer)
        assert all(frame.contains(b.x0, b.y0) and frame.contains(b.x1, b.y1) for b in labels)


def test_the_legend_has_every_window_colour_and_every_mark(tmp_path):
    fig = build(
        DATA / "asa_watermarks.csv",
        "--early-arrival",
        "5m",
        "--late-arrival",
        "5m",
        "--out-of-order",
        "2m",
        "--window",
        "tumbling:5m",
        "--group-by-key",
        "--flush",
    )
    [legend] = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[0] == "window, first event's arrival → close (shades alternate)"
    for wanted in ("kept", "dropped", "watermark", "event time = arrival time"):
        assert wanted in labels
    assert any(label.startswith("adjusted") for label in labels)
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    in_legend = {to_hex(r.get_facecolor(), keep_alpha=False) for r in legend.findobj(Rectangle) if r.get_visible()}
    assert set(WINDOW_SHADES) <= in_legend
    # the windows drawn use exactly those shades, both of them
    [ax] = fig.get_axes()
    drawn = {to_hex(c.get_facecolor()[0], keep_alpha=False) for c in ax.collections if c.get_zorder() == 0}
    assert drawn == set(WINDOW_SHADES)


@pytest.mark.parametrize("sweep", [None, "out_of_order=0s,30s"])
def test_the_command_writes_the_png(tmp_path, sweep):
    import subprocess
    import sys

    png = tmp_path / "out.png"
    args = [sys.executable, "-m", "streams.cli", "simulate", *HOPPING, "--plot", str(png)]
    result = subprocess.run(
        [*args, *(["--sweep", sweep] if sweep else []), str(sample(tmp_path / "s.csv"))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_group_by_key_outlines_each_key_s_windows_in_its_colour(tmp_path):
    fig = build(sample(tmp_path / "s.csv"), *HOPPING)
    [ax] = fig.get_axes()
    outlines = [line for line in ax.get_lines() if line.get_gid() == KEY_OUTLINE_GID]
    keys = {line.get_label() for line in outlines}
    assert len(keys) >= 2 and all(k.startswith("window of key ") for k in keys)
    by_key = {}
    for line in outlines:
        by_key.setdefault(line.get_label(), set()).add(line.get_color())
    assert all(len(colours) == 1 for colours in by_key.values())  # one colour per key
    assert len({next(iter(c)) for c in by_key.values()}) == len(by_key)  # and different keys differ
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert all(k in legend for k in keys)
