"""``headrace dlq replay`` of a ``window_failed`` letter, through a real worker on the
embedded store: the window is delivered to its consumer type once (``--app``), no event is
counted twice, and a second replay is refused."""

from __future__ import annotations

import json
import signal
import time

from tests.streams.cli.helpers import clean_env, headrace, one_error_line, start_worker

CONFIG = """
[provider]
path = "store"
queues = 1

[agent]
max_event_delivery_time = "300ms"
delivery_retry_backoff = "20ms"
"""
APP = "tests.streams.cli.window_app:provider"
T0 = 1_700_000_000.0  # the application's origin


def test_a_failed_window_is_dead_lettered_alone_and_replayed_once(tmp_path):
    (tmp_path / "headrace.toml").write_text(CONFIG)
    out, broken = tmp_path / "windows.txt", tmp_path / "broken"
    out.touch()
    broken.touch()
    env = clean_env(WINDOWS_OUT=str(out), WINDOWS_BROKEN=str(broken))
    # [0, 10): 10 events, [10, 20): 10, [20, 30): 5; the event at 40 closes them all
    lines = "".join(json.dumps({"n": n, "t": T0 + t}) + "\n" for n, t in enumerate([*range(25), 40]))
    produced = headrace("produce", "--stream", "rooms/r1", "--event-time", "t", cwd=tmp_path, stdin=lines)
    assert produced.returncode == 0, produced.stderr

    worker = start_worker(tmp_path, "--app", APP, "--name", "w1", env=env)
    try:
        deadline = time.monotonic() + 20
        while "window_failed" not in headrace("dlq", "list", cwd=tmp_path).stdout and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    assert out.read_text() == "0 10\n20 5\n"  # the windows around it were emitted
    listed = headrace("dlq", "list", "--json", cwd=tmp_path)
    [letter] = [json.loads(line) for line in listed.stdout.splitlines()]  # no event is a letter
    assert (letter["reason"], letter["stream"], letter["value"]["value"], letter["value"]["start"]) == (
        "window_failed",
        "rooms/r1",
        10,
        T0 + 10,
    )
    assert "ConnectionError: the report database is down" in letter["detail"]
    log = (tmp_path / "worker.log").read_text()
    assert log.count("ConnectionError: the report database is down") == 1  # the first failure's traceback, once

    broken.unlink()  # the database is back
    error = one_error_line(headrace("dlq", "replay", str(letter["id"]), cwd=tmp_path, env=env), "dlq")
    assert error.startswith("replaying a window_failed dead letter delivers the window to its consumer type")
    replayed = headrace("dlq", "replay", "--reason", "window_failed", "--app", APP, cwd=tmp_path, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == "headrace dlq: delivered 1 window to on_window again\n"
    assert out.read_text() == "0 10\n20 5\n10 10\n"  # the window, once; no event counted again
    again = headrace("dlq", "replay", str(letter["id"]), "--again", "--app", APP, cwd=tmp_path, env=env)
    assert one_error_line(again, "dlq").startswith(f"dead letter {letter['id']} is a window delivered already")
    assert out.read_text() == "0 10\n20 5\n10 10\n"
    # nothing was published to the stream by the replays: its queue holds the 26 events only
    status = json.loads(headrace("status", "--json", cwd=tmp_path).stdout)
    assert [q["next_sequence"] for q in status["queues"]] == [1]


def test_a_window_the_handoff_refused_is_not_replayed_as_an_event(tmp_path):
    import anyio

    from streams.backends.embedded.deadletters import EmbeddedDeadLetterStore
    from streams.backends.embedded.store import EmbeddedStore
    from streams.core.deadletters import DeadLetter

    (tmp_path / "headrace.toml").write_text(CONFIG)
    window = {"key": "r1", "start": T0, "end": T0 + 10, "value": 3}
    with EmbeddedStore(tmp_path / "store") as store:
        anyio.run(
            EmbeddedDeadLetterStore(store).add, [DeadLetter("handoff_failed", stream="rooms/r1", queue=0, value=window)]
        )
    refused = one_error_line(headrace("dlq", "replay", "1", cwd=tmp_path), "dlq")
    assert refused.startswith("dead letter 1 (handoff_failed) is a window the handoff refused, not an event")
