"""A worker for the re-keying tests: reads a JSON topic keyed by field ``device`` through the
hop, and appends each event it takes to a file, ``device n offset`` per line (the offset in
the repartition topic), flushed per batch.

    python tests/streams/kafka/rekey_worker.py BOOTSTRAP TOPIC OUT COMMIT_INTERVAL run|drain

``run``: until killed (prints ``ready`` once it reads); ``drain``: until the topic is read,
then exits (prints ``drained``).
"""

from __future__ import annotations

import sys

import anyio

from streams import StreamId, StreamProvider
from tests.helpers import serve


def rekeying_provider(bootstrap: str, topic: str, out: str, commit_interval: float) -> StreamProvider:
    provider = StreamProvider.kafka(
        bootstrap,
        topic,
        queues=4,
        records="json",
        namespace="devices",
        key_field="device",
        kafka={"idempotent": False, "group_membership": False, "commit_interval": commit_interval},
    )

    @provider.implicit("devices")
    class Record:
        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_next(self, batch) -> None:
            with open(out, "a") as f:
                f.writelines(f"{self.key} {e.value['n']} {e.offset}\n" for e in batch)

    return provider


def main(bootstrap: str, topic: str, out: str, commit_interval: str, mode: str) -> None:
    provider = rekeying_provider(bootstrap, topic, out, float(commit_interval))
    if mode == "run":
        serve(provider, reading=True)
        return

    async def drain() -> None:
        async with provider:
            with anyio.fail_after(60):
                await provider.drain()
        print("drained", flush=True)

    anyio.run(drain)


if __name__ == "__main__":
    main(*sys.argv[1:])
