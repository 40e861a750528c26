"""A worker's live status, published where ``headrace status`` reads it: its backend's
:class:`~streams.adapters.status.StatusBoard` (the embedded store, or on Kafka the cluster's
status topic).

A :class:`StatusReporter` running in the worker publishes one
:class:`~streams.adapters.status.AgentStatus` per pulling agent every ``interval`` seconds,
replacing that worker's, and removes them when the worker stops.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime

import anyio

from streams.adapters.status import FRESH_FOR, AgentStatus, StatusBoard
from streams.core.clock import StepWatch, wall_time
from streams.core.errors import ConfigurationError, HeadraceError
from streams.runtime.provider import StreamProvider
from streams.runtime.snapshot import QueueSnapshot, take_snapshot

log = logging.getLogger("headrace.status")


def agent_status(
    worker: str,
    queue: QueueSnapshot,
    taken_at: float,
    interval: float,
    before: AgentStatus | None = None,
    steps: StepWatch | None = None,
) -> AgentStatus:
    """The row of ``queue``; with ``before`` (the same agent's previous row), rates; with
    ``steps``, the worker's wall-clock steps it saw."""
    span = taken_at - before.updated if before is not None else 0.0
    # An agent that restarted (the queue came back) counts from zero again, and the events out
    # of consumers that closed (their streams went quiet) leave the sum: no rate then.
    rated = (
        before is not None
        and span > 0
        and queue.events_read >= before.events_in
        and queue.events_delivered >= before.events_out
    )
    return AgentStatus(
        worker=worker,
        queue=queue.queue,
        cache_size=queue.cache_size,
        cache_max=queue.cache_max_size,
        under_pressure=queue.under_pressure,
        streams=queue.streams,
        read_messages=queue.records_read,
        read_failures=queue.read_failures,
        watermark_min=queue.event_time.watermark,
        watermark_delay=queue.event_time.delay,
        updated=taken_at,
        fresh_until=taken_at + FRESH_FOR * interval,
        held_by=_held_by(queue),
        slowest_substreams=", ".join(f"{name} at {_utc(mark)}" for name, mark in queue.event_time.slowest) or None,
        events_in=queue.events_read,
        events_out=queue.events_delivered,
        events_in_per_s=(queue.events_read - before.events_in) / span if rated and before else None,
        events_out_per_s=(queue.events_delivered - before.events_out) / span if rated and before else None,
        slowest=list(queue.slowest),
        fates={name: dict(fates) for name, fates in queue.fates.items()},
        failed=queue.failed,
        observed=dict(queue.observed),
        input_watermarks={name: m if math.isfinite(m) else None for name, m in queue.event_time.inputs.items()},
        clock_steps=steps.count if steps is not None else 0,
        clock_step=steps.last if steps is not None else 0.0,
        clock_step_at=steps.last_at if steps is not None else None,
        checkpoint_holder=queue.checkpoint_holder,
    )


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _held_by(queue: QueueSnapshot) -> str | None:
    holding = queue.event_time.holding
    if not holding:
        return None
    name = max(holding, key=lambda n: (holding[n], n))
    mark = queue.event_time.inputs.get(name, float("-inf"))
    at = _utc(mark) if math.isfinite(mark) else "no watermark yet"
    return f"{name} ({holding[name]} held, at {at})"


class StatusReporter:
    """Publishes ``provider``'s agents to ``board`` (its backend's, or any :class:`StatusBoard`)
    every ``interval`` seconds while it runs.

    >>> async def run_worker(provider):             # what ``headrace worker`` does
    ...     async with provider, anyio.create_task_group() as tg:
    ...         reporter = StatusReporter(provider, provider.backend.status_board(), interval=5.0)
    ...         await tg.start(reporter.run)        # first report written when this returns
    ...         ...                                  # the worker's life
    ...         tg.cancel_scope.cancel()            # run() removes this worker's rows
    """

    def __init__(self, provider: StreamProvider, board: StatusBoard, interval: float = 5.0) -> None:
        if not interval > 0:
            raise ConfigurationError(f"the status interval is positive seconds, not {interval!r}")
        self.provider = provider
        self.board = board
        self.interval = interval
        self._last: dict[int, AgentStatus] = {}  # by queue: the rates' starting point
        # The worker's wall-clock steps, looked at every report; quiet: the worker's balancer
        # says each in the log.
        self._steps = StepWatch(provider.clock, say=False)

    def snapshot(self) -> list[AgentStatus]:
        self._steps.check()
        taken = take_snapshot(self.provider)
        statuses = [
            agent_status(taken.worker, queue, taken.taken_at, self.interval, self._last.get(queue.queue), self._steps)
            for queue in taken.queues
        ]
        self._last = {s.queue: s for s in statuses}
        return statuses

    async def report(self) -> list[AgentStatus]:
        """Replace this worker's rows with its agents as they are now."""
        taken_at = wall_time()
        statuses = self.snapshot()
        await self.board.publish(self.provider.worker_name, statuses, taken_at, taken_at + FRESH_FOR * self.interval)
        return statuses

    async def clear(self) -> None:
        """Remove this worker's rows (it stops: its agents are gone)."""
        await self.board.clear(self.provider.worker_name)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Report now, then every ``interval`` until cancelled; then clear this worker's rows.
        A failed write is logged and tried again next time (status is never worth a crash)."""
        try:
            await self._report_logged()
            task_status.started()
            while True:
                await anyio.sleep(self.interval)
                await self._report_logged()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.clear()
                except HeadraceError as exc:
                    log.warning("could not clear this worker's status rows: %s", exc)

    async def _report_logged(self) -> None:
        try:
            await self.report()
        except HeadraceError as exc:
            log.warning("writing this worker's status failed (trying again in %.1f s): %s", self.interval, exc)
