"""Standby replicas in the Kafka partition assignor: which members keep a standby copy of each
partition (never its owner, spread evenly, at most the members there are), carried in the
assignment's user data over the wire; older members and leaders get and give none; a departed
owner's partitions go to their warm standbys where the balance allows."""

from __future__ import annotations

from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberMetadata
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.backends.kafka.assignor import BestFitPartitionAssignor, MemberClaim
from tests.balancer.test_kafka_assignor import TOPIC, cluster_with, partitions, rebalance


def group_of(names: list[str], replicas: int) -> dict[str, BestFitPartitionAssignor]:
    return {f"m-{name}": BestFitPartitionAssignor(name, standby_replicas=replicas) for name in names}


def standbys(group: dict[str, BestFitPartitionAssignor]) -> dict[str, list[int]]:
    return {assignor.worker: partitions(assignor.standby) for assignor in group.values()}


def test_each_partition_gets_one_standby_spread_evenly_never_on_its_owner():
    group = group_of(["w0", "w1", "w2"], 1)
    owned = {w: partitions(s) for w, s in rebalance(cluster_with(events=6), group).items()}
    assert owned == {"w0": [0, 1], "w1": [2, 3], "w2": [4, 5]}
    assert standbys(group) == {"w0": [4, 5], "w1": [0, 1], "w2": [2, 3]}


def test_more_replicas_than_other_members_gives_every_other_member_a_copy():
    group = group_of(["w0", "w1", "w2"], 5)
    owned = {w: partitions(s) for w, s in rebalance(cluster_with(events=4), group).items()}
    kept = standbys(group)
    for worker in owned:
        assert kept[worker] == sorted(set(range(4)) - set(owned[worker]))


def test_a_lone_member_keeps_no_standby():
    group = group_of(["w0"], 2)
    rebalance(cluster_with(events=3), group)
    assert standbys(group) == {"w0": []}


def test_older_members_get_no_standby_and_an_older_leaders_assignment_reads_as_none():
    old = ConsumerProtocolMemberMetadata(0, [TOPIC], MemberClaim("old").encode())  # no standby list
    members = {
        "m-new": BestFitPartitionAssignor("new", standby_replicas=1).metadata([TOPIC]),
        "m-old": ConsumerProtocol.METADATA.decode(old.encode()),
    }
    result = BestFitPartitionAssignor("leader", standby_replicas=1).assign(cluster_with(events=4), members)
    assert result["m-old"].user_data == b""
    new = BestFitPartitionAssignor("new", standby_replicas=1)
    new.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(result["m-new"].encode()))
    assert partitions(new.owned) == [0, 1] and partitions(new.standby) == [2, 3]  # the old member's

    # A leader without standbys (an older one, or standby_replicas=0) sends no user data.
    plain = BestFitPartitionAssignor("leader").assign(cluster_with(events=4), members)
    assert [a.user_data for a in plain.values()] == [b"", b""]
    new.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(plain["m-new"].encode()))
    assert new.standby == ()


def test_a_departed_owners_partitions_go_to_their_warm_standbys():
    """The owner of 2 and 3 has left: b kept a copy of 2, a of 3; each takes its warm one,
    and both keep what they own."""

    def claim(worker: str, owned: int, standby: int) -> ConsumerProtocolMemberMetadata:
        data = MemberClaim(worker, (TopicPartition(TOPIC, owned),), (TopicPartition(TOPIC, standby),)).encode()
        return ConsumerProtocol.METADATA.decode(ConsumerProtocolMemberMetadata(0, [TOPIC], data).encode())

    members = {"m-a": claim("a", 0, 3), "m-b": claim("b", 1, 2)}
    result = BestFitPartitionAssignor("a", standby_replicas=1).assign(cluster_with(events=4), members)
    assert partitions(sorted(result["m-a"].partitions())) == [0, 3]
    assert partitions(sorted(result["m-b"].partitions())) == [1, 2]
    # Without standbys the spares are dealt in order: the copies would be cold.
    plain = BestFitPartitionAssignor("a").assign(cluster_with(events=4), members)
    assert partitions(sorted(plain["m-a"].partitions())) == [0, 2]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 24), st.integers(1, 6), st.integers(1, 4))
def test_every_partition_has_its_standbys_on_distinct_other_members(count, members, replicas):
    group = group_of([f"w{n}" for n in range(members)], replicas)
    owned = rebalance(cluster_with(events=count), group)
    copies: dict[int, list[str]] = {}
    for worker, kept in standbys(group).items():
        assert not set(kept) & set(partitions(owned.get(worker, [])))  # never its owner
        for p in kept:
            copies.setdefault(p, []).append(worker)
    expected = min(replicas, members - 1)
    assert all(len(copies.get(p, [])) == expected for p in range(count)), copies
    loads = [len(kept) for kept in standbys(group).values()]
    assert max(loads) - min(loads) <= 1, standbys(group)
    assert all(isinstance(tp, TopicPartition) for a in group.values() for tp in a.standby)
