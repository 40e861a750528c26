"""Group commit: concurrent submits share writes; cancellations never lose or wedge anything."""

from __future__ import annotations

import threading

import anyio
import pytest

from streams.backends.embedded.group_commit import GroupCommitter


class GatedWriter:
    """A ``write`` that blocks its worker thread until the test opens the gate."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()

    def __call__(self, items: list[int]) -> None:
        self.entered.set()
        self.gate.wait(10)
        if -1 in items:
            raise ValueError("refused")
        self.batches.append(list(items))


async def until_writing(writer: GatedWriter) -> None:
    with anyio.fail_after(10):
        while not writer.entered.is_set():
            await anyio.sleep(0.001)


async def test_callers_arriving_during_a_write_share_the_next_one() -> None:
    writer = GatedWriter()
    committer = GroupCommitter.threaded(writer)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(committer.submit, [1])
            await until_writing(writer)
            for n in (2, 3, 4):
                tg.start_soon(committer.submit, [n])
            await anyio.sleep(0.01)  # let them queue behind the running write
            writer.gate.set()
    assert writer.batches[0] == [1]
    assert sorted(writer.batches[1]) == [2, 3, 4] and len(writer.batches) == 2


async def test_a_failed_write_raises_in_every_caller_of_its_batch_only() -> None:
    writer = GatedWriter()
    committer = GroupCommitter.threaded(writer)
    errors: list[Exception] = []

    async def submit(items: list[int]) -> None:
        try:
            await committer.submit(items)
        except ValueError as exc:
            errors.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(submit, [1])
            await until_writing(writer)
            tg.start_soon(submit, [2])
            tg.start_soon(submit, [-1])
            await anyio.sleep(0.01)
            writer.gate.set()
    assert writer.batches == [[1]]
    assert len(errors) == 2
    await committer.submit([5])
    assert writer.batches == [[1], [5]]


async def test_cancelled_waiters_neither_block_later_writes_nor_get_written() -> None:
    writer = GatedWriter()
    committer = GroupCommitter.threaded(writer)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(committer.submit, [1])
            await until_writing(writer)
            with anyio.CancelScope() as waiters:
                async with anyio.create_task_group() as inner:
                    inner.start_soon(committer.submit, [2])
                    inner.start_soon(committer.submit, [3])
                    await anyio.sleep(0.01)
                    waiters.cancel()
            writer.gate.set()
    with anyio.fail_after(5):
        await committer.submit([4])
    assert writer.batches == [[1], [4]]


async def test_a_waiter_cancelled_as_it_is_handed_the_lead_does_not_wedge_the_committer() -> None:
    writer = GatedWriter()
    committer = GroupCommitter.threaded(writer)
    waiter_scope = anyio.CancelScope()

    async def leader() -> None:
        await committer.submit([1])
        waiter_scope.cancel()  # in the same step that handed the next batch to the waiter

    async def waiter() -> None:
        with waiter_scope:
            await committer.submit([2])

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader)
            await until_writing(writer)
            tg.start_soon(waiter)
            await anyio.sleep(0.01)
            writer.gate.set()
        await committer.submit([3])
    # The waiter took the lead and was cancelled before its write began, or was cancelled
    # before it took the lead: either way [2] is written at most once and nothing is stuck.
    assert writer.batches in ([[1], [3]], [[1], [2], [3]])


async def test_when_a_new_leader_is_cancelled_another_waiter_writes_the_batch() -> None:
    writer = GatedWriter()
    committer = GroupCommitter.threaded(writer)
    first_waiter = anyio.CancelScope()

    async def leader() -> None:
        await committer.submit([1])
        first_waiter.cancel()

    async def cancelled_waiter() -> None:
        with first_waiter:
            await committer.submit([2])

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader)
            await until_writing(writer)
            tg.start_soon(cancelled_waiter)
            await anyio.sleep(0.01)
            tg.start_soon(committer.submit, [3])
            await anyio.sleep(0.01)
            writer.gate.set()
    assert writer.batches[0] == [1] and 3 in writer.batches[-1]
    assert sum(batch.count(2) for batch in writer.batches) <= 1


async def test_a_caller_cancelled_before_its_write_starts_writes_nothing() -> None:
    writer = GatedWriter()
    writer.gate.set()
    committer = GroupCommitter.threaded(writer)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await committer.submit([1])
    with anyio.fail_after(5):
        await committer.submit([2])
    assert writer.batches == [[2]]


async def test_empty_submit_writes_nothing() -> None:
    writer = GatedWriter()
    await GroupCommitter.threaded(writer).submit([])
    assert writer.batches == [] and not writer.entered.is_set()


@pytest.mark.parametrize("producers", [1, 25])
async def test_every_item_is_written_once_in_each_callers_order(producers: int) -> None:
    written: list[tuple[int, int]] = []
    committer: GroupCommitter[tuple[int, int]] = GroupCommitter.threaded(written.extend)

    async def producer(p: int) -> None:
        for n in range(20):
            await committer.submit([(p, n)])

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for p in range(producers):
                tg.start_soon(producer, p)
    assert len(written) == producers * 20
    for p in range(producers):
        assert [n for q, n in written if q == p] == list(range(20))
