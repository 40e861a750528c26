"""A worker's configuration applies to a provider the app builds in code
(``StreamProvider.embedded(...)``, as the walkthrough does): ``[agent]`` and ``[cache]`` of
``--config`` and ``HEADRACE_AGENT__*`` win, and the worker says so (docs/configuration.md)."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

from streams import StreamProvider
from streams.runtime.config import apply_options, load_config
from tests.streams.cli.helpers import clean_env, headrace, start_worker

APP = """
from streams import StreamProvider

provider = StreamProvider.embedded("store", queues=1{extra})


@provider.implicit("orders")
class Broken:
    def __init__(self, stream_id):
        pass

    def on_next(self, batch):
        raise ValueError("no price")
"""


def _log_after_one_failure(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``headrace worker --app app:provider ARGS`` until its consumer has raised once;
    its log."""
    produced = headrace("produce", "--app", "app:provider", "--stream", "orders/o-1", cwd=cwd, stdin="1\n")
    assert produced.returncode == 0, produced.stderr
    log = cwd / "worker.log"
    worker = start_worker(cwd, "--app", "app:provider", "--log-format", "text", *args, env=env)
    try:
        deadline = time.monotonic() + 30
        while "retrying with back-off" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    return log.read_text()


def test_the_config_file_sets_what_the_app_left_to_its_defaults(tmp_path):
    (tmp_path / "app.py").write_text(APP.format(extra=""))
    (tmp_path / "cfg.toml").write_text('[agent]\nmax_event_delivery_time = "5s"\nlateness_sample_every = 1\n')
    text = _log_after_one_failure(tmp_path, "--config", "cfg.toml")
    assert "retrying with back-off for up to 5.0s, then dead-lettering" in text, text
    assert (
        "settings from the configuration: agent.max_event_delivery_time = 5.0 (cfg.toml), "
        "agent.lateness_sample_every = 1 (cfg.toml)"
    ) in text


def test_an_environment_variable_wins_over_what_the_app_set_with_a_warning(tmp_path):
    (tmp_path / "app.py").write_text(APP.format(extra=", max_event_delivery_time=60"))
    env = clean_env(HEADRACE_AGENT__MAX_EVENT_DELIVERY_TIME="3s")
    text = _log_after_one_failure(tmp_path, env=env)
    assert "retrying with back-off for up to 3.0s" in text, text
    assert (
        "HEADRACE_AGENT__MAX_EVENT_DELIVERY_TIME = 3.0 overrides the app's max_event_delivery_time=60: "
        "the configuration wins"
    ) in text


def test_settings_the_built_provider_cannot_take_are_named_not_ignored(tmp_path):
    (tmp_path / "cfg.toml").write_text('[provider]\npath = "elsewhere"\n[cache]\nsize = 64\n')
    config = load_config(tmp_path / "cfg.toml", environ={})
    provider = StreamProvider.memory(queues=1, cache_size=128)
    lines = apply_options(config, provider)
    cfg = tmp_path / "cfg.toml"
    assert lines == [
        (logging.INFO, f"settings from the configuration: cache.size = 64 ({cfg})"),
        (logging.WARNING, f"{cfg}: cache.size = 64 overrides the app's cache_size=128: the configuration wins"),
        (
            logging.WARNING,
            f"provider.path ({cfg}) do not apply: the app builds its own provider "
            "(build it with load_config().provider() to use them)",
        ),
    ]
    assert provider.options.cache_size == 64


def test_a_provider_built_from_the_config_hears_nothing_new():
    config = load_config(environ={"HEADRACE_PROVIDER__ADAPTER": "memory", "HEADRACE_AGENT__SHUTDOWN_TIMEOUT": "2s"})
    provider = config.provider()
    lines = apply_options(config, provider)
    assert lines == [
        (
            logging.INFO,
            "settings from the configuration: agent.shutdown_timeout = 2.0 (HEADRACE_AGENT__SHUTDOWN_TIMEOUT)",
        )
    ]
    assert provider.options.shutdown_timeout == 2.0
