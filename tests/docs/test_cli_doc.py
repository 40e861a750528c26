"""docs/cli.md names what the CLI has: a row of its command table per subcommand, and every
dead letter reason the runtime gives in its ``--reason`` list and its example error."""

from __future__ import annotations

import re
from pathlib import Path

from streams.cli import SUBCOMMANDS
from streams.runtime.snapshot import DEAD_LETTER_REASONS

CLI_MD = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_the_command_table_has_a_row_per_subcommand() -> None:
    rows = re.findall(r"^\| `headrace (\w+)`", CLI_MD, re.MULTILINE)
    assert sorted(rows) == sorted(SUBCOMMANDS), rows


def test_the_reason_list_and_its_error_example_name_every_reason() -> None:
    listed = re.search(r"`--reason` takes one of the reasons the runtime gives \(([^)]*)\)", CLI_MD)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == list(DEAD_LETTER_REASONS)
    example = re.search(r"unknown dead letter reason 'late_arival': the reasons are (.*)", CLI_MD)
    assert example is not None and example.group(1).split(", ") == list(DEAD_LETTER_REASONS)
