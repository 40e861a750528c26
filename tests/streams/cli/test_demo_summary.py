"""The demo's printed summary and window lines: a row for the status line's "late" count,
and nouns that agree with their numbers ("1 booth", "2 booths")."""

from __future__ import annotations

import io

from rich.console import Console

from streams.cli.demo.report import Ledger
from streams.cli.demo.windows import BatchPrinter, WindowRow


def ledger(**changes: object) -> Ledger:
    fields: dict[str, object] = dict(
        published=100,
        corrupt=2,
        processed=100,
        in_windows=97,
        adjusted=9,
        dead_letters={"early_arrival": 2, "invalid_timestamp": 1, "undecodable": 2},
        windows_handed_off=12,
        windows_received=12,
        late={"adjusted": 4, "dropped": 0, "accepted": 0},
    )
    fields.update(changes)
    return Ledger(**fields)  # type: ignore[arg-type]


def test_the_summary_has_a_late_row_with_its_actions():
    lines = ledger().lines("Spark")
    assert (
        "  late                   4  more than late_arrival behind, in the rows above: 4 adjusted, 0 dropped, 0 accepted"
        in lines
    )
    assert [line.split()[0] for line in lines[:7]] == [
        "published",
        "kept",
        "adjusted",
        "dropped",
        "dead-lettered",
        "late",
        "windows",
    ]


def test_the_summary_counts_in_the_singular_when_one():
    lines = ledger(
        published=1,
        corrupt=1,
        processed=1,
        in_windows=1,
        adjusted=0,
        windows_handed_off=1,
        windows_received=1,
        dead_letters={"undecodable": 1},
    ).lines("Spark")
    assert lines[0].endswith("(1 toll report, 1 corrupt record)")
    assert lines[6].endswith("handed off; Spark received 1 holding 1 event")
    assert ledger().lines("Spark")[0].endswith("(100 toll reports, 2 corrupt records)")


def test_a_window_line_says_1_booth_and_1_car():
    out = io.StringIO()
    printer = BatchPrinter(Console(file=out, width=200), "spark")
    printer.print_batch(0, [WindowRow(0.0, 10.0, "06-1", 1, 2.10)])
    printer.print_batch(1, [WindowRow(10.0, 20.0, "06-1", 3, 6.0), WindowRow(10.0, 20.0, "07-2", 2, 4.0)])
    first, second = out.getvalue().splitlines()
    assert "   1 booth,      1 car, €" in first
    assert "  2 booths,     5 cars, €" in second
