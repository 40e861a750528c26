"""Leases: acquire, renew, expire, release, and the epoch fence; in memory and in SQLite
shared by two connections and by two processes."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import anyio
import pytest

from balancer import Lease
from balancer.leases import MemoryLeaseProvider, QueueOwnership
from streams.backends.embedded.balancer import SqliteLeaseProvider
from streams.core.clock import ManualClock
from streams.core.ids import QueueId

Q0, Q1, Q2 = QueueId(0), QueueId(1), QueueId(2)


async def test_acquire_is_granted_once_and_bumps_the_epoch(lease_factory, clock):
    a, b = lease_factory(), lease_factory()
    [lease] = await a.acquire([Q0], "a", 60.0)
    assert lease == Lease(Q0, "a", epoch=1, expires_at=clock.now() + 60.0)
    assert await b.acquire([Q0], "b", 60.0) == []
    assert await a.acquire([Q0], "a", 60.0) == []  # not even to its holder: one tenure at a time


async def test_an_expired_lease_goes_to_the_next_owner_and_fences_the_old_one(lease_factory, clock):
    a, b = lease_factory(), lease_factory()
    [old] = await a.acquire([Q0], "a", 60.0)
    clock.advance(60.0)  # expiry is exclusive: at expires_at the lease is gone
    [new] = await b.acquire([Q0], "b", 60.0)
    assert (new.owner, new.epoch) == ("b", 2)
    assert await a.renew([old], 60.0) == []
    await a.release([old])  # a stale release must not free the new tenure
    assert await a.acquire([Q0], "a", 60.0) == []


async def test_renew_extends_from_now_only_for_the_holder(lease_factory, clock):
    a, b = lease_factory(), lease_factory()
    [lease] = await a.acquire([Q0], "a", 60.0)
    clock.advance(29.0)
    [renewed] = await a.renew([lease], 60.0)
    assert (renewed.epoch, renewed.expires_at) == (1, clock.now() + 60.0)
    forged = Lease(Q0, "b", 1, lease.expires_at)
    assert await b.renew([forged], 60.0) == []
    clock.advance(59.0)  # past the first expiry, within the renewed one
    assert await b.acquire([Q0], "b", 60.0) == []


async def test_renewing_after_expiry_fails_even_if_nobody_took_the_queue(lease_factory, clock):
    a = lease_factory()
    [lease] = await a.acquire([Q0], "a", 60.0)
    clock.advance(61.0)
    assert await a.renew([lease], 60.0) == []
    [again] = await a.acquire([Q0], "a", 60.0)
    assert again.epoch == 2  # a new tenure, never the old one resumed


async def test_release_frees_at_once_and_epochs_keep_growing(lease_factory):
    a, b = lease_factory(), lease_factory()
    [lease] = await a.acquire([Q0], "a", 60.0)
    await a.release([lease])
    [taken] = await b.acquire([Q0], "b", 60.0)
    assert taken.epoch == 2
    await b.release([taken])
    [back] = await a.acquire([Q0], "a", 60.0)
    assert back.epoch == 3


async def test_acquire_tries_queues_in_order_up_to_the_limit(lease_factory):
    a, b = lease_factory(), lease_factory()
    await a.acquire([Q1], "a", 60.0)
    granted = await b.acquire([Q1, Q2, Q0], "b", 60.0, limit=2)
    assert [lease.queue for lease in granted] == [Q2, Q0]
    assert await b.acquire([Q1, Q2, Q0], "b", 60.0, limit=0) == []


async def test_a_stale_owners_checkpoint_is_fenced_in_the_same_store(stores, clock):
    """The checkpoint write carries the lease; after a new tenure it changes nothing."""
    store = stores()
    leases = SqliteLeaseProvider(store, clock=clock)
    [old] = await leases.acquire([Q0], "a", 60.0)
    clock.advance(61.0)
    [new] = await SqliteLeaseProvider(stores(), clock=clock).acquire([Q0], "b", 60.0)

    def write_checkpoint(lease: Lease, position: int) -> int:
        fence, params = leases.fence_condition(lease)
        with store.transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS test_checkpoints(queue INTEGER PRIMARY KEY, position INTEGER)")
            conn.execute("INSERT OR IGNORE INTO test_checkpoints VALUES (0, 0)")
            cursor = conn.execute(
                f"UPDATE test_checkpoints SET position = :position WHERE queue = 0 AND {fence}",
                {"position": position, **params},
            )
            return cursor.rowcount

    assert await anyio.to_thread.run_sync(write_checkpoint, new, 20) == 1
    assert await anyio.to_thread.run_sync(write_checkpoint, old, 10) == 0
    with store.connection() as conn:
        assert conn.execute("SELECT position FROM test_checkpoints").fetchone() == (20,)


async def test_leases_of_different_categories_are_apart(stores, clock):
    first = SqliteLeaseProvider(stores(), category="provider-a", clock=clock)
    second = SqliteLeaseProvider(stores(), category="provider-b", clock=clock)
    assert len(await first.acquire([Q0], "a", 60.0)) == 1
    assert len(await second.acquire([Q0], "b", 60.0)) == 1


HOLDER = textwrap.dedent(
    """
    import json, sys
    import anyio
    from balancer import ManualClock
    from streams.backends.embedded.balancer import SqliteLeaseProvider
    from streams.core.ids import QueueId
    from streams.backends.embedded.store import EmbeddedStore

    path, now = sys.argv[1], float(sys.argv[2])
    with EmbeddedStore(path) as store:
        leases = SqliteLeaseProvider(store, clock=ManualClock(now))
        granted = anyio.run(leases.acquire, [QueueId(0), QueueId(1)], "other-process", 60.0)
    print(json.dumps([[lease.queue.number, lease.epoch, lease.expires_at] for lease in granted]))
    """
)


async def test_a_lease_held_by_another_process(stores, clock, tmp_path):
    leases = SqliteLeaseProvider(stores(), clock=clock)
    [mine] = await leases.acquire([Q1], "this-process", 60.0)
    result = await anyio.run_process([sys.executable, "-c", HOLDER, str(tmp_path / "store"), str(clock.now())])
    # The other process got queue 0 only: queue 1 is held here.
    assert json.loads(result.stdout) == [[0, 1, clock.now() + 60.0]]
    assert await leases.acquire([Q0], "this-process", 60.0) == []
    clock.advance(60.0)
    [taken] = await leases.acquire([Q0], "this-process", 60.0)
    assert taken.epoch == 2
    assert await leases.renew([mine], 60.0) == []  # expired here too meanwhile


@pytest.mark.parametrize("length", [0.5, 60.0])
async def test_expiry_is_exactly_the_length(lease_factory, clock, length):
    a, b = lease_factory(), lease_factory()
    await a.acquire([Q0], "a", length)
    clock.advance(length - 0.25)
    assert await b.acquire([Q0], "b", length) == []
    clock.advance(0.25)
    assert len(await b.acquire([Q0], "b", length)) == 1


def test_a_tenure_moves_on_with_each_renewal_and_ends_when_its_lease_is_lost_or_released():
    clock = ManualClock(1_000.0)
    provider = MemoryLeaseProvider(clock=clock)
    ownership = QueueOwnership(provider, "w1", clock=clock, lease_length=10.0, renew_period=4.0)
    anyio.run(ownership.acquire, [Q0, Q1])
    kept, released = ownership.tenure(Q0), ownership.tenure(Q1)
    assert kept is not None and released is not None
    assert (kept.lease.epoch, kept.held_until) == (1, 1_010.0)
    clock.advance(4)
    assert anyio.run(ownership.renew_due) == frozenset()
    assert kept.held_until == 1_014.0 and ownership.tenure(Q0) is kept  # the same tenure, renewed
    anyio.run(ownership.release, Q1)
    assert not released.held() and ownership.tenure(Q1) is None
    clock.advance(9.9)
    assert kept.held()
    clock.advance(0.1)  # no renewal for a whole lease: gone by this worker's own clock
    assert not kept.held() and ownership.tenure(Q0) is None
    assert anyio.run(ownership.renew_due) == {Q0}
    assert kept.held_until == -math.inf  # ended: a new grant is a new tenure
    anyio.run(ownership.renew_due)  # a queue just lost is not taken again in the same round
    anyio.run(ownership.acquire, [Q0])
    again = ownership.tenure(Q0)
    assert again is not None and again is not kept and again.lease.epoch == 2
