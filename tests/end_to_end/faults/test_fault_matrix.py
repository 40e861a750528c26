"""The fault matrix: every hook a consumer writes × {raises, hangs past
``max_event_delivery_time``, returns what the runtime cannot use}, on memory and embedded
queues (Kafka for the constructor and ``on_window``). In each run the worker stays alive,
the other stream's output is what it is with nothing failing, the failed unit is
dead-lettered exactly once (with the reason the matrix names), and every published event is
accounted for once: counted into a window, delivered, or in one dead letter.

After its cases the module prints the matrix (hook × failure → what the user sees) on the
terminal."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_sink import Handoff
from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy, Tumbling
from tests.agents.delivery.conftest import drained
from tests.end_to_end.faults import matrix as m
from tests.end_to_end.faults.matrix import FAILURES, HOOKS
from tests.helpers import handoff_rows

# (hook, failure) -> the bad stream's dead letters by reason: the failed unit, once.
BATCH_LETTERS = {"delivery_failed": m.BATCH}
EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    # every batch of the bad stream waits for its activation: each is a unit, 4 × 5 events
    ("constructor", "raises"): {"activation_failed": m.EVENTS},
    ("constructor", "hangs"): {},
    ("constructor", "nonsense"): {"activation_failed": m.EVENTS},
    ("on_next", "raises"): BATCH_LETTERS,
    ("on_next", "hangs"): BATCH_LETTERS,
    ("on_next", "nonsense"): {},
    ("on_window", "raises"): {"window_failed": 1},
    ("on_window", "hangs"): {"window_failed": 1},
    ("on_window", "nonsense"): {},
    ("on_events", "raises"): BATCH_LETTERS,
    ("on_events", "hangs"): BATCH_LETTERS,
    ("on_events", "nonsense"): {},
    # the on_next failure on_error is told of: its batch, once, whatever on_error does
    ("on_error", "raises"): BATCH_LETTERS,
    ("on_error", "hangs"): BATCH_LETTERS,
    ("on_error", "nonsense"): BATCH_LETTERS,
    ("on_completed", "raises"): {},
    ("on_completed", "hangs"): {},
    ("on_completed", "nonsense"): {},
    ("on_watermark", "raises"): {},
    ("on_watermark", "hangs"): {},
    ("on_watermark", "nonsense"): {},
    ("timestamp_by", "raises"): {"invalid_timestamp": 1},
    ("timestamp_by", "hangs"): {},
    ("timestamp_by", "nonsense"): {"invalid_timestamp": 1},
    ("group_by", "raises"): {"invalid_value": 1},
    ("group_by", "hangs"): {},
    ("group_by", "nonsense"): {"invalid_value": 1},
    ("select", "raises"): {"invalid_value": 1},
    ("select", "hangs"): {},
    ("select", "nonsense"): {"invalid_value": 1},
    ("aggregate", "raises"): {"invalid_value": 1},
    ("aggregate", "hangs"): {},
    ("aggregate", "nonsense"): {"invalid_value": 1},
}
# (hook, failure) -> what the user sees, as observed by the runs (printed at the end)
SEEN: dict[tuple[str, str], dict[str, str]] = {}
_BASELINES: dict[tuple[str, str], dict[str, list[Any]]] = {}


def _provider(backend: str, path: Any) -> StreamProvider:
    if backend == "memory":
        return StreamProvider.memory(queues=2, **m.FAST)
    return StreamProvider.embedded(path, queues=2, **m.FAST)


async def baseline(
    backend: str, hook: str, provider: Callable[[], StreamProvider], caplog: Any
) -> dict[str, list[Any]]:
    """The good stream's output of a run where nothing fails (per backend and shape: the
    same events give the same output, so one run on a new ``provider()`` serves them all)."""
    shape = HOOKS[hook]
    if (backend, shape) not in _BASELINES:
        found = await m.run(provider(), None, "raises", caplog, shape=shape)
        assert not found.letters and found.counted == {"good": m.EVENTS, "bad": m.EVENTS}
        _BASELINES[backend, shape] = found.outputs
    return _BASELINES[backend, shape]


def _seen(found: m.Run, hook: str, failure: str) -> str:
    letters = ", ".join(f"{n} {reason}" for reason, n in sorted(found.letters.items())) or "no letter"
    if found.warnings:
        said = re.sub(r"(implicit:)?tests\.faults\.matrix\.consumer_type\.<locals>\.", "", found.warnings[0])
        said = re.sub(r"\(.*?\)$", "(…)", said)[:95]
        said = f'warning{" + traceback" if found.tracebacks else ""}: "{said}"'
    elif hook in m.SYNC and failure == "hangs":
        said = "no log line: sync code cannot be cut short; taken late, nothing lost"
    elif failure == "nonsense":
        said = "no log line: the returned value is not the runtime's to use; nothing lost"
    else:
        said = "no log line"
    return f"{letters}; {said}"


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("hook", list(HOOKS))
@pytest.mark.parametrize("backend", ["memory", "embedded"])
async def test_a_failing_hook_costs_its_unit_alone(backend, hook, failure, tmp_path, caplog):
    good_alone = await baseline(backend, hook, lambda: _provider(backend, tmp_path / "baseline"), caplog)
    caplog.clear()
    found = await m.run(_provider(backend, tmp_path / "run"), hook, failure, caplog)
    assert found.alive  # every agent still running, and a stream published after it consumed
    assert found.outputs["good"] == good_alone["good"]  # the other stream, unchanged
    assert found.other_letters == 0
    assert dict(found.letters) == EXPECTED[hook, failure]  # the failed unit, exactly once
    # published = kept + adjusted + dropped + dead-lettered, per stream
    assert found.counted == {"good": m.EVENTS, "bad": m.EVENTS}
    if found.letters and failure == "raises" and hook not in m.SYNC:
        assert found.tracebacks >= 1  # the consumer's traceback is in the log
    SEEN.setdefault((hook, failure), {})[backend] = _seen(found, hook, failure)


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_window_the_handoff_cannot_convert_costs_that_window_alone(failure, tmp_path, caplog):
    """Handoff column conversion is the runtime's code: it cannot hang, and what it cannot
    convert (a text for ``bigint``, "raises"; a fraction, "nonsense") is one letter."""
    provider = StreamProvider.embedded(tmp_path, queues=2, **m.FAST)
    poison = {"raises": "many", "hangs": None, "nonsense": 2.5}[failure]

    class Counting:  # (events, poisoned): the poisoned window's result is what the column cannot hold
        def init(self) -> tuple[int, bool]:
            return 0, False

        def add(self, acc: Any, value: Any) -> Any:
            return acc[0] + 1, acc[1] or m.is_poison(value)

        def merge(self, a: Any, b: Any) -> Any:
            return a[0] + b[0], a[1] or b[1]

        def result(self, acc: Any) -> Any:
            return poison if acc[1] and poison is not None else acc[0]

    @provider.implicit("ns")
    class Totals:
        event_time = EventTime(OrderingPolicy(timestamp_by="t"), Tumbling(10, origin=m.T0), Counting())
        handoff = Handoff("totals", {"total": "bigint"})

        def __init__(self, stream_id: StreamId) -> None:
            pass

    async with provider:
        for key in ("bad", "good"):
            stream = provider.get_stream(StreamId("ns", key))
            await stream.on_next_batch(m.events(key == "bad"))
            await stream.on_completed()
        await drained(provider, 30)
        letters = await provider.dead_letters.list()
        alive = all(m.provider_agent_running(a) for a in provider.agents)
    rows = [
        (r["stream_id"], r["window_start"].timestamp() - m.T0, r["total"])
        for q in (0, 1)
        for r in handoff_rows(tmp_path, "totals", q)
    ]
    assert alive
    assert sorted(r for r in rows if r[0] == "ns/good") == [("ns/good", 0.0, 10), ("ns/good", 10.0, 10)]
    expected = [] if poison is None else [("handoff_failed", "ns/bad", m.T0, poison)]
    assert [(x.reason, x.stream, x.value["start"], x.value["value"]) for x in letters] == expected
    handed = sorted(r for r in rows if r[0] == "ns/bad")
    assert handed == ([("ns/bad", 0.0, 10)] if poison is None else []) + [("ns/bad", 10.0, 10)]
    SEEN.setdefault(("handoff column", failure), {})["embedded"] = (
        "n/a: runtime code, no user code runs there; 2 windows handed off"
        if poison is None
        else f"1 handoff_failed (the window, {poison!r} for a bigint column); the other windows handed off"
    )


@pytest.fixture(scope="module", autouse=True)
def print_the_matrix(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the module's cases: hook × failure → what the user saw (dead letters; the first
    log line), on the terminal."""
    yield
    lines = ["", f"{'hook':<15} {'failure':<9} what the user sees (memory and embedded alike unless shown)"]
    for (hook, failure), by_backend in SEEN.items():
        views = Counter(by_backend.values())
        text = next(iter(views)) if len(views) == 1 else " | ".join(f"{b}: {v}" for b, v in by_backend.items())
        lines.append(f"{hook:<15} {failure:<9} {text}")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None and SEEN:
        with capture.global_and_fixture_disabled():  # teardown output is captured otherwise
            for line in lines:
                reporter.write_line(line)
