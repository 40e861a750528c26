"""A producer in its own process, for the contract suite's multi-process test.

``python -m tests.streams.adapters.producer_process '{"factory": "pkg.mod:Class", "kwargs": {...},
"namespace": "child", "streams": 6, "records": 40}'`` opens the adapter factory as a client
(no receivers) and writes ``records`` batch containers ``[0] .. [records-1]`` to each stream
``namespace/0 ..``, the streams concurrently, each stream in order.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio

from streams.core.batch import BatchContainer, BatchKind
from streams.core.ids import StreamId
from tests.streams.adapters.harness import ProducerSpec


async def produce(spec: dict[str, Any]) -> None:
    factory = ProducerSpec(spec["factory"], spec["kwargs"]).create_factory()
    adapter = await factory.create_adapter()
    mapper = factory.get_queue_mapper()

    async def one_stream(sid: StreamId) -> None:
        queue = mapper.get_queue_for_stream(sid)
        for n in range(spec["records"]):
            payload = BatchContainer(sid, BatchKind.DATA, time.time(), [n]).encode()
            await adapter.queue_message_batch(queue, sid, payload)

    async with anyio.create_task_group() as tg:
        for i in range(spec["streams"]):
            tg.start_soon(one_stream, StreamId(spec["namespace"], str(i)))
    await adapter.close()
    close = getattr(factory, "close", None)
    if close is not None:
        await close()


if __name__ == "__main__":
    anyio.run(produce, json.loads(sys.argv[1]))
