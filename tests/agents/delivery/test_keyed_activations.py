"""One activation per key across namespaces."""

from __future__ import annotations

import anyio
import pytest

from streams import ConfigurationError, StreamId, StreamProvider
from streams.adapters.mapper import HashRingQueueMapper, KeyedQueueMapper
from streams.eventtime import EventTime, OrderingPolicy
from tests.agents.delivery.conftest import drained


def test_mapper_puts_one_key_of_a_group_on_one_queue_and_keeps_the_first_namespace_in_place():
    ring = HashRingQueueMapper(8)
    mapper = KeyedQueueMapper(ring, [("tolls", "prices")])
    keys = [f"booth-{i}" for i in range(200)]
    for key in keys:
        tolls = mapper.get_queue_for_stream(StreamId("tolls", key))
        assert tolls == ring.get_queue_for_stream(StreamId("tolls", key))  # unchanged
        assert mapper.get_queue_for_stream(StreamId("prices", key)) == tolls
        # a namespace outside every group keeps the ring's placement
        assert mapper.get_queue_for_stream(StreamId("other", key)) == ring.get_queue_for_stream(StreamId("other", key))
    # without the group, prices would be spread elsewhere for many keys: the mapper moved them
    moved = sum(
        ring.get_queue_for_stream(StreamId("prices", k)) != ring.get_queue_for_stream(StreamId("tolls", k))
        for k in keys
    )
    assert moved > 100
    assert len({mapper.get_queue_for_stream(StreamId("tolls", k)) for k in keys}) == 8


@pytest.mark.parametrize("groups", [[("tolls",)], [("a", "b"), ("b", "c")], [("a", "")]])
def test_mapper_refuses_bad_groups(groups):
    with pytest.raises(ConfigurationError):
        KeyedQueueMapper(HashRingQueueMapper(4), groups)


def test_several_namespaces_are_co_partitioned_by_the_decorator():
    provider = StreamProvider.memory(queues=4)

    @provider.implicit("tolls", "prices")
    class Both:
        def __init__(self, stream_id):
            pass

        def on_next(self, batch):
            pass

    mapper = provider.mapper
    assert all(
        mapper.get_queue_for_stream(StreamId("prices", k)) == mapper.get_queue_for_stream(StreamId("tolls", k))
        for k in map(str, range(200))
    )
    # tolls keeps the placement it had; a namespace in a group already is not moved again
    assert [mapper.get_queue_for_stream(StreamId("tolls", k)) for k in "abc"] == [
        HashRingQueueMapper(4).get_queue_for_stream(StreamId("tolls", k)) for k in "abc"
    ]
    with pytest.raises(ConfigurationError, match="namespace 'prices' is in two co-partitioned groups"):
        provider.implicit("fees", "prices")


async def test_a_running_provider_does_not_move_its_streams():
    provider = StreamProvider.memory(queues=4)
    async with provider:
        with pytest.raises(
            ConfigurationError, match=r"before the provider starts, or .* co_partitioned=\[\('a', 'b'\)\]"
        ):
            provider.implicit("a", "b")


def test_a_type_registers_its_namespaces_once():
    provider = StreamProvider.memory(queues=4, co_partitioned=[("tolls", "prices", "fees")])

    @provider.implicit("tolls", "prices")
    class Both:
        def __init__(self, stream_id):
            pass

        def on_next(self, batch):
            pass

    with pytest.raises(ConfigurationError, match="already implicit"):
        provider.implicit("tolls", "fees")(Both)


async def test_one_instance_per_key_fed_by_both_namespaces():
    provider = StreamProvider.memory(queues=4, co_partitioned=[("tolls", "prices")])
    built: list[StreamId] = []
    seen: dict[str, list[tuple[str, int]]] = {}
    most: dict[str, int] = {}

    @provider.implicit("tolls", "prices")
    class Both:
        def __init__(self, stream_id):
            built.append(stream_id)
            self.key = stream_id.key
            self.turns = 0

        async def on_next(self, batch):
            self.turns += 1
            most[self.key] = max(most.get(self.key, 0), self.turns)
            await anyio.sleep(0.001)  # suspends: the two streams' tasks would overlap here
            seen.setdefault(self.key, []).extend((e.stream_id.namespace, e.value) for e in batch)
            self.turns -= 1

    keys = [f"k{i}" for i in range(12)]
    async with provider:
        for n in range(5):
            for key in keys:
                await provider.get_stream(StreamId("tolls", key)).on_next(n)
                await provider.get_stream(StreamId("prices", key)).on_next(100 + n)
        await drained(provider)
    assert sorted(built) == sorted(StreamId("tolls", k) for k in keys)  # once per key
    for key in keys:  # in queue order across the two streams: as published
        assert seen[key] == [pair for n in range(5) for pair in (("tolls", n), ("prices", 100 + n))]
    assert set(most.values()) == {1}  # one batch at a time, as a grain


async def test_single_namespace_types_keep_one_instance_per_stream():
    provider = StreamProvider.memory(queues=2, co_partitioned=[("tolls", "prices")])
    built: list[StreamId] = []

    @provider.implicit("tolls")
    class PerStream:
        def __init__(self, stream_id):
            built.append(stream_id)

        def on_next(self, batch):
            pass

    async with provider:
        await provider.get_stream(StreamId("tolls", "a")).on_next(1)
        await provider.get_stream(StreamId("prices", "a")).on_next(1)
        await drained(provider)
    assert built == [StreamId("tolls", "a")]


async def test_the_shared_activation_ends_with_its_last_stream():
    provider = StreamProvider.memory(queues=1, co_partitioned=[("tolls", "prices")], stream_inactivity_period=0.05)
    ended: list[str] = []

    @provider.implicit("tolls", "prices")
    class Both:
        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_next(self, batch):
            pass

        def on_deactivate(self):
            ended.append(self.key)

    async with provider:
        await provider.get_stream(StreamId("tolls", "a")).on_next(1)
        await provider.get_stream(StreamId("prices", "a")).on_next(1)
        await drained(provider)
        with anyio.fail_after(5):
            while not ended:
                await anyio.sleep(0.02)
                await provider.agents[0]._pump()
    assert ended == ["a"]


async def test_queue_order_goes_on_with_a_warning_when_the_batch_ahead_never_comes(caplog):
    from agents.merged_inputs import QueueOrder

    order = QueueOrder(stall=0.05)
    order.expect(3)  # e.g. its consumer faulted: it will never be delivered
    order.expect(5)
    with anyio.fail_after(2):
        await order.turn(5)
    order.done(5)
    assert "out of queue order" in caplog.text
    with anyio.fail_after(1):
        await order.turn(9)  # nothing expected ahead: at once


def test_kafkas_partitioner_places_by_key_already():
    from streams.adapters.mapper import KafkaPartitionMapper, KeyedQueueMapper

    kafka = KafkaPartitionMapper(8)
    assert kafka.co_partitioned(["tolls", "prices"])
    assert not HashRingQueueMapper(8).co_partitioned(["tolls", "prices"])
    assert KeyedQueueMapper(kafka, [("a", "b")]).co_partitioned(["tolls", "prices"])  # the inner mapper's say
    assert all(
        kafka.get_queue_for_stream(StreamId("tolls", k)) == kafka.get_queue_for_stream(StreamId("prices", k))
        for k in map(str, range(100))
    )


async def test_a_batch_cancelled_while_waiting_for_its_turn_blocks_nothing():
    from agents.merged_inputs import QueueOrder, ordered

    order = QueueOrder(stall=30.0)
    for seq in (1, 2, 3):
        order.expect(seq)
    seen: list[int] = []

    async def record(batch):
        seen.append(batch.sequence_number)

    deliver = ordered(record, order)

    class Batch:
        def __init__(self, seq):
            self.sequence_number = seq

    with anyio.move_on_after(0.05):  # 2 waits for 1, and is cancelled (its time limit)
        await deliver(Batch(2))
    with anyio.fail_after(2):
        await deliver(Batch(1))
        await deliver(Batch(3))  # does not wait for the cancelled 2
    assert seen == [1, 3]


def test_imports_none_is_no_imports():
    spec = EventTime(OrderingPolicy(timestamp_by="t"), inputs=("tolls", "prices"), imports=None)
    assert spec.imports == {}
    assert spec.processor().merged is not None  # both inputs generate their own watermark
