"""A queue balancer over Kafka's own group membership: the consumer group says who is alive.

Every worker runs one *membership consumer* subscribed to the topic in a consumer group of
its own (``<group_id>.members.<topic>``: the offsets group ``group_id`` cannot be used, as
Kafka refuses the receivers' commits while a group with live members uses that id). The
group leader assigns the partitions with :class:`~streams.backends.kafka.assignor.BestFitPartitionAssignor`,
so the assignment is headrace's sticky best fit, and Kafka's rebalance protocol carries it.
The membership consumer never reads records: every partition it is given stays paused; the
pulling agents read them through their own receivers.

The hand-off rides on the rebalance. aiokafka rebalances eagerly and awaits the rebalance
listener before it rejoins, and the group's other members wait in their join for it (up to
``rebalance_timeout``). So in ``on_partitions_revoked`` this balancer tells its listeners
every queue is ``removed`` and returns only once the agent manager has released all of them
(agents stopped, deliveries drained, offsets committed); the next assignment, to whoever it
goes, starts from those commits. A queue this worker gets back is ``added`` again (its agent
restarts from the commit: every rebalance restarts every agent, the price of the eager
protocol).

aiokafka runs the group protocol (joins, heartbeats, rebalances) in the consumer's own
background task: no ``getmany()`` is needed for it. But a consumer that has not called
``getmany()`` for ``max_poll_interval_ms`` leaves the group, so :meth:`run` calls it (on
paused partitions, it returns at once) every ``poll_period``; it also surfaces the group's
fatal errors, such as a refused authorization.

With ``standby_replicas``, each assignment also names the queues this worker keeps standby
copies of (:mod:`~streams.backends.kafka.standby`); :meth:`KafkaGroupBalancer.run` follows
them, told the new ones with the queues it owns, before any of those is delivered.

If the broker stops recognising this member (its session expired: a long pause, a network
cut), aiokafka resets the member and rejoins. The queues are then reported ``lost``, not
``removed``: others may already read them. The receivers' commits are not fenced by the
group's generation (they use the offsets group), so a member cut off from the coordinator
but still reaching the partitions may read, and commit, until it notices: records are
delivered at least once, never lost.

Example::

    balancer = KafkaGroupBalancer(KafkaSettings("127.0.0.1:9092", "sensors", queues=8))
    manager = AgentManager(adapter, context, cache_factory, balancer)
    await manager.start(task_group, "worker-1", mapper.get_all_queues())
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from balancer.base import BalancerOptions
from balancer.protocols import QueueDistributionChange, QueueDistributionListener
from streams.backends.kafka.assignor import BestFitPartitionAssignor
from streams.backends.kafka.clients import is_transient, stop_client
from streams.backends.kafka.rejoin import Incarnation, Notes, recall, rejoin_as, remember
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.standby import StandbyReplicas
from streams.core.clock import WALL_CLOCK, StepWatch
from streams.core.errors import ConfigurationError, QueueAdapterError
from streams.core.ids import QueueId

log = logging.getLogger("headrace.balancer")

_NO_MEMBER = JoinGroupRequest.UNKNOWN_MEMBER_ID
_GROUP_COORDINATOR = 0  # FindCoordinator's key type for a consumer group


def membership_group_id(settings: KafkaSettings) -> str:
    """The consumer group the workers of ``settings.topic`` join.

    >>> membership_group_id(KafkaSettings("localhost:9092", "sensors"))
    'headrace.members.sensors'
    """
    return f"{settings.group_id}.members.{settings.topic}"


def group_balancer(
    settings: KafkaSettings,
    options: BalancerOptions | None = None,
    standby: StandbyReplicas | None = None,
    warm_up: Callable[[], Awaitable[object]] | None = None,
    notes: Callable[[], Awaitable[Notes | None]] | None = None,
) -> KafkaGroupBalancer | None:
    """The balancer of the workers reading the topic of ``settings``: they are the members
    of a Kafka consumer group, so one worker alone reads every partition and several share
    them. ``options.lease_length`` is the group's session timeout (how soon a dead worker's
    queues move), its heartbeat comes every ``renew_period`` (at most a third of that) and
    it checks on the group every ``refresh_period``; without ``options`` the session timeout
    is ``settings.session_timeout``. ``None`` when ``group_membership`` is
    off: each worker reads everything. ``standby``: the standby copies this worker keeps
    (``standby_replicas``), followed while the balancer runs; ``warm_up``: what the worker can
    do before it has queues (opening its local state store), done while the group's join waits;
    ``notes``: where this worker notes its membership to rejoin as the same member after a
    crash (:mod:`~streams.backends.kafka.rejoin`).

    >>> settings = KafkaSettings("localhost:9092", "sensors")
    >>> options = BalancerOptions(lease_length=9, renew_period=4, refresh_period=1)
    >>> balancer = group_balancer(settings, options)
    >>> balancer.session_timeout, balancer.heartbeat_interval, balancer.poll_period
    (9, 3.0, 1)
    >>> group_balancer(KafkaSettings("localhost:9092", "sensors", session_timeout=6)).session_timeout
    6
    >>> group_balancer(KafkaSettings("localhost:9092", "sensors", group_membership=False)) is None
    True
    """
    if not settings.group_membership:
        return None
    if options is None:  # the settings' session timeout
        return KafkaGroupBalancer(settings, standby=standby, warm_up=warm_up, notes=notes)
    return KafkaGroupBalancer(
        settings,
        standby=standby,
        warm_up=warm_up,
        notes=notes,
        session_timeout=options.lease_length,
        heartbeat_interval=min(options.renew_period, options.lease_length / 3),
        poll_period=options.refresh_period,
    )


class KafkaGroupBalancer:
    """A :class:`~balancer.protocols.QueueBalancer` whose members are the workers in a Kafka
    consumer group (see the module docstring for the protocol).

    - ``session_timeout``: a worker silent this long (SIGKILL, a hung host) is out of the
      group and its queues move; the broker bounds it (Kafka: 6 s to 30 min by default).
      By default the settings' ``session_timeout``.
    - ``heartbeat_interval``: by default a third of the session timeout.
    - ``rebalance_timeout``: how long the group waits for a worker to hand its queues back
      (drain and commit) during a rebalance; keep it above the provider's ``shutdown_timeout``.
    - ``poll_period``: how often :meth:`run` checks on the membership.
    - ``standby``: the standby copies this worker keeps (:mod:`~streams.backends.kafka.standby`):
      it claims them in its join metadata, is told its standby queues at each assignment, and
      :meth:`run` follows them.
    - ``warm_up``: run beside the first join (see :meth:`initialize`); a failure of it is
      logged and left to the queues' loads, which do the same work again.
    - ``notes``: opens where this worker notes its membership (its local state store), before
      the first join: a worker restarted after a crash rejoins as the member it was
      (:mod:`~streams.backends.kafka.rejoin`).

    >>> balancer = KafkaGroupBalancer(KafkaSettings("localhost:9092", "sensors"), session_timeout=6)
    >>> balancer.group_id, balancer.heartbeat_interval
    ('headrace.members.sensors', 2.0)
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        session_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        rebalance_timeout: float = 30.0,
        poll_period: float = 1.0,
        standby: StandbyReplicas | None = None,
        warm_up: Callable[[], Awaitable[object]] | None = None,
        notes: Callable[[], Awaitable[Notes | None]] | None = None,
    ) -> None:
        session_timeout = settings.session_timeout if session_timeout is None else session_timeout
        heartbeat_interval = session_timeout / 3 if heartbeat_interval is None else heartbeat_interval
        if not 0 < heartbeat_interval < session_timeout:
            raise ConfigurationError(
                f"heartbeat_interval ({heartbeat_interval!r} s) must be positive and shorter "
                f"than session_timeout ({session_timeout!r} s), or the session expires between beats"
            )
        if rebalance_timeout <= 0 or poll_period <= 0:
            raise ConfigurationError(
                f"rebalance_timeout ({rebalance_timeout!r} s) and poll_period ({poll_period!r} s) are positive seconds"
            )
        self.settings = settings
        self.group_id = membership_group_id(settings)
        self.session_timeout = session_timeout
        self.heartbeat_interval = heartbeat_interval
        self.rebalance_timeout = rebalance_timeout
        self.poll_period = poll_period
        self.standby = standby
        self.warm_up = warm_up
        self.notes = notes
        self._notes: Notes | None = None  # opened by initialize
        self.rejoined: Incarnation | None = None  # the incarnation the first join claimed to be
        self._announce_rejoin = True  # whether the first join's outcome is still to be logged
        self._worker = ""
        self._consumer: AIOKafkaConsumer | None = None
        self._assignor: BestFitPartitionAssignor | None = None
        self._listeners: list[QueueDistributionListener] = []
        self._assignment: frozenset[QueueId] | None = None  # Kafka's latest word; None: none yet
        self._generation = -1
        self._owned: frozenset[QueueId] = frozenset()  # what the listeners were told
        self._held: set[QueueId] = set()  # told added, not yet released (or lost)
        self._all_released = anyio.Event()
        self._all_released.set()
        self._changed = anyio.Event()
        self._delivering = anyio.Lock()  # rebalance callbacks and run() take turns
        self._closing = False
        self._steps = StepWatch(WALL_CLOCK)  # a step of the wall clock: said once a round

    # -- QueueBalancer --------------------------------------------------------------
    async def initialize(self, worker: str, queues: Sequence[QueueId]) -> None:
        """Join the group as ``worker`` and wait for the first assignment, doing the
        ``warm_up`` meanwhile. The broker holds the join back for more members to come: Kafka
        the first join of an empty group, ``group.initial.rebalance.delay.ms`` (3 s by
        default); Tansu every join, half the session timeout."""
        wanted = {QueueId(n) for n in range(self.settings.queues)}
        if set(queues) != wanted:
            raise ConfigurationError(
                f"a Kafka group balancer shares the {self.settings.queues} partitions of topic "
                f"{self.settings.topic!r} (queues 0..{self.settings.queues - 1}), not {sorted(queues)}"
            )
        self._worker = worker
        keeps = self.settings.standby_replicas if self.standby is not None else 0
        self._assignor = BestFitPartitionAssignor(worker, standby_replicas=keeps)
        consumer = AIOKafkaConsumer(
            **self.settings.consumer_kwargs(
                # A join is answered only when the rebalance completes: wait for that, like
                # Kafka's own clients, rather than the adapter's short per-request timeout.
                request_timeout_ms=int((self.rebalance_timeout + 5) * 1000),
                group_id=self.group_id,
                enable_auto_commit=False,
                auto_offset_reset="latest",  # never read; only so no offset lookup fails
                partition_assignment_strategy=(self._assignor,),
                session_timeout_ms=int(self.session_timeout * 1000),
                heartbeat_interval_ms=int(self.heartbeat_interval * 1000),
                rebalance_timeout_ms=int(self.rebalance_timeout * 1000),
            )
        )
        self._consumer = consumer
        try:
            async with anyio.create_task_group() as tg:
                if self.warm_up is not None:
                    tg.start_soon(self._warmed_up, self.warm_up)
                was = await self._recall(worker)
                await self._forget_if_empty()
                await consumer.start()
                if was is not None and rejoin_as(consumer, was.member_id):
                    # The claim of its last join: the metadata the broker holds for the member.
                    self._assignor.owned, self._assignor.standby = was.claimed, was.claimed_standby or ()
                    self.rejoined = was
                    log.info(
                        "%s: rejoining group %s as member %s (generation %d, queues %s)",
                        worker,
                        self.group_id,
                        was.member_id,
                        was.generation,
                        sorted(tp.partition for tp in was.owned),
                    )
                consumer.subscribe([self.settings.topic], listener=_Rebalance(self))
                patience = self.settings.give_up_after + self.rebalance_timeout
                with anyio.move_on_after(patience) as scope:
                    while self._assignment is None:
                        await self._poll()
            if scope.cancelled_caught:
                raise QueueAdapterError(
                    f"worker {worker!r} got no assignment from consumer group {self.group_id!r} "
                    f"of {self.settings.server} within {patience:.0f} s: check that the broker "
                    "is reachable and supports consumer groups"
                )
            await self._catch_up()
        except BaseException:
            self._consumer = None
            with anyio.move_on_after(self.settings.request_timeout, shield=True):
                await stop_client(consumer)
            raise

    async def _recall(self, worker: str) -> Incarnation | None:
        """Open the notes (before the join: the member id must go with it) and what they say
        this worker was in the group; ``None``: join as a new member."""
        if self.notes is None:
            return None
        try:
            self._notes = await self.notes()
            return None if self._notes is None else recall(self._notes, worker)
        except Exception as exc:  # joins as new; the queues' loads say why the store fails
            log.warning("%s: no note of this worker's group membership: %s", worker, exc)
            return None

    async def _warmed_up(self, warm_up: Callable[[], Awaitable[object]]) -> None:
        try:
            await warm_up()
        except Exception as exc:  # the queues' loads do it again, and say why it fails
            log.debug("%s: warming up while joining group %s failed: %r", self._worker, self.group_id, exc)

    def get_my_queues(self) -> frozenset[QueueId]:
        return self._owned

    def subscribe(self, listener: QueueDistributionListener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: QueueDistributionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def run(self) -> None:
        """Follow the group until :meth:`shutdown`: deliver new assignments, report the
        queues lost if the broker dropped this member, and keep the consumer polling; and
        meanwhile follow the standby copies, if this worker keeps any."""
        async with anyio.create_task_group() as tg:
            if self.standby is not None:
                tg.start_soon(self.standby.run)
            await self._follow()
            tg.cancel_scope.cancel()

    async def _follow(self) -> None:
        while not self._closing:
            with anyio.move_on_after(self.poll_period):
                await self._changed.wait()
            self._changed = anyio.Event()  # reset before looking: a later change wakes us again
            if self._closing:
                return
            self._steps.check()
            await self._poll()
            await self._catch_up()

    async def release(self, queue: QueueId) -> None:
        self._held.discard(queue)
        if not self._held:
            self._all_released.set()

    async def shutdown(self) -> None:
        """Leave the group at once: the others rebalance and take the queues over without
        waiting for this worker's session to expire."""
        self._closing = True
        self._changed.set()
        consumer, self._consumer = self._consumer, None
        self._owned = frozenset()
        self._held.clear()
        self._all_released.set()
        if consumer is None:
            return
        member = GroupMember.of(consumer)
        with anyio.move_on_after(self.settings.request_timeout, shield=True):
            await stop_client(consumer)  # leaves the group, from generation 1 on
            if member.generation == 0:
                await self._leave(member.node, member.member_id)
        if self._notes is not None:  # left: the next start joins as a new member
            remember(self._notes, None)

    async def _leave(self, node: int | None, member_id: str | None) -> None:
        """Leave the group as ``member_id``: aiokafka does so only from generation 1 on
        (Kafka's first), so a member of a broker that counts from 0 (Tansu) would otherwise
        stay in the group until its session expires, holding up the next rebalance."""
        if node is None or member_id in (None, _NO_MEMBER):
            return
        client = AIOKafkaClient(**self.settings.client_kwargs())
        try:
            await client.bootstrap()
            await client.send(node, LeaveGroupRequest(self.group_id, member_id))
        except (KafkaError, OSError) as exc:
            log.warning("%s: leaving group %s failed: %s", self._worker, self.group_id, exc)
        finally:
            await client.close()

    async def _forget_if_empty(self) -> None:
        """Delete the group if it exists with no member, so that this join starts it afresh.

        A broker may keep an emptied group's leader: Tansu (0.6) clears the leader when it
        leaves a settled group, but not when it leaves during a rebalance, which is what
        happens when every worker stops at once (the first to leave starts a rebalance, the
        leader leaves during it). The next workers to join are then told to wait for that
        leader's assignment, which never comes: each rejoins every few seconds, and gives up
        after ``give_up_after`` with "got no assignment" (seen with 2 and 4 workers
        restarted together; see ``tests/end_to_end/cluster/test_kafka_cluster_state.py``). An empty
        group holds nothing worth keeping (the offsets live in ``group_id``, not here), so
        it is deleted; Kafka refuses to delete a group that has members, and a broker that
        refuses (no Delete right on the group) only keeps its old behaviour."""
        client = AIOKafkaClient(**self.settings.client_kwargs())
        try:
            await client.bootstrap()
            node = await client.coordinator_lookup(_GROUP_COORDINATOR, self.group_id)
            [group] = (await client.send(node, DescribeGroupsRequest([self.group_id]))).groups
            error_code, members = group[0], group[5]
            if error_code == 0 and not members:
                await client.send(node, DeleteGroupsRequest([self.group_id]))
                log.debug("%s: group %s was empty: deleted, to start afresh", self._worker, self.group_id)
        except (KafkaError, OSError) as exc:  # the join goes on as it would have
            log.debug("%s: could not check whether group %s is empty: %s", self._worker, self.group_id, exc)
        finally:
            await client.close()

    # -- the rebalance ----------------------------------------------------------------
    def _assigned(self, partitions: set[TopicPartition]) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        consumer.pause(*partitions)  # membership only: the agents read the partitions
        self._generation = GroupMember.of(consumer).generation
        self._assignment = frozenset(QueueId(tp.partition) for tp in partitions if tp.topic == self.settings.topic)
        standby = self._standby_queues()
        self._note_membership(consumer)
        log.info(
            "%s: group %s generation %d assigns queues %s%s",
            self._worker,
            self.group_id,
            self._generation,
            sorted(q.number for q in self._assignment),
            f", standby copies of {sorted(q.number for q in standby)}" if standby else "",
        )
        self._changed.set()

    def _note_membership(self, consumer: AIOKafkaConsumer) -> None:
        """Note who this worker now is in the group, for a restart after a crash."""
        member, assignor = GroupMember.of(consumer), self._assignor
        was, self._announce_rejoin = self.rejoined if self._announce_rejoin else None, False
        if was is not None and member.member_id != was.member_id:
            log.info("%s: the broker no longer knew member %s: joined as a new member", self._worker, was.member_id)
        if (
            self._notes is None
            or assignor is None
            or assignor.claimed is None
            or member.member_id in (None, _NO_MEMBER)
        ):
            return
        claimed = assignor.claimed
        incarnation = Incarnation(
            self._worker,
            str(member.member_id),
            member.generation,
            claimed.owned,
            assignor.owned,
            assignor.standby,
            claimed.standby,
        )
        remember(self._notes, incarnation)

    def _standby_queues(self) -> frozenset[QueueId]:
        """Tell the standby copies the queues this assignment gives them (set with the
        queues this worker owns, before any is delivered: a queue is never both)."""
        if self.standby is None or self._assignor is None:
            return frozenset()
        topic = self.settings.topic
        queues = frozenset(QueueId(tp.partition) for tp in self._assignor.standby if tp.topic == topic)
        owned = self._assignment or frozenset()
        self.standby.follow(queues - owned, owned=owned)
        return queues

    async def _revoked(self) -> None:
        """Before the group rebalances: hand every queue back and wait until they are."""
        self._assignment = frozenset()
        if self._closing:
            return
        async with self._delivering:
            if self._membership_lost():
                await self._lose_everything()
                return
            self._all_released = anyio.Event()
            if not self._held:
                self._all_released.set()
            await self._deliver(frozenset())
        await self._all_released.wait()  # the agents drained and committed

    async def _catch_up(self) -> None:
        """Tell the listeners what Kafka's latest assignment changes, or that the broker
        has dropped this member and its queues with it."""
        async with self._delivering:
            if self._membership_lost():
                await self._lose_everything()
            elif self._assignment is not None and self._assignment != self._owned:
                await self._deliver(self._assignment)

    async def _lose_everything(self) -> None:
        if not self._held and not self._owned:
            return
        log.warning(
            "%s: the broker dropped this member from group %s (session expired?): queues %s "
            "are lost and may already be read elsewhere",
            self._worker,
            self.group_id,
            sorted(q.number for q in self._held),
        )
        lost = frozenset(self._held)
        self._held.clear()
        self._all_released.set()
        self._assignment = frozenset()
        if self._assignor is not None:
            self._assignor.owned = ()  # claim nothing when rejoining: others hold it now
        await self._deliver(frozenset(), lost=lost)

    async def _deliver(self, target: frozenset[QueueId], lost: frozenset[QueueId] = frozenset()) -> None:
        change = QueueDistributionChange.between(self._owned | lost, target, lost)
        self._owned = target
        self._held |= change.added
        if change:
            for listener in list(self._listeners):
                await listener(change)

    def _membership_lost(self) -> bool:
        consumer = self._consumer
        return consumer is not None and GroupMember.of(consumer).member_id == _NO_MEMBER

    async def _poll(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        try:
            # Nothing to fetch (every partition paused): this only tells aiokafka that the
            # consumer is alive, and raises what the group's background task ran into.
            await consumer.getmany(timeout_ms=int(min(self.poll_period, 0.1) * 1000))
        except KafkaError as exc:
            if not is_transient(exc):
                raise QueueAdapterError(
                    f"consumer group {self.group_id!r} of {self.settings.server} failed: {exc}"
                ) from exc
            log.warning("%s: group %s: %s (retrying)", self._worker, self.group_id, exc)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka awaits these before (revoked) and after (assigned) each rebalance."""

    def __init__(self, balancer: KafkaGroupBalancer) -> None:
        self._balancer = balancer

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._balancer._revoked()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._balancer._assigned(assigned)


@dataclass(frozen=True, slots=True)
class GroupMember:
    """Who a consumer is in its group now: the broker coordinating the group, its member id and
    the group's generation (``None``, ``None`` and -1 before it has joined).

    They are the only way to tell a rebalance from this member having been dropped by the
    broker, and to leave a group of generation 0. aiokafka has no public API for them: it keeps
    them on the consumer's private group coordinator, and this is the one place headrace reads
    it (``tests/balancer/test_kafka_group.py`` checks it on a broker, so an aiokafka that moves
    them fails there).
    """

    node: int | None
    member_id: str | None
    generation: int

    @classmethod
    def of(cls, consumer: AIOKafkaConsumer) -> GroupMember:
        coordinator = consumer._coordinator  # None until the consumer starts
        if coordinator is None:
            return cls(None, None, -1)
        return cls(coordinator.coordinator_id, coordinator.member_id, int(coordinator.generation))
