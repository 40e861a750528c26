"""The pipelined producer: send buffers, flush makes durable or says what
failed, on_next shares writes, order holds with punctuation and completion, bounded buffer."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from streams import EncodeError, PublishError, StreamId, StreamProvider
from streams.core.batch import BatchContainer, BatchKind
from streams.runtime.publisher import ContainerWriter, Publisher
from tests.agents.delivery.conftest import Recorder, drained


async def test_sent_events_are_each_delivered_once_in_order_after_a_flush(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=4)
    sids = [StreamId("s", str(n)) for n in range(20)]
    recorders = {sid: Recorder() for sid in sids}
    async with provider.client():
        for n in range(5000):
            await provider.get_stream(sids[n % 20]).send({"n": n})
        await provider.flush()
    provider = StreamProvider.embedded(tmp_path / "store", queues=4)  # a worker reads it all

    @provider.implicit("s")
    class Collect:
        def __init__(self, stream_id):
            self.recorder = recorders[stream_id]

        async def on_next(self, batch):
            await self.recorder.on_next(batch)

    async with provider:
        await drained(provider, 30)
    for i, sid in enumerate(sids):
        assert recorders[sid].values == [{"n": n} for n in range(i, 5000, 20)]
    assert sum(r.batches for r in recorders.values()) < 5000 / 10  # coalesced into containers


async def test_completion_and_punctuation_keep_their_place_among_sent_events():
    provider = StreamProvider.memory(queues=1)
    rec = Recorder()
    stream = provider.get_stream(StreamId("s", "k"))
    async with provider:
        await stream.subscribe(rec)
        for n in range(3):
            await stream.send(n)
        await stream.advance_time(100.0)
        await stream.send(3)
        await stream.on_completed()
        await drained(provider)
    assert rec.values == [0, 1, 2, 3]
    assert rec.completed == 1


async def test_concurrent_on_next_calls_on_one_stream_share_a_container(tmp_path):
    provider = StreamProvider.embedded(tmp_path / "store", queues=1)
    sid = StreamId("s", "k")
    async with provider.client(), anyio.create_task_group() as tg:
        for n in range(50):
            tg.start_soon(provider.get_stream(sid).on_next, n)
    rec = Recorder()
    provider = StreamProvider.embedded(tmp_path / "store", queues=1)

    @provider.implicit("s")
    class Collect:
        def __init__(self, stream_id):
            pass

        async def on_next(self, batch):
            await rec.on_next(batch)

    async with provider:
        await drained(provider)
    assert sorted(rec.values) == list(range(50))
    assert rec.batches <= 3  # the first call writes at once, the others share the next write


async def test_a_value_that_cannot_be_encoded_fails_alone_and_flush_says_so():
    provider = StreamProvider.memory(queues=1)
    rec = Recorder()
    stream = provider.get_stream(StreamId("s", "k"))
    async with provider:
        await stream.subscribe(rec)
        await stream.send(1)
        await stream.send(object())  # msgpack cannot encode it
        await stream.send(3)
        with pytest.raises(PublishError) as failed:
            await provider.flush()
        await provider.flush()  # reported once: the next flush has nothing to report
        with pytest.raises(EncodeError):  # on_next hears of its own at once
            await stream.on_next(object())
        await drained(provider)
    assert failed.value.failed == 1 and "cannot encode" in str(failed.value)
    assert rec.values == [1, 3]


async def test_leaving_the_client_flushes_and_raises_for_what_failed():
    provider = StreamProvider.memory(queues=1)
    with pytest.raises(PublishError, match="1 sent event"):
        async with provider.client():
            await provider.get_stream(StreamId("s", "k")).send(object())
    with pytest.raises(Exception, match="needs a running provider"):
        await provider.get_stream(StreamId("s", "k")).send(1)


class _GatedWriter:
    """Writes through to a real (memory) adapter once ``gate`` opens."""

    def __init__(self, writer: ContainerWriter) -> None:
        self._writer = writer
        self.gate = anyio.Event()
        self.written = 0

    def encode(self, *args: Any) -> list[Any]:
        return self._writer.encode(*args)

    async def write(self, items: list[Any]) -> None:
        await self.gate.wait()
        await self._writer.write(items)
        self.written += len(items)


async def test_send_waits_only_while_the_buffer_is_full():
    from streams.backends.memory.adapter import MemoryAdapterFactory

    factory = MemoryAdapterFactory(1)
    writer = _GatedWriter(ContainerWriter(await factory.create_adapter()))
    publisher = Publisher(writer, factory.get_queue_mapper(), {}, max_buffered=100, max_batch=10)
    sid = StreamId("s", "k")
    sent = 0

    async def produce() -> None:
        nonlocal sent
        for n in range(250):
            await publisher.add(sid, BatchKind.DATA, [n], None, wait=False)
            sent += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(publisher.run)
        tg.start_soon(produce)
        await anyio.sleep(0.1)
        assert sent == 100  # the write is stuck: the 101st send waits for room
        writer.gate.set()
        with anyio.fail_after(5):
            while sent < 250:
                await anyio.sleep(0.01)
        await publisher.flush()
        tg.cancel_scope.cancel()
    assert writer.written == 25  # containers of max_batch=10 events


async def test_a_batch_stays_one_container_of_its_own_between_sent_events():
    provider = StreamProvider.memory(queues=1)
    stream = provider.get_stream(StreamId("s", "k"))
    async with provider.client():
        await stream.send(1)
        await stream.send(2)
        await stream.send_batch([3, 4])
        await stream.send(5)
        await provider.flush()
        records = provider._adapter._queues[0].records  # type: ignore[union-attr]
        containers = [list(BatchContainer.decode(p).values) for _, p, _ in records]
    assert containers == [[1, 2], [3, 4], [5]]


async def test_an_error_leaving_the_block_is_the_one_raised_and_the_failed_sends_are_logged(caplog):
    provider = StreamProvider.memory(queues=1)
    with pytest.raises(KeyError):
        async with provider.client():
            await provider.get_stream(StreamId("s", "k")).send(object())
            raise KeyError("the caller's own")
    assert "1 sent event(s) were not enqueued" in caplog.text


async def test_leaving_a_worker_raises_what_it_could_not_write_as_it_is():
    provider = StreamProvider.memory(queues=1)
    with pytest.raises(PublishError, match="1 sent event"):  # not inside an exception group
        async with provider:
            await provider.get_stream(StreamId("s", "k")).send(object())
