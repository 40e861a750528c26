"""A worker process for crash tests: consumes the ``crash`` namespace of an embedded store (or of
a Kafka topic) and appends every delivered event as ``value token`` to an output file (flushed
per batch).

It prints ``ready`` once it reads every queue: a killed predecessor's leases must expire
first (short leases here: within a second), so that each worker really reads before it is
killed in turn."""

from __future__ import annotations

import sys

import anyio

from balancer import BalancerOptions
from streams import StreamId, StreamProvider

LEASES = BalancerOptions(lease_length=1.0, renew_period=0.3, refresh_period=0.1)


def open_provider(where: str, queues: int) -> StreamProvider:
    """``embedded:PATH`` or ``kafka:HOST:PORT/TOPIC``."""
    kind, _, rest = where.partition(":")
    if kind == "kafka":
        bootstrap, _, topic = rest.partition("/")
        # The test broker (Tansu, memory storage) has no idempotent producer. One worker at
        # a time: no consumer group, so a successor need not wait out a killed one's session.
        settings = {"idempotent": False, "group_membership": False}
        return StreamProvider.kafka(bootstrap, topic, queues=queues, kafka=settings)
    return StreamProvider.embedded(rest, queues=queues, balancer_options=LEASES)


def main(where: str, output: str, queues: int) -> None:
    provider = open_provider(where, queues)
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
            while len(provider.agents) < queues:
                await anyio.sleep(0.02)
            print("ready", flush=True)
            await anyio.sleep_forever()

    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
