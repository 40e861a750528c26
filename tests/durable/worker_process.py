"""A worker process for crash tests: consumes the ``crash`` namespace of an embedded store and
appends every delivered event as ``value token`` to an output file (flushed per batch)."""

from __future__ import annotations

import sys

import anyio

from streams import StreamId, StreamProvider


def main(path: str, output: str, queues: int) -> None:
    provider = StreamProvider.embedded(path, queues=queues)
    out = open(output, "a", buffering=1)

    @provider.implicit("crash")
    class Recorder:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            out.write("".join(f"{e.value} {e.token}\n" for e in batch))
            out.flush()

    async def run() -> None:
        async with provider:
            print("ready", flush=True)
            await anyio.sleep_forever()

    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
