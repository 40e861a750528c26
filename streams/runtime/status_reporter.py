"""A worker's live status, written where ``headrace status`` reads it: the embedded store,
or on Kafka the cluster's status topic (:mod:`streams.runtime.status_topic`).

Cache fill, pressure and watermarks live only in a worker's memory. A :class:`StatusReporter`
running in the worker publishes one row per pulling agent to a :class:`StatusBoard` every
``interval`` seconds (in the embedded store, table ``status_agents``), replacing that
worker's rows, and removes them when the worker stops.
Each row says until when it is fresh (three intervals), so a reader can tell a worker that
stopped reporting (it died) from one that reports. It also carries the events in and out
per second over the last interval (the reporter keeps its previous reading) and the
consumers furthest behind on the queue.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time
from dataclasses import asdict, astuple, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from streams.core.errors import ConfigurationError, HeadraceError
from streams.embedded.store import EmbeddedStore, Migration
from streams.runtime.provider import StreamProvider
from streams.runtime.snapshot import CursorLag, QueueSnapshot, take_snapshot

log = logging.getLogger("headrace.status")

STATUS_SCHEMA: list[Migration] = [
    [
        "CREATE TABLE status_agents("
        " worker TEXT NOT NULL, queue INTEGER NOT NULL,"
        " cache_size INTEGER NOT NULL, cache_max INTEGER NOT NULL, under_pressure INTEGER NOT NULL,"
        " streams INTEGER NOT NULL, read_messages INTEGER NOT NULL, read_failures INTEGER NOT NULL,"
        " watermark_min REAL, watermark_delay REAL,"
        " updated REAL NOT NULL, fresh_until REAL NOT NULL,"
        " PRIMARY KEY (worker, queue))",
    ],
    ["ALTER TABLE status_agents ADD COLUMN held_by TEXT"],  # issue 17: merged inputs
    ["ALTER TABLE status_agents ADD COLUMN slowest_substreams TEXT"],  # issue 17: slowest substreams
    [
        "ALTER TABLE status_agents ADD COLUMN events_in INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE status_agents ADD COLUMN events_out INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE status_agents ADD COLUMN events_in_per_s REAL",
        "ALTER TABLE status_agents ADD COLUMN events_out_per_s REAL",
        "ALTER TABLE status_agents ADD COLUMN slowest TEXT NOT NULL DEFAULT '[]'",
    ],
    ["ALTER TABLE status_agents ADD COLUMN fates TEXT NOT NULL DEFAULT '{}'"],  # issue 30: per consumer type
    ["ALTER TABLE status_agents ADD COLUMN failed TEXT"],  # issue 24: a queue that cannot be read on
]

FRESH_FOR = 3  # a row stays fresh for this many reporting intervals


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """One pulling agent as its worker last saw it (from a worker snapshot,
    :func:`streams.observability.take_snapshot`).

    ``watermark_min``: the lowest watermark among the queue's running event-time activations
    (``None`` when there is none); ``watermark_delay``: the highest watermark delay among them
    (processing clock minus watermark, in seconds). ``held_by``: among activations with
    several inputs, the input holding the most of them back, how many, and its watermark
    (``None`` when none is held back). ``slowest_substreams``: the substreams with the lowest
    watermarks (``None`` without substreams). ``events_in`` and ``events_out``: events
    read from the queue and delivered to consumers since the agent started, and their rates
    over the last reporting interval (``None`` in the first report); ``slowest``: the
    consumers furthest behind (:class:`~streams.runtime.snapshot.CursorLag`); ``fates``:
    per consumer type, what event time did to its events on this queue since the agent started
    (:func:`~streams.runtime.snapshot.fates_of`). ``failed``: why the queue cannot be
    read on, its agent stopped (``None``: reading).
    """

    worker: str
    queue: int
    cache_size: int
    cache_max: int
    under_pressure: bool
    streams: int
    read_messages: int
    read_failures: int
    watermark_min: float | None
    watermark_delay: float | None
    updated: float
    fresh_until: float
    held_by: str | None = None
    slowest_substreams: str | None = None
    events_in: int = 0
    events_out: int = 0
    events_in_per_s: float | None = None
    events_out_per_s: float | None = None
    slowest: list[CursorLag] = field(default_factory=list)
    fates: dict[str, dict[str, int]] = field(default_factory=dict)
    failed: str | None = None

    @classmethod
    def of(
        cls, worker: str, queue: QueueSnapshot, taken_at: float, interval: float, before: AgentStatus | None = None
    ) -> AgentStatus:
        """The row of ``queue``; with ``before`` (the same agent's previous row), rates."""
        span = taken_at - before.updated if before is not None else 0.0
        # An agent that restarted (the queue came back) counts from zero again: no rate then.
        rated = before is not None and span > 0 and queue.events_read >= before.events_in
        return cls(
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
        )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> AgentStatus:
        values = dict(zip(_NAMES, row))
        values["under_pressure"] = bool(values["under_pressure"])  # SQLite keeps 0 or 1
        values["slowest"] = [CursorLag(**lag) for lag in json.loads(values["slowest"])]
        values["fates"] = json.loads(values["fates"])
        return cls(**values)

    def as_row(self) -> tuple[Any, ...]:
        row = dict(zip(_NAMES, astuple(self)))
        row["slowest"] = json.dumps([asdict(lag) for lag in self.slowest])
        row["fates"] = json.dumps(self.fates)
        return tuple(row[name] for name in _NAMES)


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


_NAMES = [f.name for f in fields(AgentStatus)]
COLUMNS = ", ".join(_NAMES)


def read_agent_statuses(conn: sqlite3.Connection, now: float) -> list[AgentStatus]:
    """The fresh rows of ``status_agents`` (none if no worker ever reported), by queue."""
    made = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'status_agents'").fetchone()
    if not made:
        return []
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM status_agents WHERE fresh_until >= ? ORDER BY queue, worker", (now,)
    ).fetchall()
    return [AgentStatus.from_row(row) for row in rows]


class StatusBoard(Protocol):
    """Where workers publish their agents' status for ``headrace status`` to read."""

    async def publish(self, worker: str, statuses: list[AgentStatus], taken_at: float, fresh_until: float) -> None:
        """Replace ``worker``'s status with ``statuses``, taken at ``taken_at`` and to be
        taken for current until ``fresh_until``."""
        ...

    async def clear(self, worker: str) -> None:
        """Remove ``worker``'s status (it stops: its agents are gone)."""
        ...


class EmbeddedStatusBoard:
    """The status board in the embedded store: table ``status_agents``, a row per agent."""

    def __init__(self, store: EmbeddedStore) -> None:
        store.require_schema("status", STATUS_SCHEMA)
        self.store = store

    async def publish(self, worker: str, statuses: list[AgentStatus], taken_at: float, fresh_until: float) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM status_agents WHERE worker = ?", (worker,))
            marks = ", ".join("?" for _ in _NAMES)
            conn.executemany(f"INSERT INTO status_agents({COLUMNS}) VALUES ({marks})", [s.as_row() for s in statuses])

        await self.store.write(write)

    async def clear(self, worker: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:  # no cursor leaves the store's worker thread
            conn.execute("DELETE FROM status_agents WHERE worker = ?", (worker,))

        await self.store.write(delete)


class StatusReporter:
    """Publishes ``provider``'s agents to ``board`` (an embedded store's, or any
    :class:`StatusBoard`) every ``interval`` seconds while it runs.

    >>> async def run_worker(provider):             # what ``headrace worker`` does
    ...     async with provider, anyio.create_task_group() as tg:
    ...         reporter = StatusReporter(provider, provider.store, interval=5.0)
    ...         await tg.start(reporter.run)        # first report written when this returns
    ...         ...                                  # the worker's life
    ...         tg.cancel_scope.cancel()            # run() removes this worker's rows
    """

    def __init__(self, provider: StreamProvider, board: StatusBoard | EmbeddedStore, interval: float = 5.0) -> None:
        if not interval > 0:
            raise ConfigurationError(f"the status interval is positive seconds, not {interval!r}")
        self.provider = provider
        self.board = EmbeddedStatusBoard(board) if isinstance(board, EmbeddedStore) else board
        self.interval = interval
        self._last: dict[int, AgentStatus] = {}  # by queue: the rates' starting point

    def snapshot(self) -> list[AgentStatus]:
        taken = take_snapshot(self.provider)
        statuses = [
            AgentStatus.of(taken.worker, queue, taken.taken_at, self.interval, self._last.get(queue.queue))
            for queue in taken.queues
        ]
        self._last = {s.queue: s for s in statuses}
        return statuses

    async def report(self) -> list[AgentStatus]:
        """Replace this worker's rows with its agents as they are now."""
        taken_at = time.time()
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
