"""``handle.resume()`` of a durable subscription from a process that reads no queue (a
client), on Kafka: the worker reading the stream follows the cluster's subscriptions topic
and hands the subscription to the new type from where it is."""

from __future__ import annotations

import anyio

from streams import StreamId, StreamProvider

SID = StreamId("ns", "k")


def provider_for(broker: str, topic: str, got: dict[str, list]) -> StreamProvider:
    """A provider of one queue with the consumer types First and Second, each recording the
    values that reach it in ``got`` (both processes build theirs alike)."""
    provider = StreamProvider.kafka(broker, topic, queues=1, kafka={"idempotent": False, "group_membership": False})

    @provider.consumer("First")
    class First:
        def __init__(self, stream_id: StreamId) -> None:
            self.name = type(self).__name__

        def on_next(self, batch) -> None:
            got[self.name].extend(batch.values)

    @provider.consumer("Second")
    class Second(First):
        pass

    return provider


async def until_seen(stream, got: list, tag: str) -> None:
    """Publish probes until one reaches ``got`` (the subscriptions topic is followed about
    once a second)."""
    with anyio.fail_after(30):
        for n in range(10_000):
            await stream.on_next(f"{tag}{n}")
            await anyio.sleep(0.2)
            if any(isinstance(v, str) and v.startswith(tag) for v in got):
                return


async def test_a_resume_made_through_a_client_reaches_the_worker_reading_the_stream(kafka_broker, kafka_topic):
    got: dict[str, list] = {"First": [], "Second": []}
    worker = provider_for(kafka_broker, kafka_topic, got)
    client = provider_for(kafka_broker, kafka_topic, got)
    async with worker, client.client():
        stream = client.get_stream(SID)
        handle = await stream.subscribe(client.registry.get_type("First"))
        await until_seen(stream, got["First"], "before")
        await stream.on_next_batch([1, 2])
        await handle.resume(client.registry.get_type("Second"))
        await until_seen(stream, got["Second"], "after")
        await stream.on_next_batch([3, 4])
        with anyio.fail_after(30):
            while 4 not in got["Second"]:
                await anyio.sleep(0.05)
    first = [v for v in got["First"] if isinstance(v, int)]
    second = [v for v in got["Second"] if isinstance(v, int)]
    assert (first, second) == ([1, 2], [3, 4])
    # Each probe reached one of them, once: the consumer changed type in place.
    probes = [v for name in ("First", "Second") for v in got[name] if isinstance(v, str)]
    assert len(probes) == len(set(probes))
