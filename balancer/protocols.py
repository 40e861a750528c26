"""The contracts of the balancer layer: what the agent manager sees of a queue balancer, and
what balancers need from membership and leases (Orleans' ``IStreamQueueBalancer``,
``ISiloStatusOracle`` and ``ILeaseProvider``).

Moving a queue between workers is a hand-off, never an overlap:

1. the old owner's balancer drops the queue from :meth:`QueueBalancer.get_my_queues` and tells
   its listeners (``QueueDistributionChange.removed``) while still holding the queue's lease;
2. the agent manager stops that queue's agent: it stops reading, drains or abandons in-flight
   deliveries within its timeout, checkpoints, then calls :meth:`QueueBalancer.release`;
3. only then is the lease free, and the new owner's balancer can acquire it (a new epoch).

If a lease is lost instead (a renewal was refused, or it expired before one succeeded), the
queue is reported in ``QueueDistributionChange.lost``: its agent must stop at once, and its
checkpoint, if it still tries one, is refused by the epoch fence (see :class:`Lease`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from streams.core.clock import Clock
from streams.core.ids import QueueId


@dataclass(frozen=True, slots=True)
class Lease:
    """A queue's lease row: who holds it, under which epoch, until when.

    Every grant bumps ``epoch`` (rows are never deleted, so epochs only grow); it names one
    tenure of one owner and is the fencing token of that tenure. A free row has
    ``owner=None`` and ``expires_at`` = when it was released.

    **Fencing checkpoints.** An agent writes its checkpoint together with its lease, and the
    write takes effect only while the lease row still names the same owner and epoch. In the
    embedded store both tables live in one SQLite file, so the check is part of the write::

        UPDATE checkpoints SET position = :position
         WHERE queue = :queue
           AND EXISTS (SELECT 1 FROM lease_queues
                        WHERE category = :category AND queue = :queue
                          AND owner = :owner AND epoch = :epoch)

    (``SqliteLeaseProvider.fence_condition`` builds that ``EXISTS`` clause.) No row changed
    means the queue has moved on: the agent stops and does not retry. A store that cannot see
    the lease table keeps the epoch next to the checkpoint and refuses lower ones
    (``WHERE stored_epoch <= :epoch``). Either way a stale owner's late checkpoint can never
    overwrite a newer owner's.

    >>> lease = Lease(QueueId(3), "worker-1", epoch=7, expires_at=160.0)
    >>> lease.is_held_at(100.0), lease.is_held_at(160.0)
    (True, False)
    """

    queue: QueueId
    owner: str | None
    epoch: int
    expires_at: float

    def is_held_at(self, now: float) -> bool:
        """Whether someone holds the lease at ``now`` (expiry is exclusive)."""
        return self.owner is not None and now < self.expires_at


@dataclass(slots=True)
class Tenure:
    """This worker's hold on one lease, by its own clock: held while ``clock.monotonic()`` is
    below ``held_until``. The balancer moves ``held_until`` on at each renewal and to
    ``-inf`` once the lease is lost or released, so a reader checks it on every read with a
    comparison, asking nobody. A new grant (a new epoch) is a new tenure.

    >>> from streams.core.clock import ManualClock
    >>> clock = ManualClock()
    >>> tenure = Tenure(Lease(QueueId(0), "w1", 1, expires_at=60.0), held_until=60.0, clock=clock)
    >>> tenure.held()
    True
    >>> clock.advance(60.0)
    >>> tenure.held()
    False
    """

    lease: Lease
    held_until: float  # by clock.monotonic()
    clock: Clock

    def held(self) -> bool:
        return self.clock.monotonic() < self.held_until

    def end(self) -> None:
        """The lease is gone: a reader of this tenure reads no more."""
        self.held_until = -math.inf


class LeaseProvider(Protocol):
    """Grants, renews and frees queue leases, atomically per call (Orleans' ``ILeaseProvider``).

    Rules: ``acquire`` succeeds only on a free or expired lease, and bumps its epoch;
    ``renew`` succeeds only for the holder with the same epoch, before expiry; ``release``
    frees the lease only for the holder with the same epoch.
    """

    async def acquire(
        self,
        queues: Sequence[QueueId],
        owner: str,
        length: float,
        *,
        limit: int | None = None,
        reclaim: bool = False,
    ) -> list[Lease]:
        """Try ``queues`` in order and grant ``owner`` the free ones, at most ``limit`` of
        them; return the granted leases, in the order tried. With ``reclaim``, also those
        still held under ``owner``'s name (by a dead predecessor of that name)."""
        ...

    async def renew(self, leases: Sequence[Lease], length: float) -> list[Lease]:
        """Extend the given leases by ``length`` from now; a lease missing from the result
        could not be renewed and is lost."""
        ...

    async def release(self, leases: Sequence[Lease]) -> None:
        """Free the given leases (those still held under the same epoch)."""
        ...


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One worker's row in the membership table.

    ``incarnation`` identifies the process that joined under the name, so a stale process
    cannot heartbeat on behalf of its successor. ``joined_at`` starts the maturity period.
    """

    worker: str
    incarnation: str
    joined_at: float
    last_heartbeat: float
    left_at: float | None = None

    def is_live(self, now: float, suspicion_timeout: float) -> bool:
        """Joined, not left, and heard from within ``suspicion_timeout`` seconds.

        >>> record = MemberRecord("w1", "i1", joined_at=0.0, last_heartbeat=10.0)
        >>> record.is_live(40.0, 30.0), record.is_live(40.5, 30.0)
        (True, False)
        """
        return self.left_at is None and now - self.last_heartbeat <= suspicion_timeout


@dataclass(frozen=True, slots=True)
class MembershipSnapshot:
    """Every known worker (live or not) as the membership table showed them at ``taken_at``."""

    members: Mapping[str, MemberRecord]
    taken_at: float
    suspicion_timeout: float

    def is_live(self, worker: str) -> bool:
        record = self.members.get(worker)
        return record is not None and record.is_live(self.taken_at, self.suspicion_timeout)

    def live_members(self) -> list[MemberRecord]:
        """The live members, most senior first (earliest ``joined_at``, then by name)."""
        live = [r for r in self.members.values() if r.is_live(self.taken_at, self.suspicion_timeout)]
        return sorted(live, key=lambda r: (r.joined_at, r.worker))


class MembershipOracle(Protocol):
    """Who is alive: workers join under unique names, heartbeat, and leave
    (Orleans' ``ISiloStatusOracle`` and membership table).

    A worker missing heartbeats for longer than the oracle's suspicion timeout is dead to
    everyone else; its name is free again. ``join`` is re-entrant for one oracle object (the
    balancers of several providers in one worker may share it; the last ``leave`` counts).
    """

    async def join(self, worker: str) -> MemberRecord:
        """Register ``worker`` as live now.

        Raises ``WorkerNameInUseError`` while another process's member of that name is live.
        """
        ...

    async def heartbeat(self, worker: str) -> MemberRecord:
        """Tell the others ``worker`` is alive. A worker that had been declared dead comes
        back as newly joined (its maturity starts again).

        Raises ``WorkerNameInUseError`` if another process has since joined under the name.
        """
        ...

    async def leave(self, worker: str) -> None:
        """Leave gracefully: the others stop counting ``worker`` at once."""
        ...

    async def snapshot(self) -> MembershipSnapshot:
        """Every known member, read in one go."""
        ...


@dataclass(frozen=True, slots=True)
class QueueDistributionChange:
    """What changed in the queues a worker owns.

    - ``added``: start an agent (read from the checkpoint, under the lease's epoch).
    - ``removed``: the lease is still held: stop reading, drain, checkpoint, then call
      :meth:`QueueBalancer.release`.
    - ``lost``: the lease is already gone: stop the agent at once; any checkpoint it still
      writes is refused by the epoch fence. Call ``release`` too (it is then a no-op).

    >>> change = QueueDistributionChange.between(
    ...     frozenset({QueueId(0), QueueId(1)}), frozenset({QueueId(1), QueueId(2)}))
    >>> sorted(q.number for q in change.added), sorted(q.number for q in change.removed)
    ([2], [0])
    """

    owned: frozenset[QueueId]
    added: frozenset[QueueId] = field(default_factory=frozenset)
    removed: frozenset[QueueId] = field(default_factory=frozenset)
    lost: frozenset[QueueId] = field(default_factory=frozenset)

    @classmethod
    def between(
        cls,
        before: frozenset[QueueId],
        after: frozenset[QueueId],
        lost: frozenset[QueueId] = frozenset(),
    ) -> QueueDistributionChange:
        return cls(after, after - before, before - after - lost, lost)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.lost)


QueueDistributionListener = Callable[[QueueDistributionChange], Awaitable[None]]
"""Called (and awaited) after every change of the owned queues."""


class QueueBalancer(Protocol):
    """Decides which queues this worker's pulling agents read (Orleans'
    ``IStreamQueueBalancer``).

    Use::

        await balancer.initialize("worker-1", mapper.get_all_queues())
        balancer.subscribe(manager.on_queue_distribution_change)
        for queue in balancer.get_my_queues(): ...          # start agents
        tg.start_soon(balancer.run)                         # renewals, heartbeats, rebalancing
        ...
        await balancer.shutdown()                           # after the agents have stopped
    """

    async def initialize(self, worker: str, queues: Sequence[QueueId]) -> None:
        """Join (where membership applies) and take a first share of ``queues``; listeners
        already subscribed hear about it."""
        ...

    def get_my_queues(self) -> frozenset[QueueId]:
        """The queues this worker should read now (empty before ``initialize``)."""
        ...

    def subscribe(self, listener: QueueDistributionListener) -> None:
        """Call ``listener`` after every change of :meth:`get_my_queues`.

        The next round (and so every lease renewal) waits for the listener: keep it quick,
        run drains in the manager's task group and call :meth:`release` when each is done
        (calling the balancer from inside the listener is fine).
        """
        ...

    def unsubscribe(self, listener: QueueDistributionListener) -> None: ...

    async def run(self) -> None:
        """Keep the share up to date until cancelled or shut down: heartbeats, lease
        renewals, rebalancing. Start it in the worker's task group after ``initialize``."""
        ...

    async def release(self, queue: QueueId) -> None:
        """Hand ``queue`` back: call it once its agent has drained and checkpointed."""
        ...

    async def shutdown(self) -> None:
        """Stop ``run``, release every lease at once and leave membership (listeners are
        not told). Call it after the agents have stopped."""
        ...
