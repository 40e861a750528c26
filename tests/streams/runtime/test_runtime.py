"""The runtime end to end on the memory adapter (Orleans' stream test runners, in Python)."""

from __future__ import annotations

from datetime import UTC

import anyio
import pytest

from streams import (
    CacheMissError,
    ConfigurationError,
    EncodeError,
    GeneratorConfig,
    ProviderClosedError,
    SequenceToken,
    StreamId,
    StreamProvider,
)
from tests.agents.delivery.conftest import GatedRecorder, Recorder, drained


async def test_per_stream_order_with_many_streams_over_few_queues():
    provider = StreamProvider.memory(queues=2)
    streams = [StreamId("ns", str(i)) for i in range(40)]
    recorders = {sid: Recorder() for sid in streams}
    async with provider:
        for sid in streams:
            await provider.get_stream(sid).subscribe(recorders[sid])
        for n in range(25):
            for sid in streams:
                await provider.get_stream(sid).on_next({"n": n, "s": sid.key})
        await drained(provider)
    for sid, rec in recorders.items():
        assert rec.values == [{"n": n, "s": sid.key} for n in range(25)]
        tokens = [e.token for e in rec.events]
        assert tokens == sorted(tokens) and len(set(tokens)) == 25


async def test_several_consumers_on_one_stream_each_get_everything():
    provider = StreamProvider.memory(queues=4)
    sid = StreamId("ns", "one")
    recs = [Recorder() for _ in range(3)]
    sync_seen: list = []
    async with provider:
        stream = provider.get_stream(sid)
        for r in recs:
            await stream.subscribe(r)
        await stream.subscribe(sync_seen.extend)
        await stream.on_next_batch(list(range(10)))
        await stream.on_next(10)
        await drained(provider)
    for r in recs:
        assert r.values == list(range(11)) and r.batches == 2
    assert [e.value for e in sync_seen] == list(range(11))


async def test_slow_consumer_does_not_slow_others_while_cache_has_room():
    provider = StreamProvider.memory(queues=1, cache_size=1000, cache_buckets=10)
    sid = StreamId("ns", "s")
    fast = Recorder()
    slow = GatedRecorder()
    async with provider:
        stream = provider.get_stream(sid)
        await stream.subscribe(slow)
        await stream.subscribe(fast)
        for n in range(50):
            await stream.on_next(n)
        with anyio.fail_after(5):
            while len(fast.events) < 50:
                await anyio.sleep(0.01)
        assert fast.values == list(range(50))
        assert slow.values == []  # still stuck on its first batch
        slow.gate.set()
        await drained(provider)
    assert slow.values == list(range(50))


async def test_stalled_consumer_stops_reads_and_memory_stays_bounded():
    provider = StreamProvider.memory(queues=1, cache_size=40, cache_buckets=4)
    stalled_sid, other_sid = StreamId("ns", "stalled"), StreamId("ns", "other")
    other = Recorder()
    stalled = GatedRecorder()
    async with provider:
        await provider.get_stream(stalled_sid).subscribe(stalled)
        await provider.get_stream(other_sid).subscribe(other)
        await provider.get_stream(stalled_sid).on_next("first")
        for n in range(300):
            await provider.get_stream(other_sid).on_next(n)
        agent = provider.agents[0]
        with anyio.fail_after(5):
            while agent.pressure_skips < 3:
                await anyio.sleep(0.01)
        adapter = provider._adapter
        assert agent.cache.size == 40  # bounded: the cache is full and stays full
        assert adapter.depth(agent.queue) == 301 - 40  # the rest waits in the queue
        assert len(other.events) == 39  # the other consumer got all the cache held
        assert stalled.values == []
        stalled.gate.set()
        await drained(provider)
    assert other.values == list(range(300))  # nothing was evicted under the stalled cursor
    assert stalled.values == ["first"]


async def test_failing_consumer_is_told_and_others_go_on():
    provider = StreamProvider.memory(queues=2, delivery_retry_backoff=120)  # no time to retry
    sid = StreamId("ns", "f")
    good = Recorder()

    class Failing(Recorder):
        async def on_next(self, batch):
            if any(e.value == 2 for e in batch):
                raise RuntimeError("boom on 2")
            await super().on_next(batch)

    bad = Failing()
    async with provider:
        stream = provider.get_stream(sid)
        await stream.subscribe(bad)
        await stream.subscribe(good)
        for n in range(5):
            await stream.on_next(n)
        await drained(provider)
        letters = await provider.dead_letters.list(reason="delivery_failed")
    assert good.values == [0, 1, 2, 3, 4]
    assert bad.values == [0, 1, 3, 4]  # without fault_on_error delivery goes on
    assert [str(e) for e in bad.errors] == ["boom on 2"]
    assert provider.failure_handler.failures == 1
    assert [(d.value, d.stream) for d in letters] == [(2, "ns/f")]


async def test_fault_on_error_faults_the_durable_subscription():
    provider = StreamProvider.memory(
        queues=1, fault_on_error=True, max_event_delivery_time=0.2, delivery_retry_backoff=0.01
    )
    received: list = []

    @provider.consumer("failing")
    class Failing:
        def __init__(self, stream_id):
            pass

        async def on_next(self, batch):
            received.extend(e.value for e in batch)
            raise ValueError("bad")

    sid = StreamId("ns", "d")
    async with provider:
        stream = provider.get_stream(sid)
        await stream.subscribe(Failing)
        await stream.on_next(1)
        await drained(provider)
        await stream.on_next(2)
        await drained(provider)
        (record,) = await provider.pubsub.subscriptions(sid)
    assert set(received) == {1} and len(received) > 1  # retried, then faulted: 2 never reached it
    assert record.state.value == "faulted"


async def test_delivery_timeout_counts_as_a_failure():
    provider = StreamProvider.memory(queues=1, max_event_delivery_time=0.05)
    errors: list = []

    class Sleepy:
        async def on_next(self, batch):
            await anyio.sleep(1)

        async def on_error(self, error):
            errors.append(error)

    async with provider:
        stream = provider.get_stream(StreamId("ns", "t"))
        await stream.subscribe(Sleepy())
        await stream.on_next(1)
        await drained(provider)
    assert len(errors) == 1 and "max_event_delivery_time" in str(errors[0])


async def test_subscribe_from_token_inside_the_cache_replays_from_there():
    provider = StreamProvider.memory(queues=1)
    sid = StreamId("ns", "r")
    first = Recorder()
    async with provider:
        stream = provider.get_stream(sid)
        await stream.subscribe(first)
        await stream.on_next_batch(["a", "b", "c"])
        await stream.on_next("d")
        await drained(provider)
        token = first.events[1].token  # "b": inside the first batch
        late = Recorder()
        await stream.subscribe(late, token=token)
        await drained(provider)
    assert late.values == ["b", "c", "d"]
    assert late.errors == []


async def test_subscribe_from_token_before_the_cache_is_a_visible_miss():
    provider = StreamProvider.memory(queues=1, cache_size=10, cache_buckets=2)
    sid = StreamId("ns", "m")
    async with provider:
        stream = provider.get_stream(sid)
        for n in range(30):  # pushes the oldest batches out of the cache
            await stream.on_next(n)
            await drained(provider)
        rewound = Recorder()
        await stream.subscribe(rewound, token=SequenceToken(0))
        await drained(provider)
    assert len(rewound.errors) == 1 and isinstance(rewound.errors[0], CacheMissError)
    assert provider.failure_handler.failures == 1
    # it continues from the oldest data still available, which ends at the newest
    assert rewound.values and rewound.values[-1] == 29
    assert rewound.values == list(range(rewound.values[0], 30))


async def test_implicit_activations_appear_per_stream_id():
    provider = StreamProvider.memory(queues=4)
    made: dict[StreamId, object] = {}

    @provider.implicit("sensors")
    class Counter:
        def __init__(self, stream_id):
            self.stream_id = stream_id
            self.n = 0
            made[stream_id] = self

        async def on_next(self, batch):
            assert all(e.stream_id == self.stream_id for e in batch)
            self.n += len(batch)

    async with provider:
        for i in range(6):
            for _ in range(i + 1):
                await provider.get_stream(StreamId("sensors", str(i))).on_next(i)
        await provider.get_stream(StreamId("other", "x")).on_next("not for Counter")
        await drained(provider)
    assert set(made) == {StreamId("sensors", str(i)) for i in range(6)}
    assert {sid.key: c.n for sid, c in made.items()} == {str(i): i + 1 for i in range(6)}


async def test_unsubscribe_and_resubscribe():
    provider = StreamProvider.memory(queues=1)
    sid = StreamId("ns", "u")
    rec = Recorder()
    async with provider:
        stream = provider.get_stream(sid)
        handle = await stream.subscribe(rec)
        await stream.on_next(1)
        await drained(provider)
        await handle.unsubscribe()
        await stream.on_next(2)
        await drained(provider)
        assert await stream.get_all_subscription_handles() == []
        handle = await stream.subscribe(rec)
        await stream.on_next(3)
        await drained(provider)
        assert len(await stream.get_all_subscription_handles()) == 1
    assert rec.values == [1, 3]


async def test_on_completed_reaches_consumers_after_everything_before_it():
    provider = StreamProvider.memory(queues=2)
    order: list = []

    class Obs:
        def on_next(self, batch):
            order.extend(e.value for e in batch)

        def on_completed(self):
            order.append("completed")

    async with provider:
        stream = provider.get_stream(StreamId("ns", "c"))
        await stream.subscribe(Obs())
        await stream.on_next_batch([1, 2])
        await stream.on_next(3)
        await stream.on_completed()
        await drained(provider)
    assert order == [1, 2, 3, "completed"]


async def test_shutdown_drains_in_flight_deliveries_and_acks_them():
    provider = StreamProvider.memory(queues=1)
    got: list = []

    class Slowish:
        async def on_next(self, batch):
            await anyio.sleep(0.01)
            got.extend(e.value for e in batch)

    async with provider:
        stream = provider.get_stream(StreamId("ns", "s"))
        await stream.subscribe(Slowish())
        for n in range(20):
            await stream.on_next(n)
        adapter = provider._adapter
        # leave at once: the agent reads what was enqueued, delivers, then acks
        await anyio.sleep(0.05)
    assert got == list(range(20))
    from streams import QueueId

    assert adapter.delivered(QueueId(0)) == 20


async def test_acks_wait_for_every_consumer():
    provider = StreamProvider.memory(queues=1)
    sid = StreamId("ns", "a")
    gate = anyio.Event()

    class Held:
        async def on_next(self, batch):
            await gate.wait()

    async with provider:
        stream = provider.get_stream(sid)
        await stream.subscribe(Held())
        await stream.subscribe(Recorder())
        for n in range(5):
            await stream.on_next(n)
        agent = provider.agents[0]
        with anyio.fail_after(5):
            while agent.read_messages < 5:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        assert provider._adapter.delivered(agent.queue) == 0
        gate.set()
        await drained(provider)
        assert provider._adapter.delivered(agent.queue) == 5


def test_acknowledged_positions_read_as_a_sequence_of_tokens():
    from agents.checkpoint import Tokens

    tokens = Tokens([3, 4, 7])
    assert len(tokens) == 3 and list(tokens) == [SequenceToken(3), SequenceToken(4), SequenceToken(7)]
    assert tokens[-1] == SequenceToken(7) and tokens[1:] == [SequenceToken(4), SequenceToken(7)]
    assert max(t.sequence_number for t in tokens) == 7


async def test_generator_adapter_feeds_implicit_consumers():
    config = GeneratorConfig(namespace="gen", streams=12, events_per_stream=35, batch_size=10)
    provider = StreamProvider.generator(config, queues=4)
    seen: dict[str, list] = {}
    completed: set[str] = set()

    @provider.implicit("gen")
    class Collect:
        def __init__(self, stream_id):
            self.key = stream_id.key

        def on_next(self, batch):
            seen.setdefault(self.key, []).extend(e.value["n"] for e in batch)

        def on_completed(self):
            completed.add(self.key)

    async with provider:
        await drained(provider)
    assert seen == {str(i): list(range(35)) for i in range(12)}
    assert completed == {str(i) for i in range(12)}


async def test_unencodable_value_is_refused_and_nothing_is_enqueued():
    provider = StreamProvider.memory(queues=1)
    rec = Recorder()
    async with provider:
        stream = provider.get_stream(StreamId("ns", "bad"))
        await stream.subscribe(rec)
        with pytest.raises(EncodeError, match="'object'"):
            await stream.on_next(object())
        with pytest.raises(EncodeError, match="2 values and 1 event times"):
            await stream.on_next_batch([1, 2], event_times=[1.0])
        await stream.on_next("fine")
        await drained(provider)
    assert rec.values == ["fine"]
    assert provider.agents == []


async def test_event_time_defaults_to_arrival_and_can_be_given():
    from datetime import datetime

    provider = StreamProvider.memory(queues=1)
    rec = Recorder()
    async with provider:
        stream = provider.get_stream(StreamId("ns", "et"))
        await stream.subscribe(rec)
        await stream.on_next("a")
        await stream.on_next("b", event_time=datetime(2024, 1, 1, tzinfo=UTC))
        await stream.on_next("c", event_time=5.0)
        await drained(provider)
    a, b, c = rec.events
    assert a.event_time == a.arrival_time
    assert b.event_time == datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    assert c.event_time == 5.0


async def test_using_a_provider_that_is_not_running_says_what_to_do():
    provider = StreamProvider.memory()
    with pytest.raises(ProviderClosedError, match="async with provider"):
        await provider.get_stream(StreamId("ns", "x")).on_next(1)
    with pytest.raises(ConfigurationError, match="unknown provider option 'cache_sise'"):
        StreamProvider.memory(cache_sise=3)
    with pytest.raises(ConfigurationError, match="must be positive"):
        StreamProvider.memory(cache_size=-1)


async def test_client_publishes_without_agents():
    provider = StreamProvider.memory(queues=2)
    async with provider.client():
        await provider.get_stream(StreamId("ns", "x")).on_next(1)
        assert provider.agents == []
    rec = Recorder()
    provider.get_stream(StreamId("ns", "x"))
    await provider.get_stream(StreamId("ns", "x")).subscribe(rec)  # before start: kept for later
    async with provider:
        await drained(provider)
    assert rec.values == [1]  # the memory queue kept it until a worker read it


async def test_a_batch_whose_values_do_not_decode_is_dead_lettered_once():
    from streams import BatchContainer, BatchKind

    provider = StreamProvider.memory(queues=1)
    sid = StreamId("ns", "utf")
    first, second = Recorder(), Recorder()
    good = BatchContainer(sid, BatchKind.DATA, 1.0, ["abc"]).encode()
    broken = good.replace(b"\xa3abc", b"\xa3\xff\xfe\xfd")  # a str that is not UTF-8
    assert BatchContainer.decode(broken).count == 1  # the structure is sound: it reaches the cache
    async with provider:
        await provider.get_stream(sid).subscribe(first)
        await provider.get_stream(sid).subscribe(second)
        adapter = provider._adapter
        await adapter.queue_message_batch(provider.mapper.get_queue_for_stream(sid), sid, broken)
        await provider.get_stream(sid).on_next("after")
        await drained(provider)
        letters = await provider.dead_letters.list()
    assert first.values == second.values == ["after"]
    assert len(first.errors) == len(second.errors) == 1
    assert [(d.reason, d.payload) for d in letters] == [("undecodable", broken)]
