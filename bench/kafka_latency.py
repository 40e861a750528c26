"""The foreign JSON topic (bench/kafka_sensors.py) read across a simulated round trip between
the reading process and the broker: a delay proxy (bench/delay_proxy.py, a process of its
own) in front of a Tansu broker that advertises the proxy, so every connection (bootstrap,
fetches, commits) goes through it.

For each round trip (``--rtts``, ms; 0 is the proxy with no delay), in one run, each
``--rounds`` times, alternating, best round shown:

- raw: one ``AIOKafkaConsumer`` over every partition, ``getmany`` + ``json.loads`` (aiokafka's
  defaults: ``fetch_max_wait_ms`` 500, ``max_partition_fetch_bytes`` 1 MiB);
- the JSON worker with library defaults (``records="json"``, tumbling 60 s count per sensor;
  its consumers wait ``poll_timeout`` 0.1 s on an empty fetch, ``fetch_max_wait_ms`` 100);
- the same with ``poll_timeout=0.5`` (``fetch_max_wait_ms`` 500, as the raw loop);
- the same with fetches of at most 256 KiB a partition (four times the round trips).

Timed by bench/timing.py's Clock in the consumers' own hooks: wall-clock and CPU time of the
reading process, the whole run and its steady part (10 % to 90 % of the events), whose CPU
over wall-clock time says how long the process waited (the proxy's and the broker's CPU are
not counted).

    python bench/kafka_latency.py [--records 200000] [--queues 8] [--rounds 3] [--rtts 0,1,5]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiokafka import AIOKafkaConsumer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/streams.py would shadow the package

import streams.backends.kafka.receiver as kafka_receiver  # noqa: E402
from bench.kafka_sensors import json_reader, raw_read, windowed_provider, worker_read  # noqa: E402
from bench.timing import HEADER, Clock, Report, best, row  # noqa: E402
from streams.backends.kafka.clients import ensure_topic  # noqa: E402
from tests.kafka_broker import HOST, TansuBroker, free_port  # noqa: E402
from tests.sensor_workload import closed_window_counts, readings, write_json  # noqa: E402

RAW = "raw aiokafka: getmany + json.loads"
DEFAULTS = "headrace worker, records='json', library defaults"
WAIT = "the same, poll_timeout=0.5 (fetch_max_wait_ms 500)"
SMALL = "the same, max_partition_fetch_bytes 256 KiB"


class AdvertisedBroker(TansuBroker):
    """A Tansu broker that tells its clients to connect to ``advertised`` (the proxy's port)."""

    def __init__(self, advertised: int) -> None:
        super().__init__()
        self.advertised = f"tcp://{HOST}:{advertised}"

    def _arguments(self) -> list[str]:
        arguments = super()._arguments()
        arguments[arguments.index("--advertised-listener-url") + 1] = self.advertised
        return arguments


@contextmanager
def delay_proxy(listen: int, target: int, rtt_ms: float) -> Iterator[None]:
    script = Path(__file__).with_name("delay_proxy.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(listen), str(target), str(rtt_ms)], stdout=subprocess.PIPE, text=True
    )
    try:
        if proc.stdout is None or "serving" not in proc.stdout.readline():
            raise RuntimeError("the delay proxy did not start")
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def fetch_bytes(per_partition: int | None) -> Iterator[None]:
    """The worker's consumers fetch at most ``per_partition`` bytes a partition (None: as is)."""
    if per_partition is None:
        yield
        return
    original = kafka_receiver.AIOKafkaConsumer
    kafka_receiver.AIOKafkaConsumer = functools.partial(  # type: ignore[misc]
        AIOKafkaConsumer, max_partition_fetch_bytes=per_partition
    )
    try:
        yield
    finally:
        kafka_receiver.AIOKafkaConsumer = original  # type: ignore[misc]


async def run(records: int, queues: int, rounds: int, rtts: list[float]) -> None:
    items = list(readings(records))
    expected = closed_window_counts([v for _, v in items], 60, 5)
    closed = sum(expected.values())
    proxy_port = free_port()
    tables: dict[float, dict[str, Report]] = {}
    checked: list[str] = []
    with AdvertisedBroker(proxy_port) as broker:
        bootstrap = f"{HOST}:{proxy_port}"
        with delay_proxy(proxy_port, broker.port, 0):
            await ensure_topic(bootstrap, "sensors", queues)
            await write_json(bootstrap, "sensors", items)
        for rtt in rtts:
            runs: dict[str, list[Report]] = {}
            with delay_proxy(proxy_port, broker.port, rtt):
                for round_no in range(rounds):
                    runs.setdefault(RAW, []).append(await raw_read(bootstrap, "sensors", queues, records))
                    variants = ((DEFAULTS, {}, None), (WAIT, {"poll_timeout": 0.5}, None), (SMALL, {}, 256 * 1024))
                    for variant, (name, settings, per_partition) in enumerate(variants):
                        kafka = {"idempotent": False, "group_membership": False, **settings}
                        counts: Counter[tuple[str, float]] = Counter()
                        clock = Clock(closed)
                        group = f"bench-{rtt:g}ms-{round_no}-{variant}"
                        provider = windowed_provider(
                            json_reader(bootstrap, "sensors", queues, group, kafka), counts, clock
                        )
                        with fetch_bytes(per_partition):
                            runs.setdefault(name, []).append(await worker_read(provider, clock, records))
                        if counts != expected:
                            checked.append(f"{rtt} ms {name}: DIFFER ({sum(counts.values())} vs {closed})")
            tables[rtt] = {name: best(reports) for name, reports in runs.items()}
    print(
        f"Tansu broker behind a delay proxy; {records:,} JSON records, 1 event each, 100 sensors, "
        f"{queues} partitions; best of {rounds} rounds\n"
    )
    for rtt, table in tables.items():
        print(f"round trip {rtt:g} ms")
        print(HEADER.replace("vs base", " vs raw"))
        for name, report in table.items():
            print(row(name, report, table[RAW]))
        print()
    print("window counts against a count made here: " + ("; ".join(checked) if checked else "equal in every run"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rtts", default="0,1,5", help="round trips in ms, comma-separated")
    args = parser.parse_args()
    asyncio.run(run(args.records, args.queues, args.rounds, [float(r) for r in args.rtts.split(",")]))


if __name__ == "__main__":
    main()
