"""``headrace dlq``: list, show and replay dead letters kept in a real embedded store."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from streams.backends.embedded.deadletters import EmbeddedDeadLetterStore
from streams.backends.embedded.store import EmbeddedStore
from streams.core.deadletters import DeadLetter
from tests.streams.cli.helpers import headrace, one_error_line, published

LETTERS = [
    DeadLetter(
        "late_arrival",
        stream="sensors/s-1",
        queue=1,
        sequence_number=7,
        value={"temp": 21.5, "tags": ["[bold]a"]},
        event_time=1714565220.0,
        detail="2 h late",
    ),
    DeadLetter("undecodable", queue=1, sequence_number=8, payload=b"\x00junk"),
    DeadLetter("delivery_failed", stream="sensors/s-2", queue=0, sequence_number=3, value=42, event_time=1714565230.0),
    DeadLetter(
        "late_arrival", stream="sensors/s-1", queue=1, sequence_number=9, value={"temp": 22.0}, event_time=1714565240.0
    ),
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    async def seed() -> None:
        with EmbeddedStore(tmp_path / "store") as s:
            await EmbeddedDeadLetterStore(s).add(LETTERS)

    anyio.run(seed)
    return tmp_path / "store"


def replayed_ids(store: Path) -> list[int]:
    async def read() -> list[int]:
        with EmbeddedStore(store) as s:
            return [e.letter_id for e in await EmbeddedDeadLetterStore(s).entries(replayed=True)]

    return anyio.run(read)


def test_list_and_show(store):
    cwd = store.parent
    listed = headrace("dlq", "list", "--path", "store", "--limit", "3", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split(None, 2) for line in listed.stdout.splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [row[:2] for row in rows] == [["1", "late_arrival"], ["2", "undecodable"], ["3", "delivery_failed"]]
    assert '{"temp": 21.5, "tags": ["[bold]a"]}' in rows[0][2]  # values are shown as they are, not as markup
    assert "<5 raw bytes>" in rows[1][2]
    assert listed.stdout.splitlines()[-1] == "more after id 3: --after 3"

    as_json = headrace("dlq", "list", "--path", "store", "--reason", "late_arrival", "--json", cwd=cwd)
    assert [(o["id"], o["value"], o["event_time"]) for o in map(json.loads, as_json.stdout.splitlines())] == [
        (1, {"temp": 21.5, "tags": ["[bold]a"]}, 1714565220.0),
        (4, {"temp": 22.0}, 1714565240.0),
    ]

    shown = headrace("dlq", "show", "--path", "store", "2", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    assert "reason:     undecodable" in shown.stdout
    assert "5 bytes that never decoded (cannot be replayed)\n00 6a 75 6e 6b\n" in shown.stdout


def test_replay_publishes_values_with_their_event_times_and_marks_them(store):
    cwd = store.parent
    result = headrace("dlq", "replay", "--path", "store", "1", "3", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "headrace dlq: replayed 2 dead letters: 1 to sensors/s-1, 1 to sensors/s-2\n"
    assert sorted(published(store)) == [
        ("sensors/s-1", [{"temp": 21.5, "tags": ["[bold]a"]}], [1714565220.0]),
        ("sensors/s-2", [42], [1714565230.0]),
    ]
    assert replayed_ids(store) == [1, 3]

    # every late_arrival dead letter, again, to another stream, in id order
    result = headrace(
        "dlq", "replay", "--path", "store", "--reason", "late_arrival", "--again", "--to", "replays/x", cwd=cwd
    )
    assert result.stdout == "headrace dlq: replayed 2 dead letters: 2 to replays/x\n"
    assert [b for b in published(store) if b[0] == "replays/x"] == [
        ("replays/x", [{"temp": 21.5, "tags": ["[bold]a"]}, {"temp": 22.0}], [1714565220.0, 1714565240.0])
    ]
    assert replayed_ids(store) == [1, 3, 4]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["99"], "no dead letter with id 99 (`headrace dlq list` shows the ids)"),
        (
            ["4", "2"],
            "dead letter 2 (undecodable) is a raw record that never decoded: there is no value to publish, "
            "so it cannot be replayed (`headrace dlq show 2` prints its bytes); nothing was replayed",
        ),
        ([], "say what to replay: dead letter ids, or --reason R (not both)"),
    ],
)
def test_replay_mistakes_publish_nothing(store, args, error):
    result = headrace("dlq", "replay", "--path", "store", *args, cwd=store.parent)
    assert one_error_line(result, "dlq") == error
    assert published(store) == []
    assert replayed_ids(store) == []


def test_a_replayed_dead_letter_needs_again(store):
    assert headrace("dlq", "replay", "--path", "store", "4", cwd=store.parent).returncode == 0
    error = one_error_line(headrace("dlq", "replay", "--path", "store", "1", "4", cwd=store.parent), "dlq")
    assert error.startswith("dead letter 4 was replayed already, at ") and error.endswith(
        "add --again to replay it once more; nothing was replayed"
    )
    assert [values for _, values, _ in published(store)] == [[{"temp": 22.0}]]


def test_show_an_unknown_id_and_a_missing_store(tmp_path, store):
    assert (
        one_error_line(headrace("dlq", "show", "--path", "store", "12", cwd=store.parent), "dlq")
        == "no dead letter with id 12 (`headrace dlq list` shows the ids)"
    )
    assert one_error_line(headrace("dlq", "list", "--path", "elsewhere", cwd=store.parent), "dlq").startswith(
        f"no headrace store at '{store.parent / 'elsewhere'}'"
    )


def test_a_dead_letter_recorded_again_by_a_replayed_range_is_replayed_once(tmp_path):
    async def seed() -> None:
        with EmbeddedStore(tmp_path / "store") as s:
            letters = EmbeddedDeadLetterStore(s)
            for _ in range(2):  # a worker read the range twice (restarted while a window held it)
                await letters.add(
                    [
                        DeadLetter(
                            "window_closed",
                            stream="sensors/s-1",
                            queue=1,
                            sequence_number=7,
                            event_index=2,
                            value={"temp": 20.0},
                            event_time=1714565220.0,
                        )
                    ]
                )

    anyio.run(seed)
    result = headrace("dlq", "replay", "--path", "store", "--reason", "window_closed", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert published(tmp_path / "store") == [("sensors/s-1", [{"temp": 20.0}], [1714565220.0])]


@pytest.mark.parametrize("action", ["list", "replay"])
def test_an_unknown_reason_is_refused_naming_the_known_ones(store, action):
    from streams.runtime.snapshot import DEAD_LETTER_REASONS

    result = headrace("dlq", action, "--path", "store", "--reason", "nosuchreason", cwd=store.parent)
    error = one_error_line(result, "dlq")
    assert error == f"unknown dead letter reason 'nosuchreason': the reasons are {', '.join(DEAD_LETTER_REASONS)}"
    for reason in (
        "late_arrival",
        "window_closed",
        "invalid_timestamp",
        "invalid_value",
        "delivery_failed",
        "undecodable",
        "handoff_failed",
    ):
        assert reason in error.split(": the reasons are ")[1].split(", ")
    assert published(store) == []
    assert replayed_ids(store) == []


def test_a_known_reason_with_none_and_an_adapters_own_reason_are_accepted(store):
    async def add_own() -> None:
        with EmbeddedStore(store) as s:
            await EmbeddedDeadLetterStore(s).add([DeadLetter("schema_mismatch", stream="sensors/s-9", value=1)])

    anyio.run(add_own)
    none = headrace("dlq", "list", "--path", "store", "--reason", "window_closed", cwd=store.parent)
    assert (none.returncode, none.stdout) == (0, "no dead letters with reason 'window_closed'\n")
    own = headrace("dlq", "list", "--path", "store", "--reason", "schema_mismatch", "--json", cwd=store.parent)
    assert own.returncode == 0, own.stderr
    assert [json.loads(line)["stream"] for line in own.stdout.splitlines()] == ["sensors/s-9"]
