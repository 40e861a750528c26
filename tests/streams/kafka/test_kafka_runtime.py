"""The runtime over Kafka: consumers, restarts from committed offsets, foreign records."""

from __future__ import annotations

import anyio

from streams import StreamId, StreamProvider
from tests.agents.delivery.conftest import Recorder, drained
from tests.kafka_broker import produce_raw
from tests.kafka_fixtures import SHORT_SESSION


def kafka_provider(bootstrap: str, topic: str, **options) -> StreamProvider:
    # The test broker (Tansu, memory storage) has no idempotent producer.
    return StreamProvider.kafka(
        bootstrap, topic, queues=2, kafka={"idempotent": False}, balancer_options=SHORT_SESSION, **options
    )


async def test_events_reach_consumers_in_order_and_a_restart_resumes_after_commits(kafka_broker, kafka_topic):
    sids = [StreamId("k", str(i)) for i in range(5)]
    first = {sid: Recorder() for sid in sids}
    provider = kafka_provider(kafka_broker, kafka_topic)
    async with provider:
        for sid in sids:
            await provider.get_stream(sid).subscribe(first[sid])
        for n in range(20):
            for sid in sids:
                await provider.get_stream(sid).on_next(n)
        with anyio.fail_after(30):
            while any(len(r.events) < 20 for r in first.values()):
                await anyio.sleep(0.05)
    assert all(r.values == list(range(20)) for r in first.values())

    async with kafka_provider(kafka_broker, kafka_topic).client() as client:
        for sid in sids:
            await client.get_stream(sid).on_next_batch([20, 21])
    second = {sid: Recorder() for sid in sids}
    provider = kafka_provider(kafka_broker, kafka_topic)
    for sid in sids:
        await provider.get_stream(sid).subscribe(second[sid])
    async with provider:
        with anyio.fail_after(30):
            while any(len(r.events) < 2 for r in second.values()):
                await anyio.sleep(0.05)
        await drained(provider, 30)
    # offsets were committed at shutdown: only what came after is delivered again
    assert all(r.values == [20, 21] for r in second.values())


async def test_a_record_another_program_wrote_is_dead_lettered_and_the_agent_goes_on(
    kafka_broker, kafka_topic, tmp_path
):
    sid = StreamId("k", "mixed")
    rec = Recorder()
    provider = kafka_provider(kafka_broker, kafka_topic, store=tmp_path / "local")
    queue = provider.mapper.get_queue_for_stream(sid).number
    async with provider:
        await provider.get_stream(sid).subscribe(rec)
        await provider.get_stream(sid).on_next("before")
        await produce_raw(kafka_broker, kafka_topic, queue, b"{not headrace}")
        await provider.get_stream(sid).on_next("after")
        with anyio.fail_after(30):
            while len(rec.events) < 2:
                await anyio.sleep(0.05)
        letters = await provider.dead_letters.list(reason="undecodable")
    assert rec.values == ["before", "after"]
    assert [(d.queue, d.sequence_number, d.payload) for d in letters] == [(queue, 1, b"{not headrace}")]
