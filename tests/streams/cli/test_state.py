"""``headrace state``: it refuses a store that is not there (never making one), says so in one
line when nothing is saved, and shows every durable field a type declares, at its default
when never written."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from streams import StreamId, StreamProvider
from tests.agents.delivery.conftest import drained
from tests.helpers import saved_states, wait_until_async
from tests.streams.cli.helpers import clean_env, headrace, one_error_line

APP = "tests.streams.cli.state_app:provider"


def _fresh(store: Path) -> StreamProvider:
    """A provider with the app's type on ``store``, in this process."""
    from tests.streams.cli.state_app import Alerts

    provider = StreamProvider.embedded(store, queues=2)
    provider.implicit("orders")(Alerts)
    return provider


def test_state_of_a_missing_store_is_refused_and_none_is_made(tmp_path: Path) -> None:
    store = tmp_path / "nowhere"
    env = clean_env(HEADRACE_TEST_STORE=str(store))
    error = one_error_line(headrace("state", "--app", APP, "Alerts", cwd=tmp_path, env=env), "state")
    assert error.startswith(f"no headrace store at {str(store)!r}"), error
    assert not store.exists()
    by_path = one_error_line(headrace("state", "--path", store, "Alerts", cwd=tmp_path), "state")
    assert by_path.startswith(f"no headrace store at {str(store)!r}"), by_path


def test_state_with_nothing_saved_says_so_and_exits_0(tmp_path: Path) -> None:
    store = tmp_path / "store"
    produced = headrace("produce", "--path", store, "--create", "--stream", "other/x", cwd=tmp_path, stdin="1\n")
    assert produced.returncode == 0, produced.stderr
    env = clean_env(HEADRACE_TEST_STORE=str(store))
    for args in (("--app", APP), ("--path", store)):
        shown = headrace("state", *args, "Alerts", cwd=tmp_path, env=env)
        assert (shown.returncode, shown.stdout.strip()) == (0, "no saved state of Alerts: nothing is saved for it")
        as_json = headrace("state", *args, "Alerts", "--json", cwd=tmp_path, env=env)
        assert (as_json.returncode, as_json.stdout) == (0, ""), as_json.stderr  # stdout: JSON lines only
        assert as_json.stderr.strip() == "no saved state of Alerts: nothing is saved for it"
    typo = one_error_line(headrace("state", "--app", APP, "Alertz", cwd=tmp_path, env=env), "state")
    assert typo.startswith("no saved state of a consumer type 'Alertz'"), typo


def test_state_shows_every_declared_field_with_its_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    monkeypatch.setenv("HEADRACE_TEST_STORE", str(store))  # the app module's own provider, unused here

    async def orders() -> None:
        provider = _fresh(store)
        async with provider:
            for user, n in (("ann", 1), ("bob", 3)):
                await provider.get_stream(StreamId("orders", user)).on_next_batch(list(range(n)))
            await drained(provider, 30)
            assert await wait_until_async(lambda: len(saved_states(store)) == 2, 10)

    anyio.run(orders)
    env = clean_env(HEADRACE_TEST_STORE=str(store))
    shown = headrace("state", "--app", APP, "Alerts", "--json", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    fields = {s["stream"]: s["fields"] for s in map(json.loads, shown.stdout.splitlines())}
    assert fields == {"orders/ann": {"orders": 1, "alerted": []}, "orders/bob": {"orders": 3, "alerted": [3]}}
    table = headrace("state", "--app", APP, "Alerts", cwd=tmp_path, env=env).stdout
    [ann] = [line for line in table.splitlines() if "orders/ann" in line]
    assert '{"orders": 1, "alerted": []}' in ann, table
    one = headrace("state", "--app", APP, "Alerts", "orders/ann", "--json", cwd=tmp_path, env=env)
    assert json.loads(one.stdout)["fields"] == {"orders": 1, "alerted": []}
