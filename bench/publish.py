"""One producer, one event per call: headrace's ``send`` + ``flush`` against aiokafka's
pipelined ``send``, on one Tansu broker in one run, and on the embedded store.

Each row publishes ``--events`` small dict events round-robin over 100 streams, one call
per event, and ends once every event is durable (``flush``; aiokafka: every send's future
done). Rows:

- aiokafka ``send`` (acks=all, JSON-encoded values, keyed), futures gathered at the end;
- headrace on Kafka, its own format (events coalesced into batch containers);
- headrace on Kafka, ``records="json"`` (one record per event, as aiokafka writes);
- headrace on the embedded store, then read back by a worker: each event delivered once;
- ``on_next`` in a loop (waiting for each event) on both, for comparison (fewer events).

Each row runs ``--rounds`` times; the best round is shown, timed by bench/timing.py's
``Clock`` from the first call to the last event durable, wall-clock and CPU time.

    python bench/publish.py [--events 100000] [--rounds 3]
    python bench/publish.py inprocess [--events 200000] [--rounds 3]

``inprocess`` runs issue 28's in-process shapes instead: one event per ``send``, per awaited
``on_next_batch`` of one event and batches of 100 into a windowed consumer, against Bytewax's
``fold_window`` (bench/publish_inprocess.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from bench.timing import HEADER, Clock, Report, best, row
from streams import StreamId, StreamProvider
from streams.backends.kafka.clients import ensure_topic
from tests.kafka_broker import TansuBroker

STREAMS = [StreamId("bench", f"s-{n}") for n in range(100)]
KAFKA = {"idempotent": False, "group_membership": False}


async def aiokafka_send(bootstrap: str, topic: str, events: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        keys = [sid.key.encode() for sid in STREAMS]
        futures = [
            await producer.send(topic, json.dumps({"n": n, "v": 1.5}).encode(), key=keys[n % 100])
            for n in range(events)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def headrace_send(provider: StreamProvider, events: int) -> None:
    async with provider.client():
        streams = [provider.get_stream(sid) for sid in STREAMS]
        for n in range(events):
            await streams[n % 100].send({"n": n, "v": 1.5})
        await provider.flush()


async def headrace_on_next(provider: StreamProvider, events: int) -> None:
    async with provider.client():
        streams = [provider.get_stream(sid) for sid in STREAMS]
        for n in range(events):
            await streams[n % 100].on_next({"n": n, "v": 1.5})


async def delivered_once(store: Path, events: int) -> str:
    """Read the store back with a worker: does each event arrive exactly once?"""
    seen: list[int] = []
    provider = StreamProvider.embedded(store, queues=8)

    @provider.implicit("bench")
    class Collect:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch) -> None:  # type: ignore[no-untyped-def]
            seen.extend(v["n"] for v in batch.values)

    async with provider:
        with anyio.fail_after(120):
            await provider.drain()
    if sorted(seen) == list(range(events)):
        return "each event delivered once"
    return f"WRONG: {len(seen)} delivered, {len(set(seen))} distinct, of {events}"


async def run(events: int, rounds: int) -> None:
    runs: dict[str, list[Report]] = {}
    checked = ""

    async def measure(name: str, count: int, work: Callable[[], Awaitable[None]]) -> None:
        # A producer's run: from its first call to every event durable (its flush, or the
        # last future), stamped by the producing task itself.
        clock = Clock(count)
        clock.begin()
        await work()
        clock.result(count)
        runs.setdefault(name, []).append(clock.report())

    slow = max(events // 50, 100)  # on_next waits for every event: fewer of them
    with TansuBroker() as broker, tempfile.TemporaryDirectory(prefix="headrace-bench-") as tmp:
        bootstrap = broker.bootstrap
        print(f"Tansu broker {bootstrap}; {events} events, one call each, 100 streams; best of {rounds} rounds\n")
        for round_no in range(rounds):
            topics = {name: f"{name}-{round_no}" for name in ("raw", "own", "json", "slow")}
            for topic in topics.values():
                await ensure_topic(bootstrap, topic, 8)
            store, slow_store = Path(tmp) / f"store-{round_no}", Path(tmp) / f"slow-{round_no}"
            rows: list[tuple[str, int, Callable[[], Awaitable[None]]]] = [
                (
                    "aiokafka send (pipelined), then all acked",
                    events,
                    lambda: aiokafka_send(bootstrap, topics["raw"], events),
                ),
                (
                    "headrace send + flush, Kafka, own format",
                    events,
                    lambda: headrace_send(
                        StreamProvider.kafka(bootstrap, topics["own"], queues=8, kafka=KAFKA), events
                    ),
                ),
                (
                    "headrace send + flush, Kafka, records='json'",
                    events,
                    lambda: headrace_send(
                        StreamProvider.kafka(bootstrap, topics["json"], queues=8, records="json", kafka=KAFKA), events
                    ),
                ),
                (
                    "headrace send + flush, embedded store",
                    events,
                    lambda: headrace_send(StreamProvider.embedded(store, queues=8), events),
                ),
                (
                    f"headrace on_next loop, Kafka ({slow} events)",
                    slow,
                    lambda: headrace_on_next(
                        StreamProvider.kafka(bootstrap, topics["slow"], queues=8, kafka=KAFKA), slow
                    ),
                ),
                (
                    f"headrace on_next loop, embedded store ({slow} events)",
                    slow,
                    lambda: headrace_on_next(StreamProvider.embedded(slow_store, queues=8), slow),
                ),
            ]
            for name, count, work in rows:  # each row runs before the loop moves on
                await measure(name, count, work)
                if name == "headrace send + flush, embedded store":
                    checked = await delivered_once(store, events)
    table = {name: best(reports) for name, reports in runs.items()}
    base = table["aiokafka send (pipelined), then all acked"]
    print(HEADER.replace("vs base", "vs aiok"))
    for name, report in table.items():
        print(row(name, report, base))
    print(f"\nembedded store, read back by a worker: {checked}")


def main() -> None:
    if sys.argv[1:2] == ["inprocess"]:  # issue 28's shapes, against Bytewax
        from bench import publish_inprocess

        publish_inprocess.main(sys.argv[2:], prog="publish.py inprocess")
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.events, args.rounds))


if __name__ == "__main__":
    main()
