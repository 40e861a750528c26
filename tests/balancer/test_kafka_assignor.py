"""The Kafka partition assignor, on aiokafka's own metadata and protocol objects (encoded and
decoded as they travel in JoinGroup / SyncGroup)."""

from __future__ import annotations

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberMetadata
from aiokafka.protocol.metadata import MetadataResponse_v0
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer import ideal_distribution
from streams.backends.kafka.assignor import BestFitPartitionAssignor

TOPIC = "events"


def cluster_with(**topics: int) -> ClusterMetadata:
    """Cluster metadata as a broker's metadata response fills it in."""
    cluster = ClusterMetadata()
    response = MetadataResponse_v0(
        brokers=[(0, "localhost", 9092)],
        topics=[(0, topic, [(0, p, 0, [0], [0]) for p in range(count)]) for topic, count in topics.items()],
    )
    cluster.update_metadata(MetadataResponse_v0.decode(response.encode()))
    return cluster


def rebalance(cluster: ClusterMetadata, group: dict[str, BestFitPartitionAssignor], topics=(TOPIC,)):
    """One rebalance: every member's join metadata over the wire, the leader's assign, every
    member's assignment over the wire. Returns {worker: [partitions]}."""
    members = {
        member_id: ConsumerProtocol.METADATA.decode(assignor.metadata(topics).encode())
        for member_id, assignor in group.items()
    }
    result = next(iter(group.values())).assign(cluster, members)  # the first member leads
    assert set(result) == set(group)
    shares: dict[str, list[TopicPartition]] = {}
    for member_id, assignor in group.items():
        assignment = ConsumerProtocol.ASSIGNMENT.decode(result[member_id].encode())
        assignor.on_assignment(assignment)
        shares.setdefault(assignor.worker, []).extend(sorted(assignment.partitions()))
    return shares


def partitions(share) -> list[int]:
    return [tp.partition for tp in share]


def test_a_fresh_group_gets_the_ideal_distribution_over_worker_names():
    group = {f"member-{i}": BestFitPartitionAssignor(name) for i, name in enumerate(["w2", "w0", "w1"])}
    shares = rebalance(cluster_with(events=8), group)
    expected = ideal_distribution(["w0", "w1", "w2"], range(8))
    assert {w: partitions(s) for w, s in shares.items()} == expected


def test_restarted_workers_get_their_partitions_back_under_new_member_ids():
    cluster = cluster_with(events=6)
    first = rebalance(cluster, {"m1": BestFitPartitionAssignor("a"), "m2": BestFitPartitionAssignor("b")})
    again = rebalance(cluster, {"m9": BestFitPartitionAssignor("b"), "m8": BestFitPartitionAssignor("a")})
    assert again == first


def test_minimal_movement_when_one_joins():
    cluster = cluster_with(events=12)
    group = {f"m{i}": BestFitPartitionAssignor(f"w{i}") for i in range(3)}
    before = rebalance(cluster, group)
    group["m3"] = BestFitPartitionAssignor("w3")  # sorts last, but could sort anywhere
    after = rebalance(cluster, group)
    moved = sum(len(set(before[w]) - set(after[w])) for w in before)
    assert moved == len(after["w3"]) == 3
    assert sorted(tp for s in after.values() for tp in s) == [TopicPartition(TOPIC, p) for p in range(12)]


def test_half_the_members_leave():
    cluster = cluster_with(events=16)
    group = {f"m{i}": BestFitPartitionAssignor(f"w{i}") for i in range(6)}
    before = rebalance(cluster, group)
    for member_id in ("m1", "m3", "m5"):
        del group[member_id]
    after = rebalance(cluster, group)
    assert sorted(len(s) for s in after.values()) == [5, 5, 6]
    for worker, share in after.items():
        assert set(before[worker]) <= set(share)  # survivors keep everything they had


def test_members_that_share_a_name_or_send_foreign_metadata_still_get_a_valid_assignment():
    cluster = cluster_with(events=5)
    members = {
        "m1": BestFitPartitionAssignor("dup").metadata([TOPIC]),
        "m2": BestFitPartitionAssignor("dup").metadata([TOPIC]),
        "m3": ConsumerProtocolMemberMetadata(0, [TOPIC], b"\xffnot msgpack"),
    }
    result = BestFitPartitionAssignor("leader").assign(cluster, members)
    owned = sorted(p for a in result.values() for p in a.partitions())
    assert owned == [TopicPartition(TOPIC, p) for p in range(5)]
    assert sorted(len(a.partitions()) for a in result.values()) == [1, 2, 2]


def test_each_topic_goes_to_its_own_subscribers():
    cluster = cluster_with(events=4, other=2)
    members = {
        "m1": BestFitPartitionAssignor("a").metadata([TOPIC, "other"]),
        "m2": BestFitPartitionAssignor("b").metadata([TOPIC]),
        "m3": BestFitPartitionAssignor("c").metadata(["missing"]),
    }
    result = BestFitPartitionAssignor("leader").assign(cluster, members)
    assert sorted(result["m1"].partitions()) == [
        TopicPartition(TOPIC, 0),
        TopicPartition(TOPIC, 1),
        TopicPartition("other", 0),
        TopicPartition("other", 1),
    ]
    assert sorted(result["m2"].partitions()) == [TopicPartition(TOPIC, 2), TopicPartition(TOPIC, 3)]
    assert result["m3"].partitions() == []


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 40),
    st.lists(
        st.lists(st.text("abcd", min_size=1, max_size=2), min_size=1, max_size=8, unique=True),
        min_size=1,
        max_size=4,
    ),
)
def test_every_generation_owns_each_partition_once_with_loads_within_one(count, generations):
    """Groups change from one generation to the next; every assignment is exact and even."""
    cluster = cluster_with(events=count)
    assignors: dict[str, BestFitPartitionAssignor] = {}
    for names in generations:
        assignors = {f"m-{n}": assignors.get(f"m-{n}") or BestFitPartitionAssignor(n) for n in names}
        shares = rebalance(cluster, assignors)
        owned = sorted(tp for share in shares.values() for tp in share)
        assert owned == [TopicPartition(TOPIC, p) for p in range(count)]
        loads = [len(shares.get(n, [])) for n in names]
        assert max(loads) - min(loads) <= 1
