"""Lease fencing on the embedded store: a stale owner's checkpoint never lands, a receiver
reads only under a live lease, and a worker whose lease is taken abandons the queue at once."""

from __future__ import annotations

import sqlite3
import time

import anyio

from balancer import BalancerOptions, Lease, Tenure
from streams import QueueId, StreamId, StreamProvider
from streams.backends.embedded.adapter import EmbeddedAdapterFactory, EmbeddedQueueReceiver
from streams.backends.embedded.balancer import SqliteLeaseProvider
from streams.core.batch import BatchContainer, BatchKind
from streams.core.clock import WallClock
from tests.agents.delivery.conftest import Recorder, drained

Q0 = QueueId(0)


async def _fill(adapter, count: int) -> None:
    sid = StreamId("ns", "s")
    for n in range(count):
        await adapter.queue_message_batch(Q0, sid, BatchContainer(sid, BatchKind.DATA, 0.0, [n]).encode())


class Owner:
    """One worker's view of queue 0 on the store: its adapter, fenced by the leases it holds,
    each judged held (as a balancer judges its tenure) until its length has elapsed
    since it was taken, by the monotonic clock."""

    def __init__(self, path, name: str) -> None:
        self.factory = EmbeddedAdapterFactory(path, queues=1, checkpoint_persist_interval=0)
        self.leases = SqliteLeaseProvider(self.factory.store)
        self.name = name
        self.held: dict[QueueId, Lease] = {}
        self._until: dict[QueueId, float] = {}

    def tenure(self, queue: QueueId) -> Tenure | None:
        lease = self.held.get(queue)
        return Tenure(lease, self._until[queue], WallClock()) if lease is not None else None

    async def take(self, length: float = 60.0) -> EmbeddedQueueReceiver:
        """Lease queue 0 and open a receiver on it under that lease."""
        adapter = await self.factory.create_adapter()
        adapter.fence_with_leases(self.leases, self.tenure)
        self._until[Q0] = time.monotonic() + length
        [self.held[Q0]] = await self.leases.acquire([Q0], self.name, length)
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        return receiver


async def _read_and_ack(receiver: EmbeddedQueueReceiver, count: int) -> list[int]:
    messages = await receiver.get_queue_messages(count)
    await receiver.messages_delivered([m.token for m in messages])
    return [m.sequence_number for m in messages]


async def test_a_stale_owners_late_checkpoint_is_refused(tmp_path):
    a, b = Owner(tmp_path, "a"), Owner(tmp_path, "b")
    adapter = await a.factory.create_adapter()
    await _fill(adapter, 10)
    stale = await a.take()
    assert await _read_and_ack(stale, 5) == [0, 1, 2, 3, 4]
    assert (await adapter.positions(Q0)).checkpoint == 4

    # the lease moves on to b (a's expired: here, as if it had, by rewriting the row)
    with sqlite3.connect(tmp_path / "headrace.db") as conn:
        conn.execute("UPDATE lease_queues SET expires_at = 0")
    current = await b.take()
    assert await _read_and_ack(current, 3) == [5, 6, 7]
    assert (await adapter.positions(Q0)).checkpoint == 7

    # a, unaware (its own view says it holds the lease), reads on and acknowledges late
    assert await _read_and_ack(stale, 10) == [5, 6, 7, 8, 9]
    assert (await adapter.positions(Q0)).checkpoint == 7  # not 9: b has not delivered 8, 9
    assert stale.fenced_out and not current.fenced_out
    assert await stale.get_queue_messages(10) == []  # refused once: it reads no more
    await a.factory.close()
    await b.factory.close()


async def test_a_receiver_reads_only_while_its_worker_holds_the_lease(tmp_path):
    owner = Owner(tmp_path, "a")
    adapter = await owner.factory.create_adapter()
    await _fill(adapter, 10)
    receiver = await owner.take(length=0.3)
    assert await _read_and_ack(receiver, 2) == [0, 1]
    await anyio.sleep(0.4)  # not renewed: expired by this worker's own clock
    assert await receiver.get_queue_messages(10) == []
    assert await receiver.read_range(0, 10) == []

    owner.held.clear()  # a receiver made while no lease is held reads nothing
    orphan = adapter.create_receiver(Q0)
    await orphan.initialize()
    assert await orphan.get_queue_messages(10) == []
    await owner.factory.close()


async def test_a_worker_whose_lease_is_taken_abandons_the_queue_without_a_checkpoint(tmp_path):
    sid = StreamId("ns", "s")
    leases = BalancerOptions(lease_length=1.0, renew_period=0.25, refresh_period=0.1)
    provider = StreamProvider.embedded(tmp_path, queues=1, balancer_options=leases)
    recorder = Recorder()
    await provider.get_stream(sid).subscribe(recorder)
    async with provider:
        adapter = await provider.factory.create_adapter()  # the running one: made once
        for n in range(5):
            await provider.get_stream(sid).on_next(n)
        await drained(provider)
        with anyio.fail_after(5):
            while (await adapter.positions(Q0)).checkpoint != 4:
                await anyio.sleep(0.05)

        # another worker takes the lease over (as if this one had missed its renewals)
        with sqlite3.connect(tmp_path / "headrace.db") as conn:
            conn.execute(
                "UPDATE lease_queues SET owner = 'intruder', epoch = epoch + 1, expires_at = ?",
                (time.time() + 60,),
            )
        with anyio.fail_after(5):
            while provider.agents:
                await anyio.sleep(0.02)
        for n in range(5, 8):
            await provider.get_stream(sid).on_next(n)
        await anyio.sleep(0.5)  # a few balancing rounds: the queue stays the intruder's
        assert provider.agents == []
        assert (await adapter.positions(Q0)).checkpoint == 4
    assert recorder.values == [0, 1, 2, 3, 4]
    with sqlite3.connect(tmp_path / "headrace.db") as conn:
        assert conn.execute("SELECT owner FROM lease_queues").fetchall() == [("intruder",)]
