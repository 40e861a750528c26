"""The worker's garbage-collector policy (agents.gc_policy): applied once per
process while workers run, restored after the last; by default in any process whose
collector the application leaves as CPython set it, in a process headrace owns
(``headrace worker``) whatever its settings, and with ``tune_gc=True``; never with
``tune_gc=False``, nor by a provider that runs no agents; survivors of a full collection
are frozen, and a cycle among them is still collected once the frozen objects have grown
enough to warrant a walk of everything."""

from __future__ import annotations

import gc
import sys
import weakref

import anyio

from agents import manager, pulling_agent
from agents.gc_policy import CPYTHON_THRESHOLDS, POLICY, SWEEP_GROWTH, YOUNG_THRESHOLD, GcPolicy
from streams import StreamId, StreamProvider
from tests.agents.delivery.conftest import drained


def _collector() -> tuple[tuple[int, int, int], int, int]:
    """Thresholds, frozen objects, and how many of the callbacks are a policy's."""
    ours = sum(1 for cb in gc.callbacks if isinstance(getattr(cb, "__self__", None), GcPolicy))
    return gc.get_threshold(), gc.get_freeze_count(), ours


async def test_a_worker_tunes_the_collector_while_it_runs_and_restores_it_after():
    before = _collector()
    assert before[1:] == (0, 0) and not POLICY.active
    provider = StreamProvider.memory(queues=2, tune_gc=True)
    seen = []
    async with provider:
        during = _collector()
        await provider.get_stream(StreamId("s", "k")).subscribe(seen.extend)
        await provider.get_stream(StreamId("s", "k")).on_next_batch([1, 2])
        await drained(provider)
    assert [e.value for e in seen] == [1, 2]
    assert during[0] == (YOUNG_THRESHOLD, before[0][1], before[0][2])
    assert during[1] > 1000  # what start-up left: modules, classes, the test's own objects
    assert during[2] == 1
    assert _collector() == before and not POLICY.active


async def test_tune_gc_false_leaves_the_collector_alone():
    before = _collector()
    async with StreamProvider.memory(queues=1, tune_gc=False):
        during = _collector()
    assert during == before == _collector()
    assert not POLICY.active


async def test_a_worker_tunes_it_by_default_and_undoes_it_when_it_stops():
    before = _collector()
    assert before == (CPYTHON_THRESHOLDS, 0, 0)  # the process's collector as CPython set it
    provider = StreamProvider.memory(queues=2)  # tune_gc unset, in a process headrace does not own
    seen = []
    async with provider:
        during = _collector()
        assert POLICY.active
        await provider.get_stream(StreamId("s", "k")).subscribe(seen.extend)
        await provider.get_stream(StreamId("s", "k")).on_next_batch([1, 2])
        await drained(provider)
    assert [e.value for e in seen] == [1, 2]
    assert during[0] == (YOUNG_THRESHOLD, before[0][1], before[0][2]) and during[1] > 1000 and during[2] == 1
    assert _collector() == before and not POLICY.active
    # Several providers of one process, one after the other and nested: each undone.
    async with StreamProvider.memory(queues=1), StreamProvider.memory(queues=1, tune_gc=True):
        assert _collector()[0][0] == YOUNG_THRESHOLD
    async with StreamProvider.memory(queues=1):
        async with StreamProvider.memory(queues=1, tune_gc=False):  # the other one's stays
            assert _collector()[0][0] == YOUNG_THRESHOLD
    assert _collector() == before and not POLICY.active


async def test_a_provider_that_runs_no_agents_leaves_the_collector_alone():
    before = _collector()
    provider = StreamProvider.memory(queues=1)
    async with provider.client():
        assert _collector() == before and not POLICY.active


async def test_an_application_that_manages_its_collector_keeps_it_unless_it_asks():
    before = gc.get_threshold()
    try:
        gc.set_threshold(5000, 20, 20)  # thresholds of its own
        async with StreamProvider.memory(queues=1):
            assert gc.get_threshold() == (5000, 20, 20) and not POLICY.active
        async with StreamProvider.memory(queues=1, tune_gc=True):
            assert gc.get_threshold() == (YOUNG_THRESHOLD, 20, 20)
        assert gc.get_threshold() == (5000, 20, 20)
        gc.set_threshold(*before)
        gc.freeze()  # objects the application froze (its set-up) do not say it manages it
        frozen = gc.get_freeze_count()
        async with StreamProvider.memory(queues=1):
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_freeze_count() >= frozen
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # thawed with the rest
        gc.disable()  # the application runs collections itself
        async with StreamProvider.memory(queues=1):
            assert gc.get_threshold() == before and not POLICY.active
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*before)
    assert not POLICY.wanted(False) and POLICY.wanted(True)


async def test_a_process_headrace_owns_tunes_it_by_default_and_not_when_told_not_to():
    owned = GcPolicy()
    owned.own_process()  # what `headrace worker` does before it starts its provider
    assert owned.wanted(None) and owned.wanted(True) and not owned.wanted(False)
    POLICY.owns_process = True
    try:
        before = _collector()
        async with StreamProvider.memory(queues=1, tune_gc=False):
            assert _collector() == before
        async with StreamProvider.memory(queues=1):
            assert _collector()[0] == (YOUNG_THRESHOLD, before[0][1], before[0][2])
        assert _collector() == before
    finally:
        POLICY.owns_process = False


async def test_two_workers_in_one_process_apply_it_once_and_the_last_one_restores_it():
    before = _collector()
    async with StreamProvider.memory(queues=1, tune_gc=True):
        first = _collector()
        async with StreamProvider.memory(queues=1, tune_gc=True):
            both = _collector()
        after_inner = _collector()
        assert POLICY.active
    assert first[0] == both[0] == after_inner[0] == (YOUNG_THRESHOLD, before[0][1], before[0][2])
    assert both[2] == after_inner[2] == 1  # one callback, not one per worker
    assert _collector() == before and not POLICY.active


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_young_survivors_are_frozen_and_a_full_collection_sweeps_a_cycle_among_them():
    policy = GcPolicy()
    policy.enter()
    try:
        base = gc.get_freeze_count()
        cycle = _Node()
        alive = weakref.ref(cycle)
        kept = [[i] for i in range(YOUNG_THRESHOLD + 1000)]  # a young collection comes, and freezes them
        assert gc.get_freeze_count() >= base + YOUNG_THRESHOLD // 2  # no collection walks them again
        del cycle
        more = [[i] for i in range(YOUNG_THRESHOLD + 1000)]  # another: the frozen cycle is not walked
        assert alive() is not None
        assert policy.sweeps == 0
        assert not policy.sweep_due()  # not within SWEEP_INTERVAL of the start, grown or not
        gc.collect()  # a full collection (the application's, or the worker's sweep) walks all
        assert alive() is None
        assert policy.sweeps == 1
        assert gc.get_freeze_count() >= len(kept) + len(more)  # frozen again after the sweep
    finally:
        policy.leave()
    assert gc.get_freeze_count() == 0


async def test_a_worker_sweeps_once_the_heap_has_doubled(monkeypatch):
    # The worker's policy, with no wait between sweeps and a look every 10 ms.
    policy = GcPolicy(sweep_interval=0.0, check_period=0.01)
    monkeypatch.setattr(manager, "GC_POLICY", policy)
    async with StreamProvider.memory(queues=1, tune_gc=True):
        assert policy.active and not policy.sweep_due()  # nothing has grown since start-up
        cycle = _Node()
        alive = weakref.ref(cycle)
        few = [[i] for i in range(YOUNG_THRESHOLD + 1000)]
        del cycle
        # The heap doubles (a list of one int is 3 blocks); frozen by the young collections.
        grown = [[i] for i in range(SWEEP_GROWTH * sys.getallocatedblocks() // 2)]
        assert alive() is not None and policy.sweeps == 0
        with anyio.fail_after(10):
            while policy.sweeps == 0:  # the worker sees the heap doubled and sweeps
                await anyio.sleep(0.01)
        assert alive() is None and policy.sweeps == 1
        assert not policy.sweep_due()  # what the sweep left is the new measure
        assert gc.get_freeze_count() >= len(grown) + len(few)
    assert not policy.active and gc.get_freeze_count() == 0


def test_leaving_more_often_than_entering_changes_nothing():
    policy = GcPolicy()
    before = _collector()
    policy.leave()
    assert _collector() == before and not policy.active


async def test_a_read_that_opens_streams_freezes_what_it_made_and_other_reads_do_not(monkeypatch):
    policy = GcPolicy()
    monkeypatch.setattr(manager, "GC_POLICY", policy)
    monkeypatch.setattr(pulling_agent, "GC_POLICY", policy)
    provider = StreamProvider.memory(queues=1, tune_gc=True)
    made: list[object] = []
    kept: list[list[int]] = []

    @provider.implicit("devices")
    class Device:
        def __init__(self, stream_id: StreamId) -> None:
            made.append(self)

        def on_next(self, batch: list) -> None:
            kept.append([len(batch)])  # one tracked object a batch, kept

    async with provider:
        for i in range(100):
            await provider.get_stream(StreamId("devices", f"d{i}")).on_next(i)
        await drained(provider)
        assert len(made) == 100 and len(kept) == 100
        # Far fewer new objects than a young collection needs: the read froze them.
        young = {id(o) for o in gc.get_objects()}
        assert not any(id(d) in young for d in made)
        assert all(gc.is_tracked(d) for d in made)  # frozen, not untracked
        for i in range(100):  # the same streams again: no activation made, nothing frozen
            await provider.get_stream(StreamId("devices", f"d{i}")).on_next(i)
        await drained(provider)
        young = {id(o) for o in gc.get_objects()}
        assert len(kept) == 200 and all(id(k) in young for k in kept[100:])
    assert not policy.active
