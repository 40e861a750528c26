"""A worker starts the agents of its queues side by side: each start waits for its receiver
to connect and position itself (round trips to a broker), and one after the other the last
queue was read a round trip per queue late (issue 36: a JSON worker's 8 partitions were read
one after another)."""

from __future__ import annotations

import anyio

from streams import StreamId, StreamProvider
from streams.backends.memory.adapter import MemoryAdapterFactory, MemoryQueueAdapter, MemoryQueueReceiver
from streams.backends.memory.backend import MemoryBackend
from streams.core.ids import QueueId

QUEUES = 4


class Connecting:
    """What the receivers' starts share: each waits in ``initialize`` until every queue's
    receiver is in it, which only receivers started side by side can all reach."""

    def __init__(self) -> None:
        self.arrived = 0
        self.all_in = anyio.Event()


class SlowToConnect(MemoryQueueReceiver):
    def __init__(self, queue: QueueId, inner: MemoryQueueReceiver, connecting: Connecting) -> None:
        super().__init__(queue, inner._state)
        self._connecting = connecting

    async def initialize(self) -> None:
        self._connecting.arrived += 1
        if self._connecting.arrived == QUEUES:
            self._connecting.all_in.set()
        await self._connecting.all_in.wait()


class SlowAdapter(MemoryQueueAdapter):
    def __init__(self, connecting: Connecting) -> None:
        super().__init__(queues=QUEUES)
        self.connecting = connecting

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> SlowToConnect:
        return SlowToConnect(queue, super().create_receiver(queue, max_record_size), self.connecting)


class SlowFactory(MemoryAdapterFactory):
    def __init__(self, connecting: Connecting) -> None:
        self._adapter = SlowAdapter(connecting)


async def test_a_workers_agents_start_side_by_side_and_all_read() -> None:
    connecting = Connecting()
    provider = StreamProvider(MemoryBackend(SlowFactory(connecting)))
    seen: list[str] = []

    @provider.implicit("ns")
    class Recorder:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch: list[int]) -> None:
            seen.extend(self.key for _ in batch)

    # One after the other, the first start would wait for the others forever: the guard
    # turns that hang into a failure (a deadline of no measurement, only of a hang).
    with anyio.fail_after(10):
        async with provider:
            assert connecting.arrived == QUEUES and len(provider.agents) == QUEUES
            keys = [f"k{n}" for n in range(20)]
            for key in keys:
                await provider.get_stream(StreamId("ns", key)).on_next(1)
            await provider.drain()
    assert sorted(seen) == sorted(keys)
