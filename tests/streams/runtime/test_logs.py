"""Structured logs: lines the runtime writes carry the worker, the queue and the stream."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

from streams import ConfigurationError, StreamId, StreamProvider
from streams.core.ids import QueueId
from streams.observability import configure_logging, log_context
from tests.agents.delivery.conftest import drained

WORKER = "w-logs"


@pytest.fixture
def capture() -> Iterator[Callable[[str], io.StringIO]]:
    """``capture(fmt)``: the ``headrace`` loggers' lines at warning and above, in ``fmt``."""
    handlers: list[logging.Handler] = []
    logger = logging.getLogger("headrace")
    level = logger.level

    def start(fmt: str) -> io.StringIO:
        out = io.StringIO()
        handler = configure_logging("warning", fmt, stream=out, logger="headrace", worker=WORKER)  # type: ignore[arg-type]
        handlers.append(handler)
        return out

    yield start
    for handler in handlers:
        logger.removeHandler(handler)
    logger.setLevel(level)


async def run_worker_with_trouble(path) -> tuple[int, StreamId]:
    """A worker reads a corrupt record (the agent warns) and a consumer raises (the failure
    handler warns); returns the corrupt record's queue and the failing stream."""
    provider = StreamProvider.embedded(
        path, queues=2, worker_name=WORKER, max_event_delivery_time=0.2, delivery_retry_backoff=0.01
    )

    @provider.implicit("flaky")
    class Flaky:
        def __init__(self, stream_id):
            pass

        def on_next(self, batch):
            raise RuntimeError("consumer bug")

    flaky = StreamId("flaky", "f-1")
    queue = provider.mapper.get_queue_for_stream(flaky)
    async with provider:
        adapter = await provider.factory.create_adapter()
        await adapter.queue_message_batch(queue, flaky, b"\x00garbage")
        await provider.get_stream(flaky).on_next("x")
        await drained(provider)
    return queue.number, flaky


async def test_agent_and_delivery_lines_name_worker_queue_and_stream(tmp_path, capture):
    out = capture("logfmt")
    queue, flaky = await run_worker_with_trouble(tmp_path / "store")
    lines = out.getvalue().splitlines()
    [agent] = [line for line in lines if "do not decode" in line]
    assert f" level=warning logger=headrace.agent worker={WORKER} queue={queue} stream=- msg=" in agent
    # the first failure carries the traceback; the dead-lettering after the retries is one line
    [first] = [line for line in lines if "retrying with back-off" in line]
    assert f" logger=headrace.agent worker={WORKER} queue={queue} stream={flaky} msg=" in first
    assert 'exc="Traceback (most recent call last):' in first and 'RuntimeError: consumer bug"' in first
    [delivery] = [line for line in lines if "delivery failed" in line]
    assert f" logger=headrace.delivery worker={WORKER} queue={queue} stream={flaky} msg=" in delivery
    assert "exc=" not in delivery
    assert all(line.startswith("ts=") and "Z level=" in line for line in lines)


async def test_text_is_readable_with_the_traceback_on_lines_of_its_own(tmp_path, capture):
    out = capture("text")
    queue, flaky = await run_worker_with_trouble(tmp_path / "store")
    text = out.getvalue()
    assert text.count("Traceback (most recent call last):\n") == 1  # once per run of failures
    first = text.index("retrying with back-off")
    header = text[text.rindex("\n", 0, first) + 1 : text.index("\n", first)]
    assert f" WARNING  headrace.agent worker={WORKER} queue={queue} stream={flaky}  {flaky}: consumer " in header
    traceback = text[text.index("Traceback", first) : text.index("RuntimeError: consumer bug", first)]
    assert "in on_next\n" in traceback  # the user's frame, last
    assert traceback.rstrip().splitlines()[-1].strip() == 'raise RuntimeError("consumer bug")'


async def test_json_lines_hold_the_same_fields(tmp_path, capture):
    out = capture("json")
    queue, flaky = await run_worker_with_trouble(tmp_path / "store")
    entries = [json.loads(line) for line in out.getvalue().splitlines()]
    [agent] = [e for e in entries if "do not decode" in e["msg"]]
    assert (agent["logger"], agent["level"], agent["worker"], agent["queue"], agent["stream"]) == (
        "headrace.agent",
        "warning",
        WORKER,
        queue,
        None,
    )
    [delivery] = [e for e in entries if "delivery failed" in e["msg"]]
    assert (delivery["worker"], delivery["queue"], delivery["stream"]) == (WORKER, queue, str(flaky))
    [first] = [e for e in entries if "retrying with back-off" in e["msg"]]
    assert first["exc"].endswith("RuntimeError: consumer bug") and "exc" not in delivery


def test_context_names_what_arguments_do_not_and_arguments_win(capture):
    out = capture("logfmt")
    log = logging.getLogger("headrace.test")
    with log_context(queue=QueueId(5), stream=StreamId("tolls", "p-1")):
        log.warning("from the context")
        log.warning("about %s", QueueId(2))
    log.error('a "quoted" message with = signs')
    first, second, third = out.getvalue().splitlines()
    assert first.endswith(f'worker={WORKER} queue=5 stream=tolls/p-1 msg="from the context"')
    assert second.endswith(f'worker={WORKER} queue=2 stream=tolls/p-1 msg="about queue-2"')
    assert third.endswith(f'worker={WORKER} queue=- stream=- msg="a \\"quoted\\" message with = signs"')


def test_exceptions_are_one_field_of_the_line(capture):
    out = capture("logfmt")
    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("headrace.test").exception("failed")
    [line] = out.getvalue().splitlines()
    assert 'msg=failed exc="Traceback (most recent call last):\\n' in line
    assert line.endswith('ValueError: bad value"')


def test_unknown_fields_levels_and_formats_are_refused():
    with pytest.raises(ConfigurationError, match="not 'partition'"):
        with log_context(partition=3):
            pass
    with pytest.raises(ConfigurationError, match="log level"):
        configure_logging("loud")
    with pytest.raises(ConfigurationError, match="log format"):
        configure_logging("info", "xml")  # type: ignore[arg-type]


def test_the_default_format_is_text_on_a_terminal_and_logfmt_elsewhere():
    import os

    from streams.observability import KeyValueFormatter, TextFormatter

    primary, secondary = os.openpty()
    with open(secondary, "w") as terminal, io.StringIO() as file:
        on_terminal = configure_logging("info", None, stream=terminal, logger="headrace.default")
        in_file = configure_logging("info", None, stream=file, logger="headrace.default")
        logger = logging.getLogger("headrace.default")
        logger.removeHandler(on_terminal)
        logger.removeHandler(in_file)
    os.close(primary)
    assert isinstance(on_terminal.formatter, TextFormatter)
    assert isinstance(in_file.formatter, KeyValueFormatter)


@pytest.mark.parametrize(
    ("level", "library"), [("debug", logging.INFO), ("info", logging.WARNING), ("error", logging.ERROR)]
)
def test_client_libraries_log_one_level_below_headrace(level, library):
    root, aiokafka = logging.getLogger(), logging.getLogger("aiokafka")
    levels = root.level, aiokafka.level
    out = io.StringIO()
    handler = configure_logging(level, "logfmt", stream=out)
    try:
        assert aiokafka.level == library
        # a logger of its own: the outage log's filters sit on aiokafka's existing ones
        library_logger = logging.getLogger("aiokafka.test_levels")
        library_logger.info("Joined group")
        library_logger.warning("cannot reach node 1")
        lines = out.getvalue().splitlines()
        assert [line.split("level=")[1].split()[0] for line in lines] == {
            "debug": ["info", "warning"],
            "info": ["warning"],
            "error": [],
        }[level]
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        aiokafka.setLevel(levels[1])
