"""A worker for the handoff-gap crash test: tumbling 10 s counts per stream, handed off to
the embedded store's handoff log ``counts``.

With ``block`` as its third argument, the first handoff append prints ``in-gap`` and never
returns: the worker stands in the gap between a window closing and its handoff committing,
where the test kills it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import anyio

from streams import StreamProvider
from tests.helpers import SHORT_LEASES, counting_provider, serve


class BlockedSink:
    """Wraps a handoff sink; its window appends never return."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink

    async def write(self, source: str, consumer: str, partition: int, windows: Sequence[Any]) -> int:
        print("in-gap", flush=True)
        await anyio.sleep_forever()
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


def main(path: str, mode: str) -> None:
    def block(provider: StreamProvider) -> None:
        sinks = provider.agents[0].context.handoff_sinks
        sinks["counts"] = BlockedSink(sinks["counts"])  # type: ignore[index]

    serve(
        counting_provider(path, balancer_options=SHORT_LEASES), reading=True, setup=block if mode == "block" else None
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
