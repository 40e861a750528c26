"""docs/benchmarks.md and the README quote the runs under bench/results/, not pasted figures.

Each script's section on the page has a table of current figures with a column per run of that
script in ``bench/results`` (oldest first): every cell is that run's figure to the cell's
precision, or "—" where the run has no such figure. The README's table gives a figure's range
over a script's runs and the command that reproduces it."""

from __future__ import annotations

import json
import re

import pytest

from tests.docs.bench_figures import MISSING, RESULTS, ROOT, matches, parse, runs_by_script

PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"


def page_tables() -> dict[str, list[list[str]]]:
    """The current-figures table of each script's section, as rows of cells (header first)."""
    tables: dict[str, list[list[str]]] = {}
    for section in re.split(r"^## ", PAGE.read_text(), flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        script = re.findall(r"`(\w+\.py)`", heading)
        lines = [line for line in body.split("\n") if line.startswith("|")]
        if not script or not lines:
            continue
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if not line.startswith("|---")]
        tables[script[-1]] = rows
    return tables


def test_every_run_file_says_where_it_ran_and_what_it_measured() -> None:
    files = sorted(RESULTS.glob("*.json"))
    assert len(files) >= 20
    for path in files:
        run = json.loads(path.read_text())
        assert run["source"] in ("measured", "transcribed"), path.name
        assert (ROOT / "bench" / run["script"]).is_file(), path.name
        assert run["figures"] and all(isinstance(v, int | float) for v in run["figures"].values()), path.name
        for key in ("command", "date", "commit", "machine", "load", "python", "packages", "params"):
            assert key in run, f"{path.name} lacks {key}"
        if run["source"] == "measured":  # what save_run writes
            assert run["python"] and run["packages"] and run["commit"], path.name


def test_every_script_with_runs_has_a_table_of_them_and_every_table_has_runs() -> None:
    runs, tables = runs_by_script(), page_tables()
    assert sorted(runs) == sorted(tables)


@pytest.mark.parametrize("script", sorted(runs_by_script()))
def test_the_page_quotes_each_run_of_the_script(script: str) -> None:
    runs = runs_by_script()[script]
    header, *rows = page_tables()[script]
    assert len(header) == 1 + len(runs), f"{script}: {len(header) - 1} columns for {len(runs)} runs"
    assert rows, f"{script}: a table with no figures"
    wrong = []
    for name, *cells in rows:
        assert any(name in run["figures"] for run in runs), f"{script}: no run has the figure {name!r}"
        for run, text in zip(runs, cells, strict=True):
            value = run["figures"].get(name)
            if (value is None) != (text == MISSING) or (value is not None and not matches(text, value)):
                wrong.append(f"{name!r} in {run['file']}: the page says {text}, the run {value}")
    assert wrong == []


def readme_figures() -> list[tuple[str, str, str, str]]:
    """The README's figures table: (script, figure, value, runs), from its rows
    ``| `python bench/SCRIPT ...` | figure | value (N runs) |``."""
    section = README.read_text().split("\n## Benchmarks", 1)[1].split("\n## ", 1)[0]
    found = re.findall(
        r"^\| `python (?:-m )?bench[/.](\w+)(?:\.py)?[^`]*` \| ([^|]+?) \| ([^|(]+?) \((\d+) runs?\) \|$", section, re.M
    )
    return [(f"{script}.py", name, value, n) for script, name, value, n in found]


def test_the_readme_table_gives_each_figure_over_its_runs() -> None:
    rows = readme_figures()
    assert len(rows) >= 10
    all_runs = runs_by_script()
    wrong = []
    for script, name, value, n in rows:
        runs = all_runs.get(script, [])
        values = [run["figures"][name] for run in runs if name in run["figures"]]
        assert values, f"no run of {script} has {name!r}"
        low, _, high = value.partition("–")
        if int(n) != len(values) or not matches(low, min(values)) or not matches(high or low, max(values)):
            wrong.append(f"{script} {name!r}: the README says {value} ({n} runs), the runs {sorted(values)}")
    assert wrong == []


def test_a_cell_is_read_to_its_precision() -> None:
    # What the checks above rest on: a figure quoted to two decimals matches within half a unit.
    assert parse("2,371,663") == (2371663.0, 0) and parse("0.54x") == (0.54, 2)
    assert matches("0.35x", 0.354) and not matches("0.35x", 0.356) and not matches("1,000", 1002)
    with pytest.raises(ValueError):
        parse("fast")
