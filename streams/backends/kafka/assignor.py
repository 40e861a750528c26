"""A Kafka partition assignor that balances like headrace: best fit over the consumer group.

With Kafka, the consumer group says who is alive and Kafka's rebalance protocol carries the
assignment: the group leader runs :meth:`BestFitPartitionAssignor.assign` and every member
gets its share. Each member tells the leader its headrace worker name and the partitions it
holds (in the join metadata's user data), so the assignment is

- the ideal distribution over worker names when nothing is held (the same one
  :class:`~balancer.deployment_based.StaticBalancer` computes), and
- sticky otherwise: every member keeps what it holds up to its fair share, and only the
  partitions that must move do (:func:`~balancer.deployment_based.sticky_distribution`).

The hand-off is Kafka's own: aiokafka rebalances eagerly, so every member's
``on_partitions_revoked`` (drain, commit) returns before it rejoins and the leader assigns;
a member that keeps a partition simply gets it back.

The ideal distribution is over worker names, which survive restarts (member ids are new on
every join), so a group that forms again lands where it was. Membership is dynamic (no
``group_instance_id``): a second process started under a live worker's name is one more
member (ranked by worker name, then member id) with a share of its own: never a partition
the other holds. Static membership is not used: the test broker (Tansu 0.6) gives a second
consumer under a live member's instance id that member's id and partitions, so both would
read them (docs/kafka.md, "Several workers").

**Standby replicas** (``standby_replicas`` N > 0, the leader's setting, as Kafka Streams'
``num.standby.replicas``): the leader also gives each partition to up to N members other
than its owner as a standby (:func:`standby_distribution`: the least loaded first, so they
spread evenly; a member that was its standby or owner before wins a tie), carried in each
member's assignment user data. Only members that say they keep standbys (their claim has a
``standby`` list) get any: an older member, or one with ``standby_replicas=0``, gets none, and
an older leader sends no user data, which reads as no standbys. A partition whose owner has
left goes, where the balance allows, to a member that was its standby: its copy is warm.

Use::

    consumer = AIOKafkaConsumer(
        topic, group_id="headrace", bootstrap_servers=...,
        partition_assignment_strategy=(BestFitPartitionAssignor("worker-1"),),
    )
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import msgpack
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.structs import TopicPartition

from balancer.deployment_based import sticky_distribution
from streams.core.errors import ConfigurationError

log = logging.getLogger("headrace.balancer")


@dataclass(frozen=True, slots=True)
class MemberClaim:
    """What a group member says about itself in its join metadata: its worker name, the
    partitions it holds, and those it keeps standby copies of (``None``: it keeps none, an
    older member or one with ``standby_replicas=0``)."""

    worker: str
    owned: tuple[TopicPartition, ...] = ()
    standby: tuple[TopicPartition, ...] | None = None

    def encode(self) -> bytes:
        fields: dict[str, object] = {"worker": self.worker, "owned": _pairs(self.owned)}
        if self.standby is not None:
            fields["standby"] = _pairs(self.standby)
        data: bytes = msgpack.packb(fields)
        return data

    @classmethod
    def decode(cls, data: bytes, member_id: str) -> MemberClaim:
        """The claim in ``data``; a member that sent none (or another format) is known by
        its member id and holds nothing.

        >>> MemberClaim.decode(MemberClaim("w1", standby=(TopicPartition("t", 3),)).encode(), "m-1")
        MemberClaim(worker='w1', owned=(), standby=(TopicPartition(topic='t', partition=3),))
        """
        try:
            fields = msgpack.unpackb(data)
            worker = fields["worker"]
            owned = _partitions(fields["owned"])
            standby = None if fields.get("standby") is None else _partitions(fields["standby"])
        # Any client may join the group: its user data may be anything.
        except (msgpack.UnpackException, ValueError, TypeError, KeyError, AttributeError):
            return cls(member_id)
        if not isinstance(worker, str) or not worker:
            return cls(member_id)
        return cls(worker, owned, standby)


def _pairs(partitions: Iterable[TopicPartition]) -> list[list[object]]:
    return [[tp.topic, tp.partition] for tp in partitions]


def _partitions(pairs: Iterable[Sequence[object]]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(str(t), int(p)) for t, p in pairs)  # type: ignore[call-overload]


def standby_partitions(user_data: bytes) -> tuple[TopicPartition, ...]:
    """The standby partitions an assignment's user data gives its member; none when it has
    none (an older leader sends no user data) or another format.

    >>> standby_partitions(msgpack.packb({"standby": [["events", 2]]}))
    (TopicPartition(topic='events', partition=2),)
    >>> standby_partitions(b""), standby_partitions(b"\\xffnot msgpack")
    ((), ())
    """
    try:
        return _partitions(msgpack.unpackb(user_data)["standby"])
    except (msgpack.UnpackException, ValueError, TypeError, KeyError, AttributeError):
        return ()


K = TypeVar("K", bound=Hashable)


def standby_distribution(
    owners: Mapping[TopicPartition, K], members: Sequence[K], replicas: int, warm: Mapping[K, Iterable[TopicPartition]]
) -> dict[K, list[TopicPartition]]:
    """Each partition of ``owners`` (partition -> its owner) given to up to ``replicas`` of
    ``members`` other than its owner: to the least loaded so far, then to one it is ``warm``
    on (it held the partition or a copy of it), then by rank. The partitions are taken one
    of each owner in turn, so no owner's share crowds one member.

    >>> tp = [TopicPartition("t", p) for p in range(6)]
    >>> owners = {tp[0]: "a", tp[1]: "a", tp[2]: "b", tp[3]: "b", tp[4]: "c", tp[5]: "c"}
    >>> {m: [p.partition for p in s] for m, s in standby_distribution(owners, ["a", "b", "c"], 1, {}).items()}
    {'a': [4, 5], 'b': [0, 1], 'c': [2, 3]}
    """
    rank = {member: n for n, member in enumerate(members)}
    warmed = {member: set(warm.get(member, ())) for member in members}
    shares: dict[K, list[TopicPartition]] = {member: [] for member in members}
    by_owner: dict[K, list[TopicPartition]] = {}
    for tp in sorted(owners):
        by_owner.setdefault(owners[tp], []).append(tp)
    turns = sorted(
        ((n, rank.get(owner, len(rank)), tp) for owner, tps in by_owner.items() for n, tp in enumerate(tps)),
        key=lambda turn: (turn[0], turn[1], turn[2]),
    )
    # How many of the partitions still to place each member may keep: of members equally
    # loaded, the one with fewer left to take goes first, or it ends short.
    left = {member: sum(1 for tp in owners if owners[tp] != member) for member in members}
    for _, _, tp in turns:
        candidates = [member for member in members if member != owners[tp]]
        candidates.sort(key=lambda member: (len(shares[member]), left[member], tp not in warmed[member], rank[member]))
        for member in candidates[:replicas]:
            shares[member].append(tp)
        for member in candidates:
            left[member] -= 1
    return {member: sorted(share) for member, share in shares.items()}


def warm_spares(
    distribution: Mapping[K, list[TopicPartition]],
    previous: Mapping[K, Iterable[TopicPartition]],
    warm: Mapping[K, Iterable[TopicPartition]],
) -> dict[K, list[TopicPartition]]:
    """``distribution`` with its spare partitions (those a member got but did not hold in
    ``previous``: a departed owner's) dealt again, each member getting as many as before but
    first those it is ``warm`` on (it kept a standby copy): what stays put stays put.

    >>> a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    >>> warm_spares({"x": [a], "y": [b]}, {}, {"y": [a]})
    {'x': [TopicPartition(topic='t', partition=1)], 'y': [TopicPartition(topic='t', partition=0)]}
    """
    held = {member: set(previous.get(member, ())) for member in distribution}
    spares = {member: [tp for tp in share if tp not in held[member]] for member, share in distribution.items()}
    pool = sorted(tp for share in spares.values() for tp in share)
    dealt: dict[K, list[TopicPartition]] = {}
    for member, share in spares.items():
        dealt[member] = [tp for tp in pool if tp in set(warm.get(member, ()))][: len(share)]
        pool = [tp for tp in pool if tp not in dealt[member]]
    for member, share in spares.items():
        missing = len(share) - len(dealt[member])
        dealt[member] += pool[:missing]
        pool = pool[missing:]
    return {
        member: sorted([*(tp for tp in share if tp in held[member]), *dealt[member]])
        for member, share in distribution.items()
    }


class BestFitPartitionAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """A partition assignor for ``AIOKafkaConsumer(partition_assignment_strategy=...)``; one
    object per consumer, named after its headrace worker. With ``standby_replicas`` it keeps
    standby copies (:attr:`standby`: what the last assignment gave it) and, as the group's
    leader, gives each partition that many standbys.

    >>> assignor = BestFitPartitionAssignor("worker-1", standby_replicas=1)
    >>> MemberClaim.decode(assignor.metadata(["events"]).user_data, "m-1")
    MemberClaim(worker='worker-1', owned=(), standby=())
    """

    name = "headrace-best-fit"
    version = 0

    def __init__(self, worker: str, standby_replicas: int = 0) -> None:
        if not isinstance(worker, str) or not worker:
            raise ConfigurationError(f"a worker name is a non-empty str, not {worker!r}")
        self.worker = worker
        self.standby_replicas = standby_replicas
        self.owned: tuple[TopicPartition, ...] = ()
        self.standby: tuple[TopicPartition, ...] = ()
        self.claimed: MemberClaim | None = None  # the claim of the last join (None: none yet)

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        claim = MemberClaim(self.worker, self.owned, self.standby if self.standby_replicas else None)
        self.claimed = claim
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), claim.encode())

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        # Remembered for the next join, so the leader can keep these here.
        self.owned = tuple(sorted(assignment.partitions()))
        self.standby = standby_partitions(assignment.user_data) if self.standby_replicas else ()

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """Per topic, the sticky best-fit distribution of its partitions over the members
        subscribed to it, and with ``standby_replicas`` their standbys. Members are ranked
        by (worker name, member id), so members that wrongly share a name still get a valid
        assignment."""
        claims = {
            member_id: MemberClaim.decode(metadata.user_data, member_id) for member_id, metadata in members.items()
        }
        keys = {member_id: (claim.worker, member_id) for member_id, claim in claims.items()}
        previous = {keys[m]: claim.owned for m, claim in claims.items()}
        warm = {keys[m]: (*claim.owned, *(claim.standby or ())) for m, claim in claims.items()}
        shares: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        standbys: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        for topic in sorted({t for metadata in members.values() for t in metadata.subscription}):
            partitions = cluster.partitions_for_topic(topic)
            if partitions is None:
                log.warning("no partition metadata for topic %s; it is left unassigned", topic)
                continue
            subscribers = sorted(keys[m] for m, metadata in members.items() if topic in metadata.subscription)
            distribution = sticky_distribution(subscribers, [TopicPartition(topic, p) for p in partitions], previous)
            keepers = [key for key in subscribers if claims[key[1]].standby is not None]
            if self.standby_replicas and keepers:
                distribution = warm_spares(distribution, previous, warm)
                owners = {tp: key for key, owned in distribution.items() for tp in owned}
                _add(standbys, standby_distribution(owners, keepers, self.standby_replicas, warm), topic)
            _add(shares, distribution, topic)
        return {
            member_id: ConsumerProtocolMemberAssignment(
                self.version, sorted(share.items()), _standby_data(standbys[member_id])
            )
            for member_id, share in shares.items()
        }


def _add(
    shares: dict[str, dict[str, list[int]]],
    distribution: Mapping[tuple[str, str], Iterable[TopicPartition]],
    topic: str,
) -> None:
    """Put each member's partitions of ``topic`` in ``distribution`` into its share."""
    for (_, member_id), owned in distribution.items():
        numbers = sorted(tp.partition for tp in owned)
        if numbers:
            shares[member_id][topic] = numbers


def _standby_data(standby: Mapping[str, list[int]]) -> bytes:
    """A member's assignment user data: its standby partitions (none: empty, as before)."""
    if not standby:
        return b""
    data: bytes = msgpack.packb({"standby": [[t, p] for t, numbers in sorted(standby.items()) for p in numbers]})
    return data
