"""Outage bookkeeping (streams/core/retry.py): one log line when an outage starts and one
when it ends, however many failures are reported (the retries: tests/streams/core/test_retry.py)."""

from __future__ import annotations

import logging
import re
import time

import pytest

from streams.core.retry import OutageLog, quiet_client_library

LOG = logging.getLogger("headrace.test-outage")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_many_failures_make_one_outage_with_one_line_at_each_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = OutageLog("server A", LOG)
    assert [outage.failed("refused") for _ in range(5)] == [True, False, False, False, False]
    outage.recovered()
    outage.recovered()
    lines = warnings(caplog)
    assert len(lines) == 2 and outage.outages == 1 and not outage.ongoing
    assert lines[0] == ("server A is unreachable (refused); retrying with back-off, positions and data are kept")
    assert re.fullmatch(r"server A is reachable again after \d+\.\d s", lines[1])  # no client library to count


def test_a_client_that_noticed_late_does_not_start_a_new_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = OutageLog("server A", LOG)
    began = time.monotonic()
    outage.failed("refused")
    outage.recovered()
    assert outage.failed("no answer", since=began) is False  # it failed during that outage
    outage.recovered()
    assert len(warnings(caplog)) == 2
    assert outage.failed("refused again") is True  # a failure that began after: a new outage
    assert outage.outages == 2 and len(warnings(caplog)) == 3


def test_the_client_librarys_retry_records_are_lowered_by_logger_and_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its connection logger's warnings and errors are lowered whatever their wording; its
    other loggers' only while an outage is under way; a traceback or CRITICAL never."""
    connecting = logging.getLogger("fakeclient")  # exist before the outage log, as at import
    coordinator = logging.getLogger("fakeclient.coordinator")
    caplog.set_level(logging.INFO)
    outage = OutageLog("server A", LOG, "fakeclient", ("fakeclient",))
    connecting.error('Unable connect to "nohost:9092": [Errno -2] Name or service not known')
    connecting.warning("any wording at all")
    coordinator.error("Topic authorization failed")  # no outage: another logger's error stays
    outage.failed("refused")
    coordinator.error("Heartbeat failed: NodeNotReadyError")  # during the outage: lowered
    connecting.critical("the client is broken")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        connecting.exception("Unexpected exception in the connection")
    outage.recovered()
    coordinator.error("Group Coordinator Request failed")  # after it: stays
    assert warnings(caplog) == [
        "Topic authorization failed",
        "server A is unreachable (refused); retrying with back-off, positions and data are kept",
        "the client is broken",
        "Unexpected exception in the connection",
        warnings(caplog)[4],
        "Group Coordinator Request failed",
    ]
    assert warnings(caplog)[4].endswith("(client retries logged at DEBUG: 1)")
    assert quiet_client_library("fakeclient").demoted == 3  # the two before the outage, one in it
