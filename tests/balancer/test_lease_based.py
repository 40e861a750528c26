"""LeaseBasedQueueBalancer: targets, oldest-first release, failed renewals, dead workers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer import (
    BalancerOptions,
    LeaseBasedQueueBalancer,
    MemoryLeaseProvider,
    MemoryMembership,
    TableMembership,
    target_queue_count,
)
from balancer.lease_based import search_order
from balancer.membership import MemoryMemberTable
from streams.backends.embedded.balancer import SqliteLeaseProvider
from streams.core.errors import ConfigurationError, WorkerNameInUseError
from tests.balancer.cluster import Cluster, Worker, numbers, queues

OPTIONS = BalancerOptions(lease_length=60.0, renew_period=29.0, refresh_period=5.0)


@given(st.integers(0, 100), st.integers(1, 20))
def test_targets_add_up_and_differ_by_at_most_one(q, w):
    ranked = [f"w{i}" for i in range(w)]
    targets = [target_queue_count(q, ranked, name) for name in ranked]
    assert sum(targets) == q
    assert max(targets) - min(targets) <= 1
    assert targets == sorted(targets, reverse=True)  # the senior ones take the extra queues


def test_target_of_a_worker_not_ranked_is_an_error():
    with pytest.raises(ValueError):
        target_queue_count(4, ["a"], "b")


@pytest.fixture
def make(clock):
    membership = MemoryMembership(clock=clock, suspicion_timeout=30.0)
    leases = MemoryLeaseProvider(clock=clock)

    def make(name: str, drains: bool = True) -> Worker:
        balancer = LeaseBasedQueueBalancer(membership, leases, clock=clock, options=OPTIONS)
        return Worker(name, balancer, drains=drains)

    return make


async def start_all(cluster: Cluster, make, names, q: int, clock) -> None:
    for name in names:
        await cluster.start(make(name), queues(q))
        clock.advance(1.0)  # seniority follows the start order
    await cluster.tick(3)


async def test_workers_converge_on_fair_shares(make, clock):
    cluster = Cluster()
    await start_all(cluster, make, ["w0", "w1", "w2"], 8, clock)
    assert cluster.all_owned() == list(range(8))
    assert [len(cluster.shares()[w]) for w in ("w0", "w1", "w2")] == [3, 3, 2]


async def test_the_oldest_leases_go_first_when_over_target(make, clock):
    cluster = Cluster()
    first = await cluster.start(make("w0"), queues(8))
    acquired = search_order(queues(8), "w0")  # the order w0 leased them in
    assert numbers(first.owned) == list(range(8))
    clock.advance(1.0)
    await cluster.start(make("w1"), queues(8))
    await first.balancer.tick()
    assert first.changes[-1].removed == frozenset(acquired[:4])
    await cluster.tick()
    assert cluster.shares() == {"w0": numbers(acquired[4:]), "w1": numbers(acquired[:4])}


async def test_minimal_movement_when_one_joins(make, clock):
    cluster = Cluster()
    await start_all(cluster, make, ["w0", "w1", "w2"], 12, clock)
    before = cluster.shares()
    await cluster.start(make("w3"), queues(12))
    await cluster.tick(3)
    after = cluster.shares()
    moved = sum(len(set(before[w]) - set(after[w])) for w in before)
    assert moved == len(after["w3"]) == 3
    assert cluster.all_owned() == list(range(12))


async def test_half_the_workers_down(make, clock):
    cluster = Cluster()
    names = [f"w{i}" for i in range(6)]
    await start_all(cluster, make, names, 16, clock)
    for name in ("w1", "w3", "w5"):
        cluster.stop(name)
    await cluster.run_for(clock, 30.0)  # suspected dead; their leases still run
    assert len(cluster.all_owned()) < 16
    await cluster.run_for(clock, 35.0)  # their leases have expired
    assert cluster.all_owned() == list(range(16))
    assert sorted(len(s) for s in cluster.shares().values()) == [5, 5, 6]


async def test_leases_are_renewed_while_the_worker_runs(make, clock):
    cluster = Cluster()
    await start_all(cluster, make, ["w0"], 4, clock)
    [worker] = cluster.workers
    await cluster.run_for(clock, 600.0)
    assert numbers(worker.owned) == [0, 1, 2, 3]
    assert len(worker.changes) == 1  # the first share, and never a change since
    assert worker.balancer.get_tenure(queues(4)[0]).lease.epoch == 1


async def test_a_failed_renewal_drops_the_queue_at_once(clock, stores):
    membership = MemoryMembership(clock=clock)
    leases = SqliteLeaseProvider(stores(), clock=clock)
    balancer = LeaseBasedQueueBalancer(membership, leases, clock=clock, options=OPTIONS)
    worker = Worker("w0", balancer)
    await balancer.initialize("w0", queues(2))
    with stores().transaction() as conn:  # someone else's tenure, behind the worker's back
        conn.execute("UPDATE lease_queues SET owner = 'intruder', epoch = epoch + 1 WHERE queue = 1")
    clock.advance(25.0)
    await balancer.tick()  # no renewal due yet: nothing is noticed
    clock.advance(5.0)
    change = await balancer.tick()
    assert numbers(change.lost) == [1] and numbers(balancer.get_my_queues()) == [0]
    assert worker.changes[-1] == change


async def test_a_worker_whose_name_is_taken_over_loses_everything(clock):

    table, leases = MemoryMemberTable(), MemoryLeaseProvider(clock=clock)
    stale = LeaseBasedQueueBalancer(TableMembership(table, clock=clock), leases, clock=clock, options=OPTIONS)
    worker = Worker("w0", stale)
    await stale.initialize("w0", queues(3))
    clock.advance(31.0)  # the process stalled past the suspicion timeout
    await TableMembership(table, clock=clock).join("w0")  # another process took the name
    with pytest.raises(WorkerNameInUseError, match="lost its membership"):
        await stale.tick()
    assert numbers(worker.changes[-1].lost) == [0, 1, 2]
    assert stale.get_my_queues() == frozenset()
    assert len(await leases.acquire(queues(3), "w0", 60.0)) == 3  # handed back for the successor


def test_lease_based_needs_a_lease_provider():
    with pytest.raises(ConfigurationError, match="needs a lease provider"):
        LeaseBasedQueueBalancer(MemoryMembership(), None)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["process gone", "suspected"])
async def test_a_restarted_worker_takes_its_dead_predecessors_leases_at_once(clock, how):
    """Under its own name after a hard stop: let in at once (its predecessor's process is
    gone) or after the suspicion timeout, it takes back the leases still held under its name
    in its first round, with the next epoch, instead of waiting for them to expire."""
    table, leases = MemoryMemberTable(), MemoryLeaseProvider(clock=clock)
    dead: set[str] = set()

    def make() -> LeaseBasedQueueBalancer:
        membership = TableMembership(table, clock=clock, is_dead=dead.__contains__)  # one per process
        return LeaseBasedQueueBalancer(membership, leases, clock=clock, options=OPTIONS)

    old = make()
    await old.initialize("w1", queues(4))
    assert [old.get_tenure(q).lease.epoch for q in queues(4)] == [1, 1, 1, 1]
    if how == "process gone":
        dead.add(next(iter(table._rows.values())).incarnation)
        clock.advance(1.0)
    else:
        clock.advance(31.0)  # suspected; its leases run 29 s more
    new = make()
    await new.initialize("w1", queues(4))
    assert numbers(new.get_my_queues()) == [0, 1, 2, 3]
    assert [new.get_tenure(q).lease.epoch for q in queues(4)] == [2, 2, 2, 2]
    assert await leases.renew([old.get_tenure(q).lease for q in queues(4)], 60.0) == []  # the old tenure is fenced


async def test_a_second_live_process_of_a_name_reclaims_nothing(clock):
    table, leases = MemoryMemberTable(), MemoryLeaseProvider(clock=clock)
    first = LeaseBasedQueueBalancer(TableMembership(table, clock=clock), leases, clock=clock, options=OPTIONS)
    await first.initialize("w1", queues(2))
    second = LeaseBasedQueueBalancer(TableMembership(table, clock=clock), leases, clock=clock, options=OPTIONS)
    with pytest.raises(WorkerNameInUseError):
        await second.initialize("w1", queues(2))
    assert numbers(first.get_my_queues()) == [0, 1] and second.get_my_queues() == frozenset()
