"""A worker of large events with a slow consumer, bounded in bytes (two 16 MiB caches):
``python blob_worker.py EXPECTED STORE`` on an embedded store, or ``python blob_worker.py
EXPECTED BOOTSTRAP TOPIC`` on a Kafka topic of raw records (two partitions). Prints ``ready``
once it runs, then ``done COUNT CRC`` once it has taken ``EXPECTED`` events, and waits to be
killed."""

from __future__ import annotations

import sys
import zlib

import anyio

from streams import StreamId, StreamProvider


async def main(expected: int, *where: str) -> None:
    bounds = {"max_event_size": 8 << 20, "cache_max_bytes": 16 << 20}
    if len(where) == 1:
        provider = StreamProvider.embedded(where[0], queues=2, **bounds)
    else:
        kafka = {"idempotent": False, "group_membership": False}
        provider = StreamProvider.kafka(*where, queues=2, records="bytes", namespace="blobs", kafka=kafka, **bounds)
    taken = {"count": 0, "crc": 0}
    done = anyio.Event()

    @provider.implicit("blobs")
    class Slow:
        def __init__(self, stream_id: StreamId) -> None: ...

        async def on_next(self, batch) -> None:
            for event in batch:
                taken["count"] += 1
                taken["crc"] ^= zlib.crc32(event.value)
                await anyio.sleep(0.02)  # slower than the reads: the cache fills
            if taken["count"] >= expected:
                done.set()

    async with provider:
        print("ready", flush=True)
        await done.wait()
        print(f"done {taken['count']} {taken['crc']}", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]), *sys.argv[2:])
