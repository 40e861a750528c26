"""The status board in the embedded store (table ``status_agents``, a row per pulling agent), and
a cluster's status read back from the store: what ``headrace status`` shows.

Everything comes from the tables the runtime keeps anyway (membership, leases, queue heads,
checkpoints, dead letters, the handoff log), plus the rows workers write about their agents:
cache fill, pressure, watermarks. Reading writes nothing, and a table a store does not have
yet (no worker ran, nothing was dead-lettered) reads empty.

>>> import tempfile
>>> from streams.backends.embedded.store import EmbeddedStore
>>> status = read_status(EmbeddedStore(tempfile.mkdtemp()), suspicion_timeout=30.0)
>>> status.queue_count, status.workers, status.dead_letters
(None, [], [])
"""

from __future__ import annotations

import sqlite3

from balancer.membership import instance_is_dead
from balancer.protocols import MemberRecord
from streams.adapters.status import (
    AGENT_FIELDS,
    GONE_AFTER_TIMEOUTS,
    AgentStatus,
    ClusterStatus,
    DeadLetterCount,
    HandoffStatus,
    QueueStatus,
    WorkerState,
    WorkerStatus,
    consumer_type_fates,
)
from streams.backends.embedded import spark_commits
from streams.backends.embedded.queue_tables import queue_positions, recorded_queue_count
from streams.backends.embedded.store import EmbeddedStore, Schema
from streams.core.batch import BatchContainer, BatchKind
from streams.core.clock import wall_time
from streams.core.errors import DecodeError
from streams.core.ids import QueueId

STATUS_SCHEMA: Schema = [
    "CREATE TABLE status_agents("
    " worker TEXT NOT NULL, queue INTEGER NOT NULL,"
    " cache_size INTEGER NOT NULL, cache_max INTEGER NOT NULL, under_pressure INTEGER NOT NULL,"
    " streams INTEGER NOT NULL, read_messages INTEGER NOT NULL, read_failures INTEGER NOT NULL,"
    " watermark_min REAL, watermark_delay REAL,"
    " updated REAL NOT NULL, fresh_until REAL NOT NULL,"
    " held_by TEXT,"  # the input holding a merged watermark back
    " slowest_substreams TEXT,"  # the substreams furthest behind
    " events_in INTEGER NOT NULL DEFAULT 0, events_out INTEGER NOT NULL DEFAULT 0,"
    " events_in_per_s REAL, events_out_per_s REAL, slowest TEXT NOT NULL DEFAULT '[]',"
    " fates TEXT NOT NULL DEFAULT '{}',"  # event fates per consumer type
    " failed TEXT,"  # why a queue cannot be read on
    " observed TEXT NOT NULL DEFAULT '{}',"  # per consumer type, sampled lateness and disorder over the last hour
    " input_watermarks TEXT NOT NULL DEFAULT '{}',"  # per input of activations with several, its lowest watermark
    # the worker's wall-clock steps: how many, the last one's size and when
    " clock_steps INTEGER NOT NULL DEFAULT 0, clock_step REAL NOT NULL DEFAULT 0, clock_step_at REAL,"
    " checkpoint_holder TEXT,"  # what holds the queue's checkpoint back (JSON), or NULL
    " PRIMARY KEY (worker, queue))",
]

COLUMNS = ", ".join(AGENT_FIELDS)
_DEFAULT_LEASE_CATEGORY = "default"  # the embedded store's balancer's leases
# Counting the events behind a checkpoint reads each record's header (about a microsecond
# each); beyond this many records per queue, status says "more than".
LAG_EVENTS_COUNTED_RECORDS = 100_000


def read_agent_statuses(conn: sqlite3.Connection, now: float) -> list[AgentStatus]:
    """The fresh rows of ``status_agents`` (none if no worker ever reported), by queue."""
    made = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'status_agents'").fetchone()
    if not made:
        return []
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM status_agents WHERE fresh_until >= ? ORDER BY queue, worker", (now,)
    ).fetchall()
    return [AgentStatus.from_row(row) for row in rows]


class EmbeddedStatusBoard:
    """The status board in the embedded store: table ``status_agents``, a row per agent."""

    def __init__(self, store: EmbeddedStore) -> None:
        store.require_schema("status", STATUS_SCHEMA)
        self.store = store

    async def publish(self, worker: str, statuses: list[AgentStatus], taken_at: float, fresh_until: float) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM status_agents WHERE worker = ?", (worker,))
            marks = ", ".join("?" for _ in AGENT_FIELDS)
            conn.executemany(f"INSERT INTO status_agents({COLUMNS}) VALUES ({marks})", [s.as_row() for s in statuses])

        await self.store.write(write)

    async def clear(self, worker: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:  # no cursor leaves the store's worker thread
            conn.execute("DELETE FROM status_agents WHERE worker = ?", (worker,))

        await self.store.write(delete)


def read_status(
    store: EmbeddedStore, *, suspicion_timeout: float, now: float | None = None, everyone: bool = False
) -> ClusterStatus:
    """The status of the cluster on ``store``; workers silent for more than
    ``suspicion_timeout`` seconds are ``suspected`` (use ``BalancerOptions.suspicion_timeout``).
    Workers gone for more than ``GONE_AFTER_TIMEOUTS`` timeouts are counted, not listed,
    unless ``everyone``."""
    at = wall_time() if now is None else now
    with store.snapshot() as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        count = recorded_queue_count(conn)
        leases = _leases(conn, at) if "lease_queues" in tables else {}
        agents = read_agent_statuses(conn, at)
        reported = read_agent_statuses(conn, float("-inf"))  # stale rows too: a worker's clock steps
        queues = [_queue(conn, q, leases.get(q), agents, at) for q in range(count or 0)]
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
        ).with_clock_steps(reported)
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
    now: float,
) -> QueueStatus:
    positions = queue_positions(QueueId(number), conn)
    owner, epoch, expires = lease if lease is not None else (None, None, None)
    # While a queue moves, its old and new owners may both have a fresh row: the owner's wins.
    reports = sorted((a for a in agents if a.queue == number), key=lambda a: (a.worker == owner, a.updated))
    agent = reports[-1] if reports else None
    checkpoint = positions.checkpoint
    lag_events, more, oldest = _events_after(conn, number, -1 if checkpoint is None else checkpoint)
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
        lag_seconds=0.0 if oldest is None else max(0.0, now - oldest),
    )


def _events_after(conn: sqlite3.Connection, queue: int, checkpoint: int) -> tuple[int, bool, float | None]:
    """The events in ``queue``'s data records after ``checkpoint`` (headers only), whether
    there were more records than :data:`LAG_EVENTS_COUNTED_RECORDS` to count, and when the
    oldest of those records was written (None: there is none)."""
    rows = conn.execute(
        "SELECT payload, enqueued FROM queue_records WHERE queue = ? AND seq > ? ORDER BY seq LIMIT ?",
        (queue, checkpoint, LAG_EVENTS_COUNTED_RECORDS + 1),
    ).fetchall()
    events = 0
    for payload, _ in rows[:LAG_EVENTS_COUNTED_RECORDS]:
        try:
            container = BatchContainer.decode(payload)
        except DecodeError:
            continue  # not a batch container: no events (the agent dead-letters it)
        if container.kind is BatchKind.DATA:
            events += container.count
    return events, len(rows) > LAG_EVENTS_COUNTED_RECORDS, rows[0][1] if rows else None


def _members(conn: sqlite3.Connection) -> list[MemberRecord]:
    rows = conn.execute(
        "SELECT worker, incarnation, joined_at, last_heartbeat, left_at FROM membership_workers ORDER BY worker"
    )
    return [MemberRecord(*row) for row in rows]


def _dead_letters(conn: sqlite3.Connection) -> list[DeadLetterCount]:
    rows = conn.execute("SELECT reason, count(*), count(replayed_at) FROM deadletters GROUP BY reason ORDER BY reason")
    return [DeadLetterCount(*row) for row in rows]


def _handoff(store: EmbeddedStore) -> list[HandoffStatus]:
    from streams.backends.embedded.handoff_log import HandoffLog  # pyarrow only for a store with a handoff

    log = HandoffLog(store, create_tables=False)
    commits = spark_commits.committed(store)
    result = []
    for stream in sorted(log.streams()):
        offsets, at = commits.get(stream, (None, None))
        result.append(HandoffStatus.of(stream, log.start_offsets(stream), log.end_offsets(stream), offsets, at))
    return result
