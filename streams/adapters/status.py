"""What ``headrace status`` shows, whatever the backend: each pulling agent's status as its
worker publishes it to a :class:`StatusBoard`, and a cluster's status as read back.

Cache fill, pressure and watermarks live only in a worker's memory: the worker's
:class:`~streams.runtime.status.StatusReporter` publishes one :class:`AgentStatus` per pulling
agent to its backend's board every ``interval`` seconds, replacing that worker's, and removes
them when the worker stops. Each says until when it is fresh (three intervals), so a reader can
tell a worker that stopped reporting (it died) from one that reports. It also carries the
events in and out per second over the last interval and the consumers furthest behind on the
queue. Each backend keeps the board and reads a :class:`ClusterStatus` back its own way: the
embedded store (:mod:`streams.backends.embedded.status`) and Kafka
(:mod:`streams.backends.kafka.status`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, astuple, dataclass, field, fields, replace
from typing import Any, Literal, Protocol

from streams.eventtime.lateness import ObservedTimes

FRESH_FOR = 3  # a row stays fresh for this many reporting intervals


@dataclass(frozen=True, slots=True)
class CursorLag:
    """A consumer behind on its stream: ``behind`` records of its queue were read after the
    next one it is to be given (``next_sequence``)."""

    stream: str
    subscription: str
    next_sequence: int
    behind: int


@dataclass(frozen=True, slots=True)
class CheckpointHolder:
    """What holds a queue's checkpoint back: the oldest position its agent still needs
    (``sequence``) and who needs it. An activation (``consumer_type`` on ``stream``) holds
    it for ``why`` (open windows, held events, an emit in flight, events since its last
    save), with several inputs for the event of ``input``; or a consumer behind holds it
    (``subscription`` on ``stream``, ``why`` ``"behind"``).

    >>> CheckpointHolder(41, "tolls/a", "app.Priced", None, "prices", "held events").text()
    'app.Priced on tolls/a at 41: held events of input prices'
    >>> CheckpointHolder(7, "stuck/s1", None, "implicit:app.Slow", None, "behind").text()
    'implicit:app.Slow on stuck/s1 at 7: behind'
    """

    sequence: int
    stream: str
    consumer_type: str | None
    subscription: str | None
    input: str | None
    why: str

    def text(self) -> str:
        who = self.consumer_type or self.subscription or "?"
        of = f" of input {self.input}" if self.input is not None else ""
        return f"{who} on {self.stream} at {self.sequence:,}: {self.why}{of}"

    @classmethod
    def of(cls, data: object) -> CheckpointHolder | None:
        """From its JSON (or msgpack) form; None for none, or one that does not read (a row
        of another version)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{f.name: data[f.name] for f in fields(cls)})
        except (KeyError, TypeError):
            return None


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
    consumers furthest behind (:class:`CursorLag`); ``fates``:
    per consumer type, what event time did to its events on this queue since the agent started
    (:func:`~streams.runtime.snapshot.fates_of`). ``failed``: why the queue cannot be
    read on, its agent stopped (``None``: reading). ``observed``: per consumer type, the
    lateness and disorder of a sample of its events on this queue over the last hour
    (:class:`~streams.eventtime.lateness.ObservedTimes`). ``input_watermarks``: among
    activations with several inputs, the lowest watermark of each input (``None``: none yet). ``clock_steps``: how many times
    its worker's wall clock stepped against the monotonic one (over a second) since the
    worker started, ``clock_step`` the last step's size in seconds (either way) and
    ``clock_step_at`` the wall time it was seen at (``None``: none seen).
    ``checkpoint_holder``: what holds the queue's checkpoint back (:class:`CheckpointHolder`;
    ``None``: nothing, every position read is acknowledged or about to be).
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
    input_watermarks: dict[str, float | None] = field(default_factory=dict)
    clock_steps: int = 0
    clock_step: float = 0.0
    clock_step_at: float | None = None
    checkpoint_holder: CheckpointHolder | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> AgentStatus:
        values = dict(zip(AGENT_FIELDS, row))
        values["under_pressure"] = bool(values["under_pressure"])  # SQLite keeps 0 or 1
        values["slowest"] = [CursorLag(**lag) for lag in json.loads(values["slowest"])]
        values["fates"] = json.loads(values["fates"])
        values["observed"] = observed_of(json.loads(values["observed"]))
        values["input_watermarks"] = json.loads(values["input_watermarks"])
        holder = values["checkpoint_holder"]
        values["checkpoint_holder"] = None if holder is None else CheckpointHolder.of(json.loads(holder))
        return cls(**values)

    def as_row(self) -> tuple[Any, ...]:
        row = dict(zip(AGENT_FIELDS, astuple(self)))
        row["slowest"] = json.dumps([asdict(lag) for lag in self.slowest])
        row["fates"] = json.dumps(self.fates)
        row["observed"] = json.dumps({name: asdict(seen) for name, seen in self.observed.items()})
        row["input_watermarks"] = json.dumps(self.input_watermarks)
        holder = self.checkpoint_holder
        row["checkpoint_holder"] = None if holder is None else json.dumps(asdict(holder))
        return tuple(row[name] for name in AGENT_FIELDS)


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


AGENT_FIELDS = [f.name for f in fields(AgentStatus)]  # in the order of a status row


class StatusBoard(Protocol):
    """Where workers publish their agents' status for ``headrace status`` to read."""

    async def publish(self, worker: str, statuses: list[AgentStatus], taken_at: float, fresh_until: float) -> None:
        """Replace ``worker``'s status with ``statuses``, taken at ``taken_at`` and to be
        taken for current until ``fresh_until``."""
        ...

    async def clear(self, worker: str) -> None:
        """Remove ``worker``'s status (it stops: its agents are gone)."""
        ...


WorkerState = Literal["live", "stale", "suspected", "left"]
# A worker that left, or went silent, this many suspicion timeouts ago is long gone: not shown
# unless asked for (`headrace status --all`).
GONE_AFTER_TIMEOUTS = 10


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A member of the cluster: ``live`` (heard from within the suspicion timeout),
    ``stale`` (heard from lately, but its process on this machine is gone: it was stopped
    hard, and a restart under its name takes over at once), ``suspected`` (silent for longer
    than the timeout: dead to the others) or ``left`` (left gracefully). ``instance`` is the
    process that joined under the name (``host/pid/nonce``). ``clock_steps``,
    ``clock_step`` and ``clock_step_at``: its wall clock's steps, as its last status rows
    say (:class:`AgentStatus`)."""

    name: str
    state: WorkerState
    joined_at: float
    last_heartbeat: float
    left_at: float | None
    queues: list[int]
    instance: str = ""
    clock_steps: int = 0
    clock_step: float = 0.0
    clock_step_at: float | None = None

    def with_clock_steps(self, agents: Iterable[AgentStatus]) -> WorkerStatus:
        """This worker with the wall-clock steps its agents' rows report (its own rows only,
        the freshest; unchanged without any).

        >>> w = WorkerStatus("w", "live", 0.0, 9.0, None, [0])
        >>> row = AgentStatus("w", 0, 0, 1, False, 1, 1, 0, None, None, 9.0, 24.0,
        ...                   clock_steps=2, clock_step=-600.0, clock_step_at=5.0)
        >>> stepped = w.with_clock_steps([row])
        >>> stepped.clock_steps, stepped.clock_step, stepped.clock_step_at
        (2, -600.0, 5.0)
        """
        own = [a for a in agents if a.worker == self.name]
        if not own:
            return self
        latest = max(own, key=lambda a: a.updated)
        return replace(
            self,
            clock_steps=latest.clock_steps,
            clock_step=latest.clock_step,
            clock_step_at=latest.clock_step_at,
        )

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
    in them, counted up to :data:`~streams.backends.embedded.status.LAG_EVENTS_COUNTED_RECORDS` records: ``lag_events_more``
    says there are more; ``None``: not counted, on a Kafka topic of headrace's records;
    ``lag_seconds``: how long ago the oldest record not acknowledged was written (on Kafka,
    its record timestamp), 0 with none, ``None`` where the backend does not tell)."""

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
    lag_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterCount:
    reason: str
    count: int
    replayed: int


@dataclass(frozen=True, slots=True)
class HandoffStatus:
    """A Spark handoff stream: the offset the next append takes, per partition (``end_offsets``,
    the rows appended), the first offset still retained (``start_offsets``) and the rows
    between (``retained``); and where Spark is: the offsets its query last committed
    (``committed_offsets``: everything below them read and committed, per partition), when
    (``committed_at``, POSIX s) and the rows appended past them (``behind``). All three are
    ``None`` until a streaming query has committed (:mod:`spark_sink.datasource` records it;
    several queries reading one stream: the latest commit of any of them)."""

    stream: str
    end_offsets: dict[int, int]
    retained: int
    start_offsets: dict[int, int] = field(default_factory=dict)
    committed_offsets: dict[int, int] | None = None
    committed_at: float | None = None
    behind: int | None = None

    @classmethod
    def of(
        cls,
        stream: str,
        starts: Mapping[int, int],
        ends: Mapping[int, int],
        committed: Mapping[int, int] | None = None,
        committed_at: float | None = None,
    ) -> HandoffStatus:
        """The status of ``stream`` from its offsets and Spark's last commit (if any).

        >>> h = HandoffStatus.of("avg", {0: 2, 1: 0}, {0: 10, 1: 4}, {0: 8}, 5.0)
        >>> h.retained, h.committed_offsets, h.behind
        (12, {0: 8, 1: 0}, 6)
        """
        retained = sum(end - starts.get(p, 0) for p, end in ends.items())
        if committed is None:
            return cls(stream, dict(ends), retained, {p: starts.get(p, 0) for p in ends})
        marks = {p: min(committed.get(p, 0), end) for p, end in ends.items()}
        behind = sum(end - marks[p] for p, end in ends.items())
        return cls(stream, dict(ends), retained, {p: starts.get(p, 0) for p in ends}, marks, committed_at, behind)


@dataclass(frozen=True, slots=True)
class ConsumerTypeFates:
    """What event time did to the events of one consumer type, summed over the queues of the
    workers reporting (since each agent started, with the state it took over): every event
    seen, adjusted into another time, dropped by the ordering policy, dead-lettered by the core;
    and what it emitted: windows' final results, the updates before them (``emit=Every``) and
    an interval join's results. ``events_out``: the events its queues delivered to its
    consumers, plain or event-time (a queue's events out, per type; since each agent started)."""

    consumer_type: str
    events: int
    adjusted: int
    dropped: int
    dead_lettered: int
    windows_emitted: int = 0
    early_results: int = 0
    joins_emitted: int = 0
    events_out: int = 0


def consumer_type_fates(agents: list[AgentStatus]) -> list[ConsumerTypeFates]:
    """The fates per consumer type of these agents' rows, by type name.

    >>> from streams.adapters.status import AgentStatus
    >>> fates = {"events": 83, "adjusted": 31, "dropped": 0, "dead_lettered": 2, "windows_emitted": 5}
    >>> row = AgentStatus("w", 0, 0, 1, False, 1, 1, 0, None, None, 0.0, 1.0, fates={"app.Totals": fates})
    >>> consumer_type_fates([row, row])  # doctest: +NORMALIZE_WHITESPACE
    [ConsumerTypeFates(consumer_type='app.Totals', events=166, adjusted=62, dropped=0, dead_lettered=4,
                       windows_emitted=10, early_results=0, joins_emitted=0, events_out=0)]
    """
    totals: dict[str, dict[str, int]] = {}
    for agent in agents:
        for name, fates in agent.fates.items():
            into = totals.setdefault(name, {})
            for fate, n in fates.items():
                into[fate] = into.get(fate, 0) + n
    counted = [f.name for f in fields(ConsumerTypeFates)][1:]
    return [ConsumerTypeFates(name, *(t.get(k, 0) for k in counted)) for name, t in sorted(totals.items())]


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
    consumer_types: list[ConsumerTypeFates] = field(default_factory=list)  # fates and events out, per type
    kind: str = "store"  # "store": an embedded store; "cluster": a Kafka cluster (streams.backends.kafka.status)
    group_members: list[str] | None = None  # on Kafka: the workers' consumer group's members

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types (partitions as string keys, as JSON needs); each agent's observed
        times also as their quantiles (``"quantiles": {"lateness": {"p50": ...}, ...}``, null
        where none was sampled: JSON has no NaN)."""
        data = asdict(self)
        for item in data["handoff"]:
            for offsets in ("end_offsets", "start_offsets", "committed_offsets"):
                if item[offsets] is not None:
                    item[offsets] = {str(p): o for p, o in item[offsets].items()}
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
