"""Which worker reads which queue: queue mappers, queue balancers, membership and leases.

- mapping streams to queues: :class:`HashRingQueueMapper`;
- distributions (pure): :func:`ideal_distribution`, :func:`best_fit_distribution`,
  :func:`sticky_distribution`;
- balancers (:class:`QueueBalancer`): :class:`StaticBalancer`, :class:`BestFitBalancer`,
  :class:`LeaseBasedQueueBalancer`;
- membership (:class:`MembershipOracle`): :class:`MemoryMembership`, and over a table,
  :class:`TableMembership`;
- leases (:class:`LeaseProvider`): :class:`MemoryLeaseProvider`, and over a table,
  :class:`TableLeaseProvider`.

Each backend keeps its own: the embedded store's tables in
:mod:`streams.backends.embedded.balancer`, and Kafka's group balancer and partition assignor
in :mod:`streams.backends.kafka.balancer` and :mod:`streams.backends.kafka.assignor`.
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
    Tenure,
)
from streams.adapters.mapper import HashRingQueueMapper
from streams.core.clock import Clock, ManualClock, WallClock

__all__ = [
    "BalancerOptions",
    "BestFitBalancer",
    "Clock",
    "HashRingQueueMapper",
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
    "StaticBalancer",
    "WallClock",
    "TableLeaseProvider",
    "TableMembership",
    "Tenure",
    "best_fit_distribution",
    "ideal_distribution",
    "mature_workers",
    "sticky_distribution",
    "target_queue_count",
]
