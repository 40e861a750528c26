"""What every queue balancer shares: the lifecycle, the maintenance round, notifications
(Orleans' ``QueueBalancerBase``). A balancer only says what it wants in :meth:`_rebalance`.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from balancer.leases import DEFAULT_LEASE_LENGTH, DEFAULT_RENEW_PERIOD, MemoryLeaseProvider, QueueOwnership
from balancer.protocols import (
    LeaseProvider,
    MembershipOracle,
    MembershipSnapshot,
    QueueDistributionChange,
    QueueDistributionListener,
    Tenure,
)
from streams.core.clock import Clock, StepWatch, WallClock
from streams.core.errors import ConfigurationError, WorkerNameInUseError
from streams.core.ids import QueueId

log = logging.getLogger("headrace.balancer")


@dataclass(frozen=True, slots=True)
class BalancerOptions:
    """Timing shared by every balancer (Orleans' ``LeaseBasedQueueBalancerOptions``).

    - ``lease_length``: how long a lease lasts unless renewed (a dead worker's queues wait
      at most this long for a new owner).
    - ``renew_period``: how long after its last grant a lease is renewed; under half the
      length, so a failed renewal can be tried again before expiry.
    - ``refresh_period``: how often :meth:`QueueBalancerBase.run` does a round (heartbeat,
      renewals, rebalancing); a newly freed queue is picked up within one round.

    >>> BalancerOptions(lease_length=10, renew_period=4, refresh_period=1).lease_length
    10
    """

    lease_length: float = DEFAULT_LEASE_LENGTH
    renew_period: float = DEFAULT_RENEW_PERIOD
    refresh_period: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_period < self.lease_length:
            raise ConfigurationError(
                f"renew_period ({self.renew_period!r} s) must be positive and shorter than "
                f"lease_length ({self.lease_length!r} s), or leases expire between renewals"
            )
        if not 0 < self.refresh_period <= self.renew_period:
            raise ConfigurationError(
                f"refresh_period ({self.refresh_period!r} s) must be positive and at most "
                f"renew_period ({self.renew_period!r} s), or renewals come late"
            )

    @property
    def suspicion_timeout(self) -> float:
        """How long a worker of an embedded store may stay silent before the others count it
        dead: half a lease, and at least three balancing rounds.

        >>> BalancerOptions(lease_length=10, renew_period=4, refresh_period=1).suspicion_timeout
        5.0
        """
        return max(self.lease_length / 2, 3 * self.refresh_period)


class QueueBalancerBase(abc.ABC):
    """A :class:`~balancer.protocols.QueueBalancer` whose queues are held under leases.

    Each round (:meth:`tick`, every ``options.refresh_period`` in :meth:`run`): heartbeat the
    membership, renew the leases that are due, let the subclass rebalance, and tell the
    listeners what changed. Rounds, releases and shutdown never interleave.

    Without a ``lease_provider`` the leases live in this process only
    (:class:`~balancer.leases.MemoryLeaseProvider`): enough for one process, not for several.
    """

    def __init__(
        self,
        *,
        lease_provider: LeaseProvider | None = None,
        membership: MembershipOracle | None = None,
        clock: Clock | None = None,
        options: BalancerOptions | None = None,
    ) -> None:
        self._clock = clock or WallClock()
        self._steps = StepWatch(self._clock)  # a step of the wall clock: said once a round
        self._leases = lease_provider or MemoryLeaseProvider(clock=self._clock)
        self._membership = membership
        self.options = options or BalancerOptions()
        self._ownership: QueueOwnership | None = None
        self._worker = ""
        self._queues: tuple[QueueId, ...] = ()
        self._listeners: list[QueueDistributionListener] = []
        self._lock = anyio.Lock()
        self._run_scope: anyio.CancelScope | None = None
        self._closed = False

    # -- what subclasses say --------------------------------------------------------------

    @abc.abstractmethod
    async def _rebalance(self, ownership: QueueOwnership) -> None:
        """Move ``ownership`` toward this balancer's share (acquire, relinquish)."""

    def _check_worker(self, worker: str) -> None:
        """Refuse (with ``ConfigurationError``) a worker this balancer cannot serve;
        subclasses add their own checks to this one."""
        if not isinstance(worker, str) or not worker:
            raise ConfigurationError(f"a worker name is a non-empty str, not {worker!r}")

    # -- the QueueBalancer protocol -------------------------------------------------------

    @property
    def worker(self) -> str:
        return self._worker

    @property
    def queues(self) -> tuple[QueueId, ...]:
        """Every queue being balanced, in order."""
        return self._queues

    async def initialize(self, worker: str, queues: Sequence[QueueId]) -> None:
        if self._ownership is not None:
            raise ConfigurationError(f"this balancer is already initialized for {self._worker!r}")
        if not queues:
            raise ConfigurationError("a balancer needs at least one queue to balance")
        self._check_worker(worker)
        reclaim = False
        if self._membership is not None:
            before = (await self._membership.snapshot()).members.get(worker)
            joined = await self._membership.join(worker)
            # Let in under a name another process holds without having left: that process
            # is dead (the membership says so), and its leases are this worker's to take back.
            reclaim = before is not None and before.left_at is None and before.incarnation != joined.incarnation
        self._worker = worker
        self._queues = tuple(sorted(set(queues)))
        self._ownership = QueueOwnership(
            self._leases,
            worker,
            clock=self._clock,
            lease_length=self.options.lease_length,
            renew_period=self.options.renew_period,
        )
        self._ownership.reclaim = reclaim
        try:
            await self.tick()
        finally:
            self._ownership.reclaim = False

    def get_my_queues(self) -> frozenset[QueueId]:
        return self._ownership.owned if self._ownership is not None else frozenset()

    def get_tenure(self, queue: QueueId) -> Tenure | None:
        """This worker's tenure on ``queue`` (see :class:`~balancer.protocols.Tenure`): what a
        reader checks before every read."""
        return self._ownership.tenure(queue) if self._ownership is not None else None

    def subscribe(self, listener: QueueDistributionListener) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def unsubscribe(self, listener: QueueDistributionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def tick(self) -> QueueDistributionChange:
        """One maintenance round; returns (and tells the listeners) what changed.

        If this worker has lost its membership (another process took the name over), every
        queue is reported lost, the leases are freed, and :class:`WorkerNameInUseError` is
        raised: this worker must stop.
        """
        try:
            async with self._lock:
                change = await self._round(self._require_ownership())
        except WorkerNameInUseError:
            await self._notify(await self._drop_everything())
            raise
        await self._notify(change)
        return change

    async def run(self) -> None:
        """Run :meth:`tick` every ``options.refresh_period`` until cancelled or shut down. A failed
        round is logged and the next one tries again (a lease past its expiry is dropped
        without asking the store, so no queue is read under a lease that may have moved on);
        losing the worker name ends the loop with :class:`WorkerNameInUseError`."""
        self._require_ownership()
        with anyio.CancelScope() as scope:
            self._run_scope = scope
            while not self._closed:
                await self._clock.sleep(self.options.refresh_period)
                try:
                    await self.tick()
                except WorkerNameInUseError:
                    raise
                except Exception:
                    log.exception("%s: balancing round failed; trying again", self._worker)

    async def release(self, queue: QueueId) -> None:
        async with self._lock:
            if self._ownership is not None:
                await self._ownership.release(queue)

    async def shutdown(self) -> None:
        if self._run_scope is not None:
            self._run_scope.cancel()
        async with self._lock:
            if self._closed or self._ownership is None:
                self._closed = True
                return
            self._closed = True
            await self._ownership.release_all()
            if self._membership is not None:
                await self._membership.leave(self._worker)

    # -- helpers --------------------------------------------------------------------------

    async def _membership_snapshot(self) -> MembershipSnapshot:
        assert self._membership is not None, "this balancer was built without membership"
        return await self._membership.snapshot()

    def _require_ownership(self) -> QueueOwnership:
        if self._ownership is None:
            raise ConfigurationError("call initialize(worker, queues) before using the balancer")
        return self._ownership

    async def _round(self, ownership: QueueOwnership) -> QueueDistributionChange:
        if self._closed:
            return QueueDistributionChange(frozenset())
        self._steps.check()  # says a step of the wall clock in the log
        before = ownership.owned
        if self._membership is not None:
            await self._membership.heartbeat(self._worker)
        lost = await ownership.renew_due()
        await self._rebalance(ownership)
        return QueueDistributionChange.between(before, ownership.owned, lost)

    async def _drop_everything(self) -> QueueDistributionChange:
        # No longer a member: every agent stops now; there is no orderly hand-over.
        async with self._lock:
            ownership = self._require_ownership()
            self._closed = True
            lost = ownership.owned | ownership.releasing
            await ownership.release_all()
        return QueueDistributionChange(frozenset(), lost=lost)

    async def _notify(self, change: QueueDistributionChange) -> None:
        if not change:
            return
        log.info(
            "%s owns %d queues (+%d, -%d, lost %d)",
            self._worker,
            len(change.owned),
            len(change.added),
            len(change.removed),
            len(change.lost),
        )
        for listener in list(self._listeners):
            await listener(change)
