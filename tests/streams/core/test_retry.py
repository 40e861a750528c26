"""The one retry helper (streams/core/retry.py): back-off with a cap, one log line at each end
of an outage, errors that no retry mends raised at once, a clear give-up, and an end on
cancellation or on the caller's stop."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import anyio
import pytest

from streams.core.errors import QueueAdapterError
from streams.core.retry import Backoff, OutageLog, PacedRetry, RetryStopped, retry, retry_blocking

LOG = logging.getLogger("headrace.test-retry")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


class Failing:
    """Fails ``failures`` times (with ``error``), then answers ``"done"``."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionRefusedError("refused")
        self.attempts = 0

    async def __call__(self) -> str:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error
        return "done"


class RecordedBackoff(Backoff):
    def __init__(self, initial: float, maximum: float) -> None:
        super().__init__(initial, maximum)
        self.delays: list[float] = []

    def next(self) -> float:
        self.delays.append(super().next())
        return self.delays[-1]


def test_backoff_doubles_up_to_its_cap_and_starts_over_on_reset() -> None:
    backoff = Backoff(initial=0.1, maximum=0.8)
    delays = [backoff.next() for _ in range(8)]
    bases = [0.1, 0.2, 0.4, 0.8, 0.8, 0.8, 0.8, 0.8]
    assert all(base <= d <= base * 1.2 for d, base in zip(delays, bases, strict=True)), delays
    backoff.reset()
    assert 0.1 <= backoff.next() <= 0.12


async def test_retries_until_success_with_one_log_line_at_each_end_of_the_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = OutageLog("server A", LOG)
    operation = Failing(3)
    backoff = RecordedBackoff(0.001, 0.004)
    seen: list[tuple[str, int]] = []
    result = await retry(
        operation,
        what="asking",
        outage=outage,
        backoff=backoff,
        give_up_after=10,
        on_failure=lambda exc, attempt: seen.append((type(exc).__name__, attempt)),
    )
    assert (result, operation.attempts, outage.outages, outage.ongoing) == ("done", 4, 1, False)
    assert seen == [("ConnectionRefusedError", 1), ("ConnectionRefusedError", 2), ("ConnectionRefusedError", 3)]
    assert len(backoff.delays) == 3 and backoff.delays[2] <= 0.004 * 1.2  # capped
    lines = warnings(caplog)
    assert len(lines) == 2
    assert (
        lines[0]
        == "server A is unreachable (ConnectionRefusedError: refused); retrying with back-off, positions and data are kept"
    )
    assert lines[1].startswith("server A is reachable again after ")


async def test_an_error_no_retry_mends_is_raised_at_once() -> None:
    outage = OutageLog("server A", LOG)
    operation = Failing(5, ValueError("a bug, not an outage"))
    with pytest.raises(ValueError, match="a bug"):
        await retry(operation, what="x", outage=outage, is_transient=lambda e: isinstance(e, ConnectionError))
    assert operation.attempts == 1 and not outage.ongoing and outage.outages == 0


async def test_it_gives_up_clearly_after_give_up_after() -> None:
    outage = OutageLog("server A", LOG)
    with pytest.raises(
        QueueAdapterError,
        match=r"^enqueueing failed: server A has been unreachable for 0 s "
        r"\(ConnectionRefusedError: refused\); check that it is running",
    ):
        await retry(Failing(1000), what="enqueueing", outage=outage, give_up_after=0.05)
    assert outage.ongoing  # nobody has reached it since


async def test_a_caller_words_its_own_give_up_error_from_the_last_failure() -> None:
    operation = Failing(1000, OSError("no route"))

    def error(exc: BaseException, waited: float) -> Exception:
        return QueueAdapterError(f"gave up after {operation.attempts} attempts: {exc}")

    with pytest.raises(QueueAdapterError) as failed:
        await retry(operation, what="x", give_up_after=0.05, backoff=Backoff(0.001, 0.002), give_up=error)
    assert str(failed.value) == f"gave up after {operation.attempts} attempts: no route"
    assert operation.attempts >= 2


async def test_an_attempt_that_outlasts_attempt_timeout_is_a_failure_to_retry() -> None:
    attempts: list[int] = []

    async def slow_then_quick() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            await anyio.sleep(10)
        return len(attempts)

    failures: list[BaseException] = []
    result = await retry(
        slow_then_quick,
        what="x",
        is_transient=lambda e: False,  # a timeout is retried all the same
        attempt_timeout=0.05,
        on_failure=lambda exc, attempt: failures.append(exc),
    )
    assert result == 2 and [type(f) for f in failures] == [TimeoutError]


async def test_cancelling_ends_the_retry_during_its_back_off() -> None:
    outage = OutageLog("server A", LOG)
    operation = Failing(1000)
    with anyio.move_on_after(0.1) as scope:
        await retry(operation, what="x", outage=outage, backoff=Backoff(initial=60, maximum=60))
    assert scope.cancelled_caught and operation.attempts == 1


async def test_stop_ends_the_retry_after_a_failure_with_that_failure_as_cause() -> None:
    operation = Failing(1000)
    asked: list[int] = []

    def stop(attempt: int) -> bool:
        asked.append(attempt)
        return attempt == 2

    with pytest.raises(RetryStopped) as stopped:
        await retry(operation, what="reading q-1", backoff=Backoff(0.001, 0.001), stop=stop)
    assert operation.attempts == 2 and asked == [1, 2]
    assert isinstance(stopped.value.__cause__, ConnectionRefusedError)
    assert str(stopped.value) == "reading q-1: stopped after 2 failed attempt(s)"


def test_backoff_without_jitter_doubles_exactly() -> None:
    backoff = Backoff(initial=0.25, maximum=1.0, jitter=0.0)
    assert [backoff.next() for _ in range(5)] == [0.25, 0.5, 1.0, 1.0, 1.0]


async def test_a_retry_after_the_callers_own_failure_begins_with_a_pause() -> None:
    operation = Failing(0)
    backoff = RecordedBackoff(0.01, 0.01)
    failures: list[tuple[BaseException, int]] = []
    first = ConnectionRefusedError("the caller's attempt")
    result = await retry(
        operation, what="x", after=first, backoff=backoff, on_failure=lambda e, n: failures.append((e, n))
    )
    assert result == "done" and operation.attempts == 1  # one call of its own, after one pause
    assert len(backoff.delays) == 1 and failures == [(first, 1)]


async def test_a_retry_that_must_not_start_late_gives_up_rather_than_shorten_its_last_pause() -> None:
    # Pauses 0.1, 0.2, then 0.4: that one would end at 0.7 s, past give_up_after (0.5 s).
    whole = Failing(1000)
    with pytest.raises(QueueAdapterError, match=r"^x failed for 0 s \(ConnectionRefusedError: refused\)$"):
        await retry(whole, what="x", give_up_after=0.5, backoff=Backoff(0.1, 1.0, jitter=0.0), shorten_last_pause=False)
    assert whole.attempts == 3  # at 0, 0.1 and 0.3 s
    shortened = Failing(1000)
    with pytest.raises(QueueAdapterError):
        await retry(shortened, what="x", give_up_after=0.5, backoff=Backoff(0.1, 1.0, jitter=0.0))
    assert shortened.attempts == 4  # and at 0.5 s, as give_up_after ends


async def test_a_retry_after_a_failure_gives_up_at_once_when_no_whole_pause_fits() -> None:
    operation = Failing(0)
    first = ConnectionRefusedError("the caller's attempt")
    with pytest.raises(RetryStopped) as stopped:
        await retry(operation, what="x", after=first, stop=lambda attempt: True)
    assert stopped.value.__cause__ is first
    with pytest.raises(QueueAdapterError, match="the caller's attempt"):
        await retry(
            operation, what="x", after=first, give_up_after=1.0, backoff=Backoff(5, 5), shorten_last_pause=False
        )
    assert operation.attempts == 0


class FailingBlocking:
    """Fails ``failures`` times (with ``error``), then answers ``"done"``; blocking, thread-safe."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionRefusedError("refused")
        self.attempts = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            self.attempts += 1
            failing = self.attempts <= self.failures
        if failing:
            raise self.error
        return "done"


def test_blocking_retries_in_several_threads_share_one_outage_and_its_two_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = OutageLog("server A", LOG)
    operation = FailingBlocking(12)
    results: list[str] = []

    def client() -> None:
        results.append(retry_blocking(operation, what="asking", outage=outage, backoff=Backoff(0.001, 0.004)))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["done"] * 4 and operation.attempts == 12 + 4
    assert outage.outages == 1 and not outage.ongoing
    lines = warnings(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("server A is unreachable (ConnectionRefusedError: refused)")
    assert lines[1].startswith("server A is reachable again after ")


def test_blocking_retry_raises_what_no_retry_mends_even_a_timeout_and_gives_up_clearly() -> None:
    busy = FailingBlocking(5, TimeoutError("the operation's own timeout"))
    with pytest.raises(TimeoutError):  # no attempt timeout here: not taken for a retryable one
        retry_blocking(busy, what="x", is_transient=lambda e: isinstance(e, ConnectionError))
    assert busy.attempts == 1
    with pytest.raises(QueueAdapterError, match=r"^writing failed for 0 s \(ConnectionRefusedError: refused\)$"):
        retry_blocking(FailingBlocking(1000), what="writing", give_up_after=0.02, backoff=Backoff(0.001, 0.002))


def test_every_back_off_pause_is_the_retry_helpers():
    """No product module pauses on a back-off of its own: they retry through this module
    (:func:`retry`, :func:`retry_blocking`, :class:`PacedRetry` for a caller's own loop)."""
    root = Path(__file__).resolve().parents[3]
    pausing = re.compile(r"sleep\([^()]*\.next\(\)\)")
    found = [
        str(path.relative_to(root))
        for package in ("agents", "balancer", "cache", "spark_sink", "streams")
        for path in (root / package).rglob("*.py")
        if path != root / "streams/core/retry.py" and pausing.search(path.read_text())
    ]
    assert found == []
    assert pausing.search((root / "streams/core/retry.py").read_text())  # the pattern finds one


async def test_a_paced_retry_reports_each_failure_and_its_end_once(caplog):
    caplog.set_level(logging.INFO, LOG.name)
    paced = PacedRetry(OutageLog("server C", LOG), Backoff(0.01, 0.02, jitter=0.0))
    began = time.monotonic()
    for _ in range(3):
        await paced.failed("ConnectionRefusedError: refused", since=began)
    assert time.monotonic() - began >= 0.01 + 0.02 + 0.02  # the delays grew to their cap
    paced.succeeded()
    assert paced.backoff.next() == 0.01  # and start over
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "unreachable" in lines[0] and "server C" in lines[1], lines
