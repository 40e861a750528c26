"""The maintenance loop on a manual clock: renewals on time, transient store failures,
shutdown."""

from __future__ import annotations

import logging
import sqlite3

import anyio

from balancer import BalancerOptions, LeaseBasedQueueBalancer, MemoryLeaseProvider, MemoryMembership
from streams.backends.embedded.balancer import SqliteLeaseProvider
from streams.backends.embedded.store import EmbeddedStore
from tests.balancer.cluster import Worker, numbers, queues

OPTIONS = BalancerOptions(lease_length=60.0, renew_period=29.0, refresh_period=5.0)


async def let_time_pass(clock, seconds: float, step: float = 5.0) -> None:
    """Round by round: wait for the loop to sleep, then move time on."""
    for _ in range(round(seconds / step)):
        await clock.until_sleeping()
        clock.advance(step)
    await clock.until_sleeping()


async def test_run_renews_until_shutdown_which_frees_every_lease(clock):
    membership, leases = MemoryMembership(clock=clock), MemoryLeaseProvider(clock=clock)
    balancer = LeaseBasedQueueBalancer(membership, leases, clock=clock, options=OPTIONS)
    await balancer.initialize("w0", queues(3))
    async with anyio.create_task_group() as tg:
        tg.start_soon(balancer.run)
        await let_time_pass(clock, 300.0)
        assert numbers(balancer.get_my_queues()) == [0, 1, 2]
        assert await leases.acquire(queues(3), "w1", 60.0) == []
        assert (await membership.snapshot()).is_live("w0")
        await balancer.shutdown()
    # the task group ended: run returned
    assert balancer.get_my_queues() == frozenset()
    assert len(await leases.acquire(queues(3), "w1", 60.0)) == 3
    assert not (await membership.snapshot()).is_live("w0")


async def test_a_locked_store_holds_a_round_back_but_no_round_fails_and_no_queue_is_lost(clock, tmp_path, caplog):
    store = EmbeddedStore(tmp_path / "store", busy_timeout=0.05)
    balancer = LeaseBasedQueueBalancer(
        MemoryMembership(clock=clock),
        SqliteLeaseProvider(store, clock=clock),
        clock=clock,
        options=OPTIONS,
    )
    worker = Worker("w0", balancer)
    await balancer.initialize("w0", queues(2))
    async with anyio.create_task_group() as tg:
        tg.start_soon(balancer.run)
        await let_time_pass(clock, 25.0)
        # A writer that does not take turns (a sqlite3 shell) holds the write lock.
        blocker = sqlite3.connect(tmp_path / "store" / "headrace.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with caplog.at_level(logging.WARNING):
            clock.advance(5.0)  # renewals are due, and the store is locked
            await anyio.sleep(0.5)  # ten busy_timeouts of real time: the round backs off
            assert not clock._sleepers  # still in its round: it neither failed nor slept
            blocker.execute("ROLLBACK")
            blocker.close()
            await clock.until_sleeping()  # the round finished
        assert "backing off" in caplog.text
        assert "balancing round failed" not in caplog.text
        assert numbers(balancer.get_my_queues()) == [0, 1]
        assert balancer.get_tenure(queues(2)[0]).lease.expires_at == clock.now() + 60.0
        await balancer.shutdown()
    assert len(worker.changes) == 1  # nothing was ever lost
    store.close()
