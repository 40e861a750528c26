"""A queue's processing clock (agents.ticking.QueueTicks.now) and a worker's leases
(balancer.leases.QueueOwnership) follow elapsed time: a step of the wall clock, forward or
back, moves neither."""

from __future__ import annotations

import math
from types import SimpleNamespace

import anyio

from agents.checkpoint import Holds
from agents.pulling_agent import _stamp_clock
from agents.ticking import QueueTicks
from balancer.leases import LeaseTimes, MemoryLeaseProvider, QueueOwnership
from streams.core.clock import ManualClock
from streams.core.ids import QueueId


def _ticks(clock: ManualClock) -> QueueTicks:
    context = SimpleNamespace(clock=clock)  # now() reads only the context's clock
    return QueueTicks(QueueId(0), context, Holds(), SimpleNamespace(), {}, lambda *a: None, None)  # type: ignore[arg-type]


def _read(ticks: QueueTicks, clock: ManualClock, arrival: float) -> None:
    """A read whose newest record arrived at ``arrival``, taken as the pulling agent takes it."""
    container = SimpleNamespace(clock_before=None, arrival_time=arrival)
    _stamp_clock([(None, container)], ticks, clock.monotonic)  # type: ignore[list-item]


def test_the_processing_clock_moves_on_from_the_newest_arrival_by_elapsed_time():
    clock = ManualClock(1_000.0)
    ticks = _ticks(clock)
    assert ticks.now() == -math.inf  # nothing read, not caught up
    _read(ticks, clock, 998.0)  # a backlog: the clock is the newest arrival read
    clock.advance(3)
    assert ticks.now() == 998.0
    ticks.caught_up = True
    clock.advance(2)
    assert ticks.now() == 1_003.0  # 998, read 5 s ago


def test_a_wall_clock_step_forward_or_back_moves_no_tick():
    clock = ManualClock(1_000.0)
    ticks = _ticks(clock)
    ticks.caught_up = True
    _read(ticks, clock, 1_000.0)
    clock.step(600)  # ahead: no jump
    clock.advance(1)
    assert ticks.now() == 1_001.0
    clock.step(-1_200)  # behind the true time: no stall
    clock.advance(1)
    assert ticks.now() == 1_002.0
    _read(ticks, clock, 1_002.5)  # the producers' clocks keep it right
    clock.advance(0.5)
    assert ticks.now() == 1_003.0


def test_a_queue_caught_up_before_anything_arrived_starts_from_the_wall_clock_once_and_never_goes_back():
    clock = ManualClock(1_000.0)
    ticks = _ticks(clock)
    ticks.caught_up = True
    assert ticks.now() == 1_000.0
    clock.step(-600)
    clock.advance(1)
    assert ticks.now() == 1_001.0
    _read(ticks, clock, 500.0)  # a producer whose clock is behind: the clock holds
    assert ticks.now() == 1_001.0


def test_a_worker_keeps_its_leases_through_a_step_forward_and_back():
    clock = ManualClock(1_000.0)
    provider = MemoryLeaseProvider(clock=clock)
    ownership = QueueOwnership(provider, "w1", clock=clock, lease_length=10.0, renew_period=4.0)

    async def main() -> list[frozenset[QueueId]]:
        await ownership.acquire([QueueId(0), QueueId(1)])
        lost = []
        for step in (600.0, -600.0, -600.0, 600.0):
            clock.step(step)
            for _ in range(3):
                clock.advance(2)
                lost.append(await ownership.renew_due())
        return lost

    assert anyio.run(main) == [frozenset()] * 12
    assert ownership.owned == {QueueId(0), QueueId(1)}
    assert ownership.tenure(QueueId(0)) is not None


def test_a_worker_judges_its_lease_by_the_time_since_renewal_not_by_the_wall_clock():
    clock = ManualClock(1_000.0)
    ownership = QueueOwnership(MemoryLeaseProvider(clock=clock), "w1", clock=clock, lease_length=10.0)
    anyio.run(ownership.acquire, [QueueId(0)])
    clock.step(-3_600)  # the wall clock says the lease has an hour left: it has not
    clock.advance(10)
    assert ownership.tenure(QueueId(0)) is None  # not read under a lease that may have moved on
    assert anyio.run(ownership.renew_due) == {QueueId(0)}


def test_lease_times_never_take_a_lease_early_nor_cut_ones_own_short():
    clock = ManualClock(1_000.0)
    times = LeaseTimes(clock, adopt_after=60.0)
    clock.advance(1)
    assert times.read() == (1_001.0, 1_001.0)
    clock.step(600)
    assert times.read() == (1_001.0, 1_601.0)  # judge others by the steady clock
    clock.step(-1_200)
    assert times.read() == (401.0, 1_001.0)  # write one's own from it
    clock.advance(60)  # stepped for a lease length: taken as the clock's right time
    assert times.read() == (461.0, 461.0)


def test_other_workers_see_a_stepped_back_workers_lease_as_held():
    clock = ManualClock(1_000.0)
    provider = MemoryLeaseProvider(clock=clock)
    [lease] = anyio.run(provider.acquire, [QueueId(0)], "w1", 10.0)
    clock.step(-600)
    clock.advance(5)
    [renewed] = anyio.run(provider.renew, [lease], 10.0)
    assert renewed.expires_at == 1_015.0  # from the steady clock, not 415
