"""A worker's live status and a cluster's: what a worker publishes to the embedded store, and what
``headrace status`` reads back from it.

A cluster's status, read from its embedded store: what ``headrace status`` shows.

Everything comes from the tables the runtime keeps anyway (membership, leases, queue heads,
checkpoints, dead letters, the handoff log), plus the rows workers write about their agents
(:mod:`streams.runtime.status`): cache fill, pressure, watermarks. Reading writes nothing,
and a table a store does not have yet (no worker ran, nothing was dead-lettered) reads empty.

>>> import tempfile
>>> from streams.embedded.store import EmbeddedStore
>>> status = read_status(EmbeddedStore(tempfile.mkdtemp()), suspicion_timeout=30.0)
>>> status.queue_count, status.workers, status.dead_letters
(None, [], [])

A worker's live status, written where ``headrace status`` reads it: the embedded store,
or on Kafka the cluster's status topic (:mod:`streams.runtime.status_kafka`).

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
from typing import Any, Literal, Protocol

import anyio

import spark_sink
from balancer.membership import instance_is_dead
from balancer.protocols import MemberRecord
from streams.core.batch import BatchContainer, BatchKind
from streams.core.errors import ConfigurationError, DecodeError, HeadraceError
from streams.core.ids import QueueId
from streams.embedded.queues import queue_positions, recorded_queue_count
from streams.embedded.store import EmbeddedStore, Migration
from streams.eventtime.lateness import ObservedTimes
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
    # issue 29: per consumer type, sampled lateness and disorder over the last hour
    ["ALTER TABLE status_agents ADD COLUMN observed TEXT NOT NULL DEFAULT '{}'"],
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
    read on, its agent stopped (``None``: reading). ``observed``: per consumer type, the
    lateness and disorder of a sample of its events on this queue over the last hour
    (:class:`~streams.eventtime.lateness.ObservedTimes`).
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
    observed: dict[str, ObservedTimes] = field(default_factory=dict)

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
            observed=dict(queue.observed),
        )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> AgentStatus:
        values = dict(zip(_NAMES, row))
        values["under_pressure"] = bool(values["under_pressure"])  # SQLite keeps 0 or 1
        values["slowest"] = [CursorLag(**lag) for lag in json.loads(values["slowest"])]
        values["fates"] = json.loads(values["fates"])
        values["observed"] = observed_of(json.loads(values["observed"]))
        return cls(**values)

    def as_row(self) -> tuple[Any, ...]:
        row = dict(zip(_NAMES, astuple(self)))
        row["slowest"] = json.dumps([asdict(lag) for lag in self.slowest])
        row["fates"] = json.dumps(self.fates)
        row["observed"] = json.dumps({name: asdict(seen) for name, seen in self.observed.items()})
        return tuple(row[name] for name in _NAMES)


def observed_of(data: object) -> dict[str, ObservedTimes]:
    """A row's ``observed`` from its JSON (or msgpack) form; what does not read is left out
    (a row of another version)."""
    if not isinstance(data, dict):
        return {}
    found = {}
    for name, seen in data.items():
        try:
            found[str(name)] = ObservedTimes.from_dict(seen)
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):
            continue
    return found


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


WorkerState = Literal["live", "stale", "suspected", "left"]
# A worker that left, or went silent, this many suspicion timeouts ago is long gone: not shown
# unless asked for (`headrace status --all`).
GONE_AFTER_TIMEOUTS = 10
_DEFAULT_LEASE_CATEGORY = "default"  # the embedded store's balancer's leases
# Counting the events behind a checkpoint reads each record's header (about a microsecond
# each); beyond this many records per queue, status says "more than".
LAG_EVENTS_COUNTED_RECORDS = 100_000


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A member of the cluster: ``live`` (heard from within the suspicion timeout),
    ``stale`` (heard from lately, but its process on this machine is gone: it was stopped
    hard, and a restart under its name takes over at once), ``suspected`` (silent for longer
    than the timeout: dead to the others) or ``left`` (left gracefully). ``instance`` is the
    process that joined under the name (``host/pid/nonce``)."""

    name: str
    state: WorkerState
    joined_at: float
    last_heartbeat: float
    left_at: float | None
    queues: list[int]
    instance: str = ""

    def gone_since(self) -> float | None:
        """When it left or was last heard from, unless it is live."""
        if self.state == "live":
            return None
        return self.left_at if self.left_at is not None else self.last_heartbeat


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue: its owner (the holder of a current lease), how much it retains, and how far
    behind its checkpoint is (``checkpoint_lag = next_sequence - 1 - checkpoint``, the
    records written but not yet acknowledged by every consumer; ``lag_events``, the events
    in them, counted up to :data:`LAG_EVENTS_COUNTED_RECORDS` records: ``lag_events_more``
    says there are more; ``None``: not counted, on a Kafka topic of headrace's records)."""

    queue: int
    owner: str | None
    epoch: int | None
    lease_expires: float | None
    first_retained: int
    next_sequence: int
    retained: int
    checkpoint: int | None
    checkpoint_lag: int
    agent: AgentStatus | None = None
    lag_events: int | None = 0
    lag_events_more: bool = False


@dataclass(frozen=True, slots=True)
class DeadLetterCount:
    reason: str
    count: int
    replayed: int


@dataclass(frozen=True, slots=True)
class HandoffStatus:
    """A Spark handoff stream: the offset the next append takes, per partition, and the
    rows still retained (not yet trimmed)."""

    stream: str
    end_offsets: dict[int, int]
    retained: int


@dataclass(frozen=True, slots=True)
class ConsumerTypeFates:
    """What event time did to the events of one consumer type, summed over the queues of the
    workers reporting (since each agent started, with the state it took over): every event
    seen, adjusted into another time, dropped by the ordering policy, dead-lettered by the core."""

    consumer_type: str
    events: int
    adjusted: int
    dropped: int
    dead_lettered: int


def consumer_type_fates(agents: list[AgentStatus]) -> list[ConsumerTypeFates]:
    """The fates per consumer type of these agents' rows, by type name.

    >>> from streams.runtime.status import AgentStatus
    >>> row = AgentStatus("w", 0, 0, 1, False, 1, 1, 0, None, None, 0.0, 1.0,
    ...                   fates={"app.Totals": {"events": 83, "adjusted": 31, "dropped": 0, "dead_lettered": 2}})
    >>> consumer_type_fates([row, row])
    [ConsumerTypeFates(consumer_type='app.Totals', events=166, adjusted=62, dropped=0, dead_lettered=4)]
    """
    totals: dict[str, dict[str, int]] = {}
    for agent in agents:
        for name, fates in agent.fates.items():
            into = totals.setdefault(name, {})
            for fate, n in fates.items():
                into[fate] = into.get(fate, 0) + n
    return [
        ConsumerTypeFates(
            name, t.get("events", 0), t.get("adjusted", 0), t.get("dropped", 0), t.get("dead_lettered", 0)
        )
        for name, t in sorted(totals.items())
    ]


def observed_by_type(agents: list[AgentStatus]) -> dict[str, ObservedTimes]:
    """The lateness and disorder observed per consumer type over these agents' queues, merged
    (``headrace status --advise``), by type name.

    >>> from streams.eventtime.lateness import LatenessSketch
    >>> sketch = LatenessSketch(every=1)
    >>> sketch.record(10.0, 8.0, 8.0)
    >>> row = AgentStatus("w", 0, 0, 1, False, 1, 1, 0, None, None, 0.0, 1.0, observed={"app.T": sketch.observed(10.0)})
    >>> observed_by_type([row, row])["app.T"].samples
    2
    """
    parts: dict[str, list[ObservedTimes]] = {}
    for agent in agents:
        for name, seen in agent.observed.items():
            parts.setdefault(name, []).append(seen)
    return {name: ObservedTimes.combine(seen) for name, seen in sorted(parts.items())}


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    store: str
    taken_at: float
    suspicion_timeout: float
    queue_count: int | None
    workers: list[WorkerStatus] = field(default_factory=list)  # long gone ones only with everyone=True
    queues: list[QueueStatus] = field(default_factory=list)
    dead_letters: list[DeadLetterCount] = field(default_factory=list)
    handoff: list[HandoffStatus] = field(default_factory=list)
    agents: list[AgentStatus] = field(default_factory=list)  # fresh rows not shown with a queue
    workers_not_shown: int = 0  # long gone (see GONE_AFTER_TIMEOUTS)
    consumer_types: list[ConsumerTypeFates] = field(default_factory=list)  # event-time fates, per type
    kind: str = "store"  # "store": an embedded store; "cluster": a Kafka cluster (streams.runtime.status_kafka)
    group_members: list[str] | None = None  # on Kafka: the workers' consumer group's members

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types (partitions as string keys, as JSON needs); each agent's observed
        times also as their quantiles (``"quantiles": {"lateness": {"p50": ...}, ...}``, null
        where none was sampled: JSON has no NaN)."""
        data = asdict(self)
        for item in data["handoff"]:
            item["end_offsets"] = {str(p): o for p, o in item["end_offsets"].items()}
        rows = [(q["agent"], s.agent) for q, s in zip(data["queues"], self.queues)] + list(
            zip(data["agents"], self.agents)
        )
        for row, agent in rows:
            if agent is not None:
                for name, seen in agent.observed.items():
                    row["observed"][name]["quantiles"] = {
                        which: {
                            label: None if math.isnan(v) else v
                            for label, v in zip(("p50", "p99", "p99.9"), seen.quantiles(which))
                        }
                        for which in ("lateness", "disorder")
                    }
        return data


def read_status(
    store: EmbeddedStore, *, suspicion_timeout: float, now: float | None = None, everyone: bool = False
) -> ClusterStatus:
    """The status of the cluster on ``store``; workers silent for more than
    ``suspicion_timeout`` seconds are ``suspected`` (use ``BalancerOptions.suspicion_timeout``).
    Workers gone for more than ``GONE_AFTER_TIMEOUTS`` timeouts are counted, not listed,
    unless ``everyone``."""
    at = time.time() if now is None else now
    with store.snapshot() as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        count = recorded_queue_count(conn)
        leases = _leases(conn, at) if "lease_queues" in tables else {}
        agents = read_agent_statuses(conn, at)
        queues = [_queue(conn, q, leases.get(q), agents) for q in range(count or 0)]
        members = _members(conn) if "membership_workers" in tables else []
        letters = _dead_letters(conn) if "deadletters" in tables else []
    owned: dict[str, list[int]] = {}
    for queue in queues:
        if queue.owner is not None:
            owned.setdefault(queue.owner, []).append(queue.queue)
    workers = [
        WorkerStatus(
            m.worker,
            _state(m, at, suspicion_timeout),
            m.joined_at,
            m.last_heartbeat,
            m.left_at,
            owned.get(m.worker, []),
            m.incarnation,
        )
        for m in members
    ]
    horizon = at - GONE_AFTER_TIMEOUTS * suspicion_timeout
    shown_workers = [w for w in workers if everyone or w.queues or (w.gone_since() or at) > horizon]
    handoff = _handoff(store) if "handoff_streams" in tables else []
    shown = {id(q.agent) for q in queues}
    others = [a for a in agents if id(a) not in shown]
    return ClusterStatus(
        str(store.path),
        at,
        suspicion_timeout,
        count,
        shown_workers,
        queues,
        letters,
        handoff,
        others,
        workers_not_shown=len(workers) - len(shown_workers),
        consumer_types=consumer_type_fates(agents),
    )


def _state(member: MemberRecord, now: float, suspicion_timeout: float) -> WorkerState:
    if member.left_at is not None:
        return "left"
    if not member.is_live(now, suspicion_timeout):
        return "suspected"
    return "stale" if instance_is_dead(member.incarnation) else "live"


def _leases(conn: sqlite3.Connection, now: float) -> dict[int, tuple[str | None, int, float | None]]:
    """queue -> (owner, epoch, expiry) of its lease; owner and expiry ``None`` when free or expired."""
    rows = conn.execute(
        "SELECT queue, owner, epoch, expires_at FROM lease_queues WHERE category = ?", (_DEFAULT_LEASE_CATEGORY,)
    )
    return {
        queue: (owner, epoch, expires) if owner is not None and expires > now else (None, epoch, None)
        for queue, owner, epoch, expires in rows
    }


def _queue(
    conn: sqlite3.Connection,
    number: int,
    lease: tuple[str | None, int, float | None] | None,
    agents: list[AgentStatus],
) -> QueueStatus:
    positions = queue_positions(QueueId(number), conn)
    owner, epoch, expires = lease if lease is not None else (None, None, None)
    # While a queue moves, its old and new owners may both have a fresh row: the owner's wins.
    reports = sorted((a for a in agents if a.queue == number), key=lambda a: (a.worker == owner, a.updated))
    agent = reports[-1] if reports else None
    checkpoint = positions.checkpoint
    lag_events, more = _events_after(conn, number, -1 if checkpoint is None else checkpoint)
    return QueueStatus(
        queue=number,
        owner=owner,
        epoch=epoch,
        lease_expires=expires,
        first_retained=positions.first_retained,
        next_sequence=positions.next_sequence,
        retained=positions.retained,
        checkpoint=checkpoint,
        checkpoint_lag=positions.next_sequence - 1 - (-1 if checkpoint is None else checkpoint),
        agent=agent,
        lag_events=lag_events,
        lag_events_more=more,
    )


def _events_after(conn: sqlite3.Connection, queue: int, checkpoint: int) -> tuple[int, bool]:
    """The events in ``queue``'s data records after ``checkpoint`` (headers only), and
    whether there were more records than :data:`LAG_EVENTS_COUNTED_RECORDS` to count."""
    rows = conn.execute(
        "SELECT payload FROM queue_records WHERE queue = ? AND seq > ? ORDER BY seq LIMIT ?",
        (queue, checkpoint, LAG_EVENTS_COUNTED_RECORDS + 1),
    ).fetchall()
    events = 0
    for (payload,) in rows[:LAG_EVENTS_COUNTED_RECORDS]:
        try:
            container = BatchContainer.decode(payload)
        except DecodeError:
            continue  # not a batch container: no events (the agent dead-letters it)
        if container.kind is BatchKind.DATA:
            events += container.count
    return events, len(rows) > LAG_EVENTS_COUNTED_RECORDS


def _members(conn: sqlite3.Connection) -> list[MemberRecord]:
    rows = conn.execute(
        "SELECT worker, incarnation, joined_at, last_heartbeat, left_at FROM membership_workers ORDER BY worker"
    )
    return [MemberRecord(*row) for row in rows]


def _dead_letters(conn: sqlite3.Connection) -> list[DeadLetterCount]:
    rows = conn.execute("SELECT reason, count(*), count(replayed_at) FROM deadletters GROUP BY reason ORDER BY reason")
    return [DeadLetterCount(*row) for row in rows]


def _handoff(store: EmbeddedStore) -> list[HandoffStatus]:
    # Through the package's lazy attribute: pyarrow loads only for a store with a handoff.
    log = spark_sink.HandoffLog(store, create_tables=False)
    result = []
    for stream in sorted(log.streams()):
        ends, starts = log.end_offsets(stream), log.start_offsets(stream)
        retained = sum(end - starts.get(p, 0) for p, end in ends.items())
        result.append(HandoffStatus(stream, ends, retained))
    return result
