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
every join), so a group that forms again lands where it was. To make the broker refuse a
second consumer under a live worker's name, give each consumer
``group_instance_id=<worker name>`` (static membership).

Use::

    consumer = AIOKafkaConsumer(
        topic, group_id="headrace", bootstrap_servers=...,
        partition_assignment_strategy=(BestFitPartitionAssignor("worker-1"),),
    )
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
    """What a group member says about itself in its join metadata."""

    worker: str
    owned: tuple[TopicPartition, ...] = ()

    def encode(self) -> bytes:
        data: bytes = msgpack.packb({"worker": self.worker, "owned": [[tp.topic, tp.partition] for tp in self.owned]})
        return data

    @classmethod
    def decode(cls, data: bytes, member_id: str) -> MemberClaim:
        """The claim in ``data``; a member that sent none (or another format) is known by
        its member id and holds nothing."""
        try:
            fields = msgpack.unpackb(data)
            worker = fields["worker"]
            owned = tuple(TopicPartition(str(t), int(p)) for t, p in fields["owned"])
        # Any client may join the group: its user data may be anything.
        except (msgpack.UnpackException, ValueError, TypeError, KeyError):
            return cls(member_id)
        if not isinstance(worker, str) or not worker:
            return cls(member_id)
        return cls(worker, owned)


class BestFitPartitionAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """A partition assignor for ``AIOKafkaConsumer(partition_assignment_strategy=...)``; one
    object per consumer, named after its headrace worker.

    >>> assignor = BestFitPartitionAssignor("worker-1")
    >>> MemberClaim.decode(assignor.metadata(["events"]).user_data, "m-1").worker
    'worker-1'
    """

    name = "headrace-best-fit"
    version = 0

    def __init__(self, worker: str) -> None:
        if not isinstance(worker, str) or not worker:
            raise ConfigurationError(f"a worker name is a non-empty str, not {worker!r}")
        self.worker = worker
        self.owned: tuple[TopicPartition, ...] = ()

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        claim = MemberClaim(self.worker, self.owned)
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), claim.encode())

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        # Remembered for the next join, so the leader can keep these here.
        self.owned = tuple(sorted(assignment.partitions()))

    @classmethod
    def assign(
        cls,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """Per topic, the sticky best-fit distribution of its partitions over the members
        subscribed to it. Members are ranked by (worker name, member id), so members that
        wrongly share a name still get a valid assignment."""
        claims = {
            member_id: MemberClaim.decode(metadata.user_data, member_id) for member_id, metadata in members.items()
        }
        keys = {member_id: (claim.worker, member_id) for member_id, claim in claims.items()}
        previous = {keys[m]: claim.owned for m, claim in claims.items()}
        shares: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        for topic in sorted({t for metadata in members.values() for t in metadata.subscription}):
            partitions = cluster.partitions_for_topic(topic)
            if partitions is None:
                log.warning("no partition metadata for topic %s; it is left unassigned", topic)
                continue
            subscribers = [keys[m] for m, metadata in members.items() if topic in metadata.subscription]
            distribution = sticky_distribution(subscribers, [TopicPartition(topic, p) for p in partitions], previous)
            for (_, member_id), owned in distribution.items():
                if owned:
                    shares[member_id][topic] = sorted(tp.partition for tp in owned)
        return {
            member_id: ConsumerProtocolMemberAssignment(cls.version, sorted(share.items()), b"")
            for member_id, share in shares.items()
        }
