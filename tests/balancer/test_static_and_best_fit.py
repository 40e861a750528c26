"""StaticBalancer and BestFitBalancer: ideal shares, workers down, maturity, hand-offs."""

from __future__ import annotations

import pytest

from balancer import (
    BalancerOptions,
    BestFitBalancer,
    MemoryLeaseProvider,
    MemoryMembership,
    StaticBalancer,
    TableMembership,
    ideal_distribution,
)
from balancer.membership import MemoryMemberTable
from streams.core.errors import ConfigurationError, WorkerNameInUseError
from tests.balancer.cluster import Cluster, Worker, numbers, queues

OPTIONS = BalancerOptions(lease_length=60.0, renew_period=29.0, refresh_period=5.0)
NAMES = [f"w{i}" for i in range(6)]


def ideal(names, q) -> dict[str, list[int]]:
    return {w: numbers(qs) for w, qs in ideal_distribution(names, queues(q)).items()}


async def test_static_workers_own_their_ideal_share_whoever_is_down(clock):
    leases = MemoryLeaseProvider(clock=clock)
    cluster = Cluster()
    for name in ("w0", "w2"):  # w1 never starts
        balancer = StaticBalancer(["w0", "w1", "w2"], lease_provider=leases, clock=clock, options=OPTIONS)
        await cluster.start(Worker(name, balancer), queues(8))
    await cluster.tick(3)
    assert cluster.shares() == {"w0": [0, 1, 2], "w2": [6, 7]}


async def test_static_refuses_a_worker_not_in_its_list():
    balancer = StaticBalancer(["w0", "w1"])
    with pytest.raises(ConfigurationError, match="'w9' is not in the static"):
        await balancer.initialize("w9", queues(4))


async def test_static_rejects_duplicate_names_and_bad_timing():
    with pytest.raises(ConfigurationError, match="unique"):
        StaticBalancer(["a", "a"])
    with pytest.raises(ConfigurationError, match="renew_period"):
        BalancerOptions(lease_length=10.0, renew_period=10.0)


async def test_listeners_hear_the_first_share_and_nothing_when_nothing_changes(clock):
    balancer = StaticBalancer(["a", "b"], clock=clock, options=OPTIONS)
    worker = Worker("a", balancer)
    await balancer.initialize("a", queues(4))
    assert [numbers(c.added) for c in worker.changes] == [[0, 1]]
    assert balancer.get_tenure(queues(4)[0]).lease.epoch == 1
    assert balancer.get_tenure(queues(4)[3]) is None
    await balancer.tick()
    assert len(worker.changes) == 1


def best_fit_cluster(clock, membership, leases, *, maturity=120.0, names=NAMES):
    def make(name: str, drains: bool = True) -> Worker:
        balancer = BestFitBalancer(
            membership,
            workers=names,
            maturity_period=maturity,
            lease_provider=leases,
            clock=clock,
            options=OPTIONS,
        )
        return Worker(name, balancer, drains=drains)

    return make


@pytest.fixture
def shared(clock):
    return MemoryMembership(clock=clock, suspicion_timeout=30.0), MemoryLeaseProvider(clock=clock)


async def test_best_fit_all_up_is_the_ideal_distribution(clock, shared):
    make = best_fit_cluster(clock, *shared)
    cluster = Cluster()
    for name in reversed(NAMES):  # start order does not matter
        await cluster.start(make(name), queues(16))
    await cluster.tick(2)
    assert cluster.shares() == ideal(NAMES, 16)


async def test_best_fit_half_the_workers_down(clock, shared):
    make = best_fit_cluster(clock, *shared)
    cluster = Cluster()
    for name in ("w0", "w3", "w5"):
        await cluster.start(make(name), queues(16))
    await cluster.tick(2)
    shares = cluster.shares()
    assert cluster.all_owned() == list(range(16))
    assert sorted(len(s) for s in shares.values()) == [5, 5, 6]
    for name in shares:
        assert set(ideal(NAMES, 16)[name]) <= set(shares[name])


async def test_best_fit_a_dead_workers_queues_move_once_its_leases_expire(clock, shared):
    make = best_fit_cluster(clock, *shared, names=["a", "b"])
    cluster = Cluster()
    await cluster.start(make("a"), queues(4))
    await cluster.start(make("b"), queues(4))
    await cluster.tick()
    assert cluster.shares() == {"a": [0, 1], "b": [2, 3]}
    cluster.stop("b")
    clock.advance(35.0)  # b is suspected dead, but its leases still run
    await cluster.tick()
    assert cluster.shares() == {"a": [0, 1]}
    clock.advance(25.0)  # b's leases expired
    await cluster.tick()
    assert cluster.shares() == {"a": [0, 1, 2, 3]}


async def test_best_fit_a_newcomer_gets_its_queues_only_after_maturity(clock, shared):
    names = ["w0", "w1", "w2", "w3"]
    make = best_fit_cluster(clock, *shared, names=names)
    cluster = Cluster()
    for name in names[:3]:
        await cluster.start(make(name), queues(12))
    await cluster.run_for(clock, 200.0)  # the founders have matured
    before = cluster.shares()
    await cluster.start(make("w3"), queues(12))
    for _ in range(23):  # 115 s of rounds: still immature
        await cluster.run_for(clock, 5.0)
        assert cluster.shares() == {**before, "w3": []}
    clock.advance(5.0)
    await cluster.tick(2)  # old owners hand over, then w3 picks up
    assert cluster.shares() == ideal(names, 12)
    moved = sum(len(set(before[w]) - set(cluster.shares()[w])) for w in before)
    assert moved == len(ideal(names, 12)["w3"]) == 3


async def test_best_fit_a_restart_storm_moves_nothing(clock, shared):
    membership, leases = shared
    make = best_fit_cluster(clock, membership, leases, names=["a", "b", "c"])
    cluster = Cluster()
    await cluster.start(make("a"), queues(6))
    await cluster.start(make("b"), queues(6))
    await cluster.run_for(clock, 200.0)
    before = cluster.shares()
    heard = {w.name: len(w.changes) for w in cluster.workers}
    for _ in range(5):  # c crashes 60 s after each start, and restarts
        flapping = await cluster.start(make("c"), queues(6))
        await cluster.run_for(clock, 60.0)
        await flapping.balancer.shutdown()
        cluster.stop("c")
        assert cluster.shares() == before
    assert {w.name: len(w.changes) for w in cluster.workers} == heard  # not one change


async def test_best_fit_the_new_owner_waits_for_the_old_one_to_drain(clock, shared):
    make = best_fit_cluster(clock, *shared, names=["a", "b"], maturity=0.0)
    cluster = Cluster()
    a = await cluster.start(make("a", drains=False), queues(4))
    assert numbers(a.owned) == [0, 1, 2, 3]
    b = await cluster.start(make("b"), queues(4))
    await cluster.tick(3)
    assert numbers(a.owned) == [0, 1] and numbers(a.draining) == [2, 3]
    assert numbers(b.owned) == []  # a still holds the leases while it drains
    await a.finish_drain()
    await cluster.tick()
    assert cluster.shares() == {"a": [0, 1], "b": [2, 3]}
    assert [b.balancer.get_tenure(q).lease.epoch for q in sorted(b.owned)] == [2, 2]


async def test_best_fit_without_a_worker_list_balances_over_known_members(clock, shared):
    membership, leases = shared
    cluster = Cluster()
    for name in ("x", "y"):
        balancer = BestFitBalancer(membership, lease_provider=leases, clock=clock, options=OPTIONS)
        await cluster.start(Worker(name, balancer), queues(5))
    await cluster.tick(2)
    assert cluster.shares() == {"x": [0, 1, 2], "y": [3, 4]}


async def test_shutdown_hands_back_every_queue_at_once(clock, shared):
    make = best_fit_cluster(clock, *shared, names=["a", "b"], maturity=0.0)
    cluster = Cluster()
    a = await cluster.start(make("a"), queues(4))
    await cluster.start(make("b"), queues(4))
    await cluster.tick(2)
    await a.balancer.shutdown()
    cluster.stop("a")
    assert a.owned == frozenset()
    await cluster.tick()  # b sees a gone (it left) and its leases free, in one round
    assert cluster.shares() == {"b": [0, 1, 2, 3]}


async def test_a_second_worker_cannot_start_under_a_live_name(clock):

    table, leases = MemoryMemberTable(), MemoryLeaseProvider(clock=clock)

    def make() -> BestFitBalancer:
        membership = TableMembership(table, clock=clock)  # one per process
        return BestFitBalancer(membership, lease_provider=leases, clock=clock, options=OPTIONS)

    first = make()
    await first.initialize("w0", queues(2))
    with pytest.raises(WorkerNameInUseError, match="'w0' is in use"):
        await make().initialize("w0", queues(2))
    assert numbers(first.get_my_queues()) == [0, 1]


async def test_initialize_refuses_bad_arguments_and_a_second_call(clock):
    balancer = StaticBalancer(["a"], clock=clock)
    with pytest.raises(ConfigurationError, match="non-empty str"):
        await balancer.initialize("", queues(2))
    with pytest.raises(ConfigurationError, match="at least one queue"):
        await balancer.initialize("a", [])
    await balancer.initialize("a", queues(2))
    with pytest.raises(ConfigurationError, match="already initialized"):
        await balancer.initialize("a", queues(2))
