"""Membership: unique names, heartbeats, the suspicion timeout, maturity."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from balancer import MemberRecord, mature_workers
from balancer.membership import instance_is_dead, new_instance_id, parse_instance
from streams.core.errors import ConfigurationError, WorkerNameInUseError


async def test_a_member_is_live_until_the_suspicion_timeout_passes(membership_factory, clock):
    membership = membership_factory(suspicion_timeout=30.0)
    await membership.join("w1")
    clock.advance(30.0)
    assert (await membership.snapshot()).is_live("w1")
    clock.advance(0.5)
    assert not (await membership.snapshot()).is_live("w1")


async def test_heartbeats_keep_a_member_live(membership_factory, clock):
    membership = membership_factory(suspicion_timeout=30.0)
    await membership.join("w1")
    for _ in range(5):
        clock.advance(20.0)
        await membership.heartbeat("w1")
    snapshot = await membership.snapshot()
    assert snapshot.is_live("w1")
    assert snapshot.members["w1"].joined_at == 1_000.0


async def test_joining_under_a_live_name_is_refused(membership_factory, clock):
    first, second = membership_factory(), membership_factory()
    await first.join("w1")
    clock.advance(10.0)
    with pytest.raises(WorkerNameInUseError, match=r"'w1' is in use.*20\.0 s from now"):
        await second.join("w1")


async def test_a_dead_members_name_can_be_taken_and_the_old_process_is_told(membership_factory, clock):
    old, new = membership_factory(), membership_factory()
    await old.join("w1")
    clock.advance(31.0)
    record = await new.join("w1")
    assert record.joined_at == clock.now()
    with pytest.raises(WorkerNameInUseError, match="lost its membership"):
        await old.heartbeat("w1")
    await new.heartbeat("w1")  # the new process is unaffected
    assert (await new.snapshot()).is_live("w1")


async def test_a_late_heartbeat_revives_the_member_as_newly_joined(membership_factory, clock):
    membership = membership_factory()
    await membership.join("w1")
    clock.advance(45.0)
    record = await membership.heartbeat("w1")
    assert record.joined_at == clock.now()  # its maturity starts again
    assert (await membership.snapshot()).is_live("w1")


async def test_leave_frees_the_name_at_once(membership_factory):
    first, second = membership_factory(), membership_factory()
    await first.join("w1")
    await first.leave("w1")
    assert not (await first.snapshot()).is_live("w1")
    await second.join("w1")
    assert (await second.snapshot()).is_live("w1")


async def test_join_is_reentrant_for_one_oracle_and_the_last_leave_counts(membership_factory):
    membership = membership_factory()
    first = await membership.join("w1")
    again = await membership.join("w1")
    assert again == first
    await membership.leave("w1")
    assert (await membership.snapshot()).is_live("w1")
    await membership.leave("w1")
    assert not (await membership.snapshot()).is_live("w1")


async def test_heartbeat_before_join_is_a_clear_mistake(membership_factory):
    with pytest.raises(ConfigurationError, match="call join"):
        await membership_factory().heartbeat("w1")


async def test_live_members_are_ranked_by_seniority(membership_factory, clock):
    membership = membership_factory()
    for name in ("c", "a", "b"):
        await membership.join(name)
        clock.advance(1.0)
    await membership.leave("a")
    snapshot = await membership.snapshot()
    assert [r.worker for r in snapshot.live_members()] == ["c", "b"]
    assert set(snapshot.members) == {"a", "b", "c"}


def member(name: str, joined_at: float) -> MemberRecord:
    return MemberRecord(name, "i", joined_at=joined_at, last_heartbeat=joined_at)


def test_maturity_a_worker_joining_a_running_cluster_waits():
    live = [member("a", 0.0), member("b", 0.0), member("new", 500.0)]
    assert mature_workers(live, now=619.0, maturity_period=120.0) == {"a", "b"}
    assert mature_workers(live, now=620.0, maturity_period=120.0) == {"a", "b", "new"}


def test_maturity_a_cold_start_counts_every_founder_at_once():
    live = [member("a", 0.0), member("b", 30.0), member("c", 119.0)]
    assert mature_workers(live, now=119.0, maturity_period=120.0) == {"a", "b", "c"}


def test_maturity_survivors_count_when_every_mature_worker_is_gone():
    live = [member("young", 500.0), member("younger", 530.0)]
    assert mature_workers(live, now=531.0, maturity_period=120.0) == {"young", "younger"}


def test_maturity_zero_counts_everyone():
    live = [member("a", 0.0), member("b", 10.0)]
    assert mature_workers(live, now=10.0, maturity_period=0.0) == {"a", "b"}


def dead_instance_id() -> str:
    """An instance id of this machine whose process has ended (and was reaped)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host, _, nonce = new_instance_id().split("/")
    return f"{host}/{ended.pid}/{nonce}"


async def test_a_name_held_by_a_dead_process_is_taken_at_once(membership_factory, clock):
    """A restart after a hard stop: the old row still looks live, but its process is gone."""
    old, new = membership_factory(), membership_factory()
    await old.join("w1")
    mine = (await old.snapshot()).members["w1"].incarnation
    assert parse_instance(mine) is not None and not instance_is_dead(mine)  # this process
    gone = dead_instance_id()
    assert instance_is_dead(gone)
    await old._table.update("w1", lambda current: dataclasses.replace(current, incarnation=gone))
    clock.advance(5.0)  # well within the suspicion timeout
    record = await new.join("w1")
    assert record.incarnation not in (gone, mine) and record.joined_at == clock.now()
    assert (await new.snapshot()).members["w1"].incarnation == record.incarnation


async def test_a_name_held_on_another_host_waits_for_the_timeout(membership_factory, clock):
    first, second = membership_factory(), membership_factory()
    await first.join("w1")
    await first._table.update("w1", lambda current: dataclasses.replace(current, incarnation="elsewhere/1/abc"))
    with pytest.raises(WorkerNameInUseError, match="'w1' is in use"):
        await second.join("w1")
