"""Which worker reads which queue: queue mappers, queue balancers, membership and leases.

- mapping streams to queues: :class:`HashRingQueueMapper`;
- distributions (pure): :func:`ideal_distribution`, :func:`best_fit_distribution`,
  :func:`sticky_distribution`;
- balancers (:class:`QueueBalancer`): :class:`StaticBalancer`, :class:`BestFitBalancer`,
  :class:`LeaseBasedQueueBalancer`; with Kafka, :class:`KafkaGroupBalancer` (its
  partition assignor: :class:`BestFitPartitionAssignor`);
- membership (:class:`MembershipOracle`): :class:`MemoryMembership`, :class:`SqliteMembership`;
- leases (:class:`LeaseProvider`): :class:`MemoryLeaseProvider`, :class:`SqliteLeaseProvider`.
"""

from balancer.base import BalancerOptions, QueueBalancerBase
from balancer.deployment_based import (
    BestFitBalancer,
    StaticBalancer,
    best_fit_distribution,
    ideal_distribution,
    mature_workers,
    sticky_distribution,
)
from balancer.lease_based import LeaseBasedQueueBalancer, target_queue_count
from balancer.leases import MemoryLeaseProvider, QueueOwnership, TableLeaseProvider
from balancer.membership import MemoryMembership, TableMembership
from balancer.protocols import (
    Lease,
    LeaseProvider,
    MemberRecord,
    MembershipOracle,
    MembershipSnapshot,
    QueueBalancer,
    QueueDistributionChange,
    QueueDistributionListener,
)
from balancer.sqlite_store import SqliteLeaseProvider, SqliteMembership
from streams.adapters.mapper import HashRingQueueMapper
from streams.core.clock import Clock, ManualClock, WallClock

__all__ = [
    "BalancerOptions",
    "BestFitBalancer",
    "BestFitPartitionAssignor",
    "Clock",
    "HashRingQueueMapper",
    "KafkaGroupBalancer",
    "Lease",
    "LeaseBasedQueueBalancer",
    "LeaseProvider",
    "ManualClock",
    "MemberRecord",
    "MembershipOracle",
    "MembershipSnapshot",
    "MemoryLeaseProvider",
    "MemoryMembership",
    "QueueBalancer",
    "QueueBalancerBase",
    "QueueDistributionChange",
    "QueueDistributionListener",
    "QueueOwnership",
    "SqliteLeaseProvider",
    "SqliteMembership",
    "StaticBalancer",
    "WallClock",
    "TableLeaseProvider",
    "TableMembership",
    "best_fit_distribution",
    "ideal_distribution",
    "mature_workers",
    "sticky_distribution",
    "target_queue_count",
]


def __getattr__(name: str) -> object:
    # The Kafka assignor pulls in aiokafka: load it only when asked for, so that importing the
    # queue mapper (every producer, every Spark planner process) stays light.
    if name == "BestFitPartitionAssignor":
        from balancer.kafka.assignor import BestFitPartitionAssignor

        return BestFitPartitionAssignor
    if name == "KafkaGroupBalancer":
        from balancer.kafka.group import KafkaGroupBalancer

        return KafkaGroupBalancer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
