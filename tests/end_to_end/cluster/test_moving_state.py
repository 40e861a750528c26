"""A queue moving between two workers on one store takes its consumers' window state along:
the new owner replays from the checkpoint the open window held back, so the result is the
one a single worker would have produced."""

from __future__ import annotations

import anyio

from balancer import BalancerOptions
from streams import StreamId, StreamProvider
from streams.eventtime import EventTime, OrderingPolicy, Sum, Tumbling
from tests.agents.delivery.conftest import drained

T0 = 1_700_000_000.0
FAST = BalancerOptions(lease_length=2.0, renew_period=0.5, refresh_period=0.1)
SID = StreamId("tolls", "plaza-1")


def worker(path, results: list) -> StreamProvider:
    provider = StreamProvider.embedded(path, queues=1, balancer_options=FAST)

    @provider.implicit("tolls")
    class Totals:
        event_time = EventTime(
            OrderingPolicy(out_of_order=5, timestamp_by="t"), Tumbling(60, origin=T0), Sum(), select="toll"
        )

        def __init__(self, stream_id: StreamId) -> None:
            pass

        async def on_window(self, result) -> None:  # type: ignore[no-untyped-def]
            results.append((provider.worker_name, result.start - T0, result.end - T0, result.value))

    return provider


class Running:
    """A worker run in a task of its own, so that workers can leave in any order."""

    def __init__(self, provider: StreamProvider) -> None:
        self.provider = provider
        self._leave, self._left = anyio.Event(), anyio.Event()

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
        try:
            async with self.provider:
                task_status.started()
                await self._leave.wait()
        finally:
            self._left.set()

    async def leave(self) -> None:
        self._leave.set()
        await self._left.wait()


async def test_an_open_window_is_rebuilt_by_the_next_owner(tmp_path):
    results: list = []
    first, second = worker(tmp_path, results), worker(tmp_path, results)
    async with anyio.create_task_group() as tg:
        running = Running(first)
        await tg.start(running.run)
        for offset, toll in [(1, 2.0), (10, 3.0), (30, 4.0)]:  # window [0, 60) stays open
            await first.get_stream(SID).on_next({"t": T0 + offset, "toll": toll})
        await drained(first)
        following = Running(second)
        await tg.start(following.run)
        assert second.agents == []  # the queue is first's, the senior worker's
        await running.leave()  # hands the queue over
        with anyio.fail_after(5):
            while not second.agents:
                await anyio.sleep(0.02)
        for offset, toll in [(59, 1.0), (70, 6.0)]:  # watermark 65: [0, 60) closes
            await second.get_stream(SID).on_next({"t": T0 + offset, "toll": toll})
        await drained(second)
        await following.leave()
    assert results == [(second.worker_name, 0, 60, 10.0)]  # 2 + 3 + 4 (read by first) + 1
