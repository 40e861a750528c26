"""A cluster's status, read from its embedded store: what ``headrace status`` shows.

Everything comes from the tables the runtime keeps anyway (membership, leases, queue heads,
checkpoints, dead letters, the handoff log), plus the rows workers write about their agents
(:mod:`streams.runtime.status_reporter`): cache fill, pressure, watermarks. Reading writes nothing,
and a table a store does not have yet (no worker ran, nothing was dead-lettered) reads empty.

>>> import tempfile
>>> from streams.embedded.store import EmbeddedStore
>>> status = read_status(EmbeddedStore(tempfile.mkdtemp()), suspicion_timeout=30.0)
>>> status.queue_count, status.workers, status.dead_letters
(None, [], [])
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import spark_sink
from balancer.instances import instance_is_dead
from balancer.protocols import MemberRecord
from streams.core.batch import BatchContainer, BatchKind
from streams.core.errors import DecodeError
from streams.core.ids import QueueId
from streams.embedded.queues import queue_positions, recorded_queue_count
from streams.embedded.store import EmbeddedStore
from streams.runtime.status_reporter import AgentStatus, read_agent_statuses

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

    >>> from streams.runtime.status_reporter import AgentStatus
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
        """Plain JSON types (partitions as string keys, as JSON needs)."""
        data = asdict(self)
        for item in data["handoff"]:
            item["end_offsets"] = {str(p): o for p, o in item["end_offsets"].items()}
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
