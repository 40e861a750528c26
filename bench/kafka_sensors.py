"""Issue 12's workload: a topic of JSON events, one per record, written by plain aiokafka.

``--records`` readings of 100 sensors (10 ms apart, 5 % of them 3 s out of order, ``ts`` in
epoch milliseconds, key ``sensor-N``) on ``--queues`` partitions of a Tansu broker. Measured
in one run, on that topic:

- raw: one ``AIOKafkaConsumer`` over every partition, ``getmany`` + ``json.loads`` per record
  (it only decodes);
- headrace: a worker (``records="json"``) whose consumer counts each sensor's events in
  tumbling 60 s windows (out-of-order tolerance 5 s), timed from its first activation to
  its last closed window; its window counts are checked against a count made here;
- the same worker with ``tune_gc=False``: CPython's collector, where the library's default
  applies the worker's garbage-collector policy (agents/gc_policy.py);
- Quix Streams 3.x (``bench/quix_sensors.py``, a process of its own): the same tumbling 60 s
  count per sensor, grace 5 s, event time from ``ts``;
- the same readings written without a key (a producer that keys nothing spreads them over
  every partition), read by the JSON worker with ``key_field="sensor"``: each record goes
  through the re-keying hop (streams/backends/kafka/repartition.py), so it is read twice and written
  once more; its consumer is a plain ``on_next`` count (a sensor's readings now come from
  every partition, each read at its own pace, and most of its windows stay open);
- headrace's own format with one event per record (what ``on_next`` makes), the same
  readings, the same consumer; again with ``tune_gc=False``;
- the same readings written again with ``--codecs`` (lz4 and zstd record batches; the
  codecs every Kafka producer offers), each read by the raw loop and by the JSON worker:
  what decompression costs either, side by side.

Each read runs ``--rounds`` times, alternating; each row shows its best round. Each run is
timed by bench/timing.py's ``Clock``, stamped in the consumer's own hooks: from the first
event taken (a windowed consumer's first activation; the raw loop's first ``getmany``) to
the last result (the last closed window; the last record decoded), in wall-clock seconds
and in CPU seconds of the reading process (the broker's are not counted for any row; the
machine is shared, and CPU time moves less with what else runs); for the whole run and
its steady part (10 % to 90 % of the events), whose CPU over wall-clock time says how long
the process waited. Each row says the share of the events its span covers, and gives no
rate under 90 %. Then one record's decoding, by
each JSON library, on the same records (ns a record, best of 7).

    python bench/kafka.py sensors [--records 200000] [--queues 8] [--rounds 3] [--codecs lz4,zstd]
    python bench/kafka_sensors.py [--records 200000] [--queues 8] [--rounds 3] [--codecs lz4,zstd]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
import time
import timeit
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/streams.py would shadow the package

from bench.timing import HEADER, Clock, Report, best, row  # noqa: E402
from streams import StreamId, StreamProvider  # noqa: E402
from streams.backends.kafka.adapter import KafkaAdapterFactory  # noqa: E402
from streams.backends.kafka.clients import ensure_topic  # noqa: E402
from streams.backends.kafka.settings import KafkaSettings  # noqa: E402
from streams.core.batch import BatchContainer, BatchKind  # noqa: E402
from streams.core.records import JsonRecords  # noqa: E402
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling  # noqa: E402
from tests.kafka_broker import TansuBroker  # noqa: E402
from tests.sensor_workload import closed_window_counts, readings, write_json  # noqa: E402

RAW = "raw aiokafka: getmany + json.loads"
JSON_WORKER = "headrace worker, records='json', 60 s windows"
UNTUNED = "the same, tune_gc=False (CPython's collector)"
QUIX = "Quix Streams 3, tumbling 60 s count"
KEYLESS = "keyless records, re-keyed through the hop, on_next count"
OWN = "headrace worker, own format 1 event/record, 60 s windows"
OWN_UNTUNED = "the same, own format, tune_gc=False"


def ratio(report: Report, base: Report) -> str:
    """``report``'s rate against ``base``'s, wall-clock and per CPU second, or a refusal."""
    if report.rate is None or base.rate is None or report.cpu_rate is None or base.cpu_rate is None:
        return "no rate: a timed span covers under 90 % of the events"
    return f"{report.rate / base.rate:.2f}x ({report.cpu_rate / base.cpu_rate:.2f}x per CPU second)"


def windowed_provider(
    provider: StreamProvider, counts: Counter[tuple[str, float]], clock: Clock | None = None
) -> StreamProvider:
    """``provider`` with a consumer counting each sensor's events in tumbling 60 s windows.

    ``clock`` is stamped from the consumer's own hooks: its first activation (made as its
    stream's first event is taken) begins the run, each closed window accounts for its events
    (see bench/timing.py)."""
    stamps = clock or Clock(0, freeze=False)

    @provider.implicit("sensors")
    class PerSensor:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="ts", unit="ms", out_of_order=5),
            Tumbling(60),
            Count(),
        )

        def __init__(self, stream_id: StreamId) -> None:
            stamps.begin()
            self.key = stream_id.key

        def on_window(self, result: Any) -> None:
            counts[(self.key, result.start)] += result.value
            stamps.result(result.value)

    return provider


def json_reader(
    bootstrap: str, topic: str, queues: int, group_id: str, kafka: dict[str, Any], **options: Any
) -> StreamProvider:
    """A worker reading ``topic``'s JSON records as the ``sensors`` namespace."""
    return StreamProvider.kafka(
        bootstrap, topic, queues=queues, records="json", namespace="sensors", group_id=group_id, kafka=kafka, **options
    )


def taken(provider: StreamProvider) -> int:
    return sum(o.processor.counters.events for a in provider.agents for o in a.event_time_activations())


async def worker_read(provider: StreamProvider, clock: Clock, records: int) -> Report:
    """The run as the consumer's hooks stamped it (``windowed_provider``'s ``clock``).

    This task only decides when the run is over, never when it began or ended: once the
    results account for every expected event, or once the processors took every record and
    no result came for a second (a run whose windows do not all close; its coverage says so)."""
    async with provider:
        quiet = 0.0
        while not clock.complete and quiet < 1.0:
            done = clock.done
            await anyio.sleep(0.002)
            quiet = quiet + 0.002 if clock.done == done and taken(provider) >= records else 0.0
        return clock.report()


def counting_provider(provider: StreamProvider, clock: Clock) -> StreamProvider:
    """``provider`` with a plain consumer (no event time) that counts what ``on_next`` gets."""

    @provider.implicit("sensors")
    class Taken:
        def __init__(self, stream_id: StreamId) -> None:
            pass

        def on_next(self, batch: list[Any]) -> None:
            clock.taken(len(batch))
            clock.result()

    return provider


async def raw_read(bootstrap: str, topic: str, queues: int, expected: int) -> Report:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(queues)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    clock = Clock(expected)
    read = 0
    loads = json.loads
    while read < expected:
        for records in (await consumer.getmany(timeout_ms=500, max_records=1000)).values():
            clock.taken(len(records))
            for r in records:
                loads(r.value)  # type: ignore[arg-type]
            read += len(records)
            clock.result()
    report = clock.report()
    await consumer.stop()
    return report


def quix_read(bootstrap: str, topic: str, expected: int) -> Report:
    """What Quix Streams takes (bench/quix_sensors.py, in a process of its own)."""
    script = Path(__file__).with_name("quix_sensors.py")
    done = subprocess.run(
        [sys.executable, str(script), bootstrap, topic, str(expected)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"Quix Streams failed: {done.stderr.strip().splitlines()[-1:]}")
    return Report(**json.loads(done.stdout.strip().splitlines()[-1]))


def decoders(items: list[tuple[bytes, dict[str, object]]]) -> None:
    """ns a record for each JSON decoder, on the topic's records."""
    records = [json.dumps(v).encode() for _, v in items[:20_000]]
    candidates = {"json.loads": json.loads, "headrace JsonRecords.decode": JsonRecords.decode}
    for name, module, call in (("orjson.loads", "orjson", "loads"), ("msgspec.json.decode", "msgspec.json", "decode")):
        if importlib.util.find_spec(module.split(".")[0]):
            candidates[name] = getattr(importlib.import_module(module), call)
    print(f"\n{'one JSON record decoded by':30} {'ns':>6} {'vs json.loads':>14}")
    base = None
    for name, decode in candidates.items():
        seconds = min(timeit.repeat(lambda d=decode: [d(r) for r in records], number=1, repeat=7))  # type: ignore[misc]
        ns = seconds / len(records) * 1e9
        base = base or ns
        print(f"{name:30} {ns:6.0f} {base / ns:13.1f}x")


def topic_of(codec: str) -> str:
    return "sensors" if codec == "none" else f"sensors-{codec}"


async def run(records: int, queues: int, rounds: int, codecs: list[str]) -> None:
    quix = importlib.util.find_spec("quixstreams") is not None
    items = list(readings(records))
    expected = closed_window_counts([v for _, v in items], 60, 5)
    with TansuBroker() as broker:
        bootstrap = broker.bootstrap
        kafka = {"idempotent": False, "group_membership": False}
        await ensure_topic(bootstrap, "sensors", queues)
        began = time.perf_counter()
        await write_json(bootstrap, "sensors", items)
        written = time.perf_counter() - began
        for codec in codecs:  # the same readings, compressed
            await ensure_topic(bootstrap, topic_of(codec), queues)
            await write_json(bootstrap, topic_of(codec), items, compression=codec)
        await ensure_topic(bootstrap, "sensors-keyless", queues)
        await write_json(bootstrap, "sensors-keyless", [(None, v) for _, v in items])
        # The same readings in headrace's own format, one event per record.
        own = KafkaAdapterFactory(KafkaSettings(bootstrap, "sensors-own", queues=queues, idempotent=False))
        adapter, mapper = await own.create_adapter(), own.get_queue_mapper()
        containers = []
        for key, value in items:
            sid = StreamId("sensors", key.decode())
            arrival = int(value["ts"]) / 1000  # type: ignore[call-overload]
            payload = BatchContainer(sid, BatchKind.DATA, arrival, [value]).encode()
            containers.append((mapper.get_queue_for_stream(sid), sid, payload))
        for start in range(0, len(containers), 5000):
            await adapter.queue_message_batches(containers[start : start + 5000])
        await own.close()
        print(
            f"Tansu broker {bootstrap}; {records} JSON records, 1 event each, 100 sensors, "
            f"{queues} partitions (written by plain aiokafka at {records / written:,.0f}/s); "
            f"best of {rounds} rounds\n"
        )
        closed = sum(expected.values())  # the events a consumer's closed windows account for
        runs: dict[str, list[Report]] = {}
        checked = ""

        async def windowed(name: str, provider: StreamProvider, counts: Counter[tuple[str, float]]) -> None:
            clock = Clock(closed)
            runs.setdefault(name, []).append(
                await worker_read(windowed_provider(provider, counts, clock), clock, records)
            )

        for round_no in range(rounds):
            runs.setdefault(RAW, []).append(await raw_read(bootstrap, "sensors", queues, records))
            counts: Counter[tuple[str, float]] = Counter()
            await windowed(
                JSON_WORKER, json_reader(bootstrap, "sensors", queues, f"bench-json-{round_no}", kafka), counts
            )
            checked = "equal" if counts == expected else f"DIFFER ({sum(counts.values())} vs {closed})"
            untuned_counts: Counter[tuple[str, float]] = Counter()
            untuned = json_reader(bootstrap, "sensors", queues, f"bench-untuned-{round_no}", kafka, tune_gc=False)
            await windowed(UNTUNED, untuned, untuned_counts)
            if untuned_counts != expected:
                checked += f"; tune_gc=False DIFFER ({sum(untuned_counts.values())} vs {closed})"
            if quix:
                runs.setdefault(QUIX, []).append(await asyncio.to_thread(quix_read, bootstrap, "sensors", records))
            keyless = json_reader(
                bootstrap, "sensors-keyless", queues, f"bench-keyless-{round_no}", kafka, key_field="sensor"
            )
            # Plain on_next: a sensor's re-keyed readings come from every partition, and its
            # windows stay open (about 10 % of them closed when every record was taken).
            clock = Clock(records)
            runs.setdefault(KEYLESS, []).append(await worker_read(counting_provider(keyless, clock), clock, records))
            own_worker = StreamProvider.kafka(
                bootstrap, "sensors-own", queues=queues, group_id=f"bench-own-{round_no}", kafka=kafka
            )
            own_counts: Counter[tuple[str, float]] = Counter()
            await windowed(OWN, own_worker, own_counts)
            if own_counts != expected:
                checked += f"; own format DIFFER ({sum(own_counts.values())} vs {closed})"
            own_untuned = StreamProvider.kafka(
                bootstrap,
                "sensors-own",
                queues=queues,
                group_id=f"bench-own-untuned-{round_no}",
                kafka=kafka,
                tune_gc=False,
            )
            own_untuned_counts: Counter[tuple[str, float]] = Counter()
            await windowed(OWN_UNTUNED, own_untuned, own_untuned_counts)
            if own_untuned_counts != expected:
                checked += f"; own format tune_gc=False DIFFER ({sum(own_untuned_counts.values())} vs {closed})"
            for codec in codecs:
                topic = topic_of(codec)
                runs.setdefault(f"{codec}: {RAW}", []).append(await raw_read(bootstrap, topic, queues, records))
                compressed = json_reader(bootstrap, topic, queues, f"bench-{codec}-{round_no}", kafka)
                codec_counts: Counter[tuple[str, float]] = Counter()
                await windowed(f"{codec}: headrace worker, records='json'", compressed, codec_counts)
                if codec_counts != expected:
                    checked += f"; {codec} DIFFER ({sum(codec_counts.values())} vs {closed})"
    table = {name: best(reports) for name, reports in runs.items()}
    base = table[RAW]
    print(HEADER.replace("vs base", " vs raw"))
    for name, report in table.items():
        print(row(name, report, base))
    # Issue 36's aims with the library's defaults; the tune_gc=False rows have none.
    aims = {JSON_WORKER: " (aim 1.0x)", UNTUNED: "", OWN: " (aim 1.0x)", OWN_UNTUNED: "", KEYLESS: " (aim 0.6x)"}
    for name, aim in aims.items():
        print(f"\n{name}:\n  against the raw loop{aim}: {ratio(table[name], base)}")
        if quix and name in (JSON_WORKER, UNTUNED):
            print(f"  against Quix Streams (aim 5x): {ratio(table[name], table[QUIX])}")
    if not quix:
        print("\nQuix Streams is not installed (pip install 'headrace[bench]'): its row is left out")
    print(f"\nwindow counts of the windowed workers (every codec, own format) against a count made here: {checked}")
    print(f"\n{'record batches':16} {'raw events/s':>13} {'headrace events/s':>18} {'headrace/raw':>13}")
    lines = [("none", RAW, JSON_WORKER)]
    lines += [(c, f"{c}: {RAW}", f"{c}: headrace worker, records='json'") for c in codecs]
    for codec, raw, worker in lines:
        raw_rate, worker_rate = table[raw].rate, table[worker].rate
        if raw_rate is None or worker_rate is None:
            print(f"{codec:16} no rate: a timed span covers under 90 % of the events")
        else:
            print(f"{codec:16} {raw_rate:13,.0f} {worker_rate:18,.0f} {worker_rate / raw_rate:12.2f}x")
    decoders(items)


def main(argv: list[str], prog: str = "kafka_sensors.py") -> None:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--codecs", default="lz4,zstd", help="record batch codecs read beside none (comma-separated; '' for none)"
    )
    options = parser.parse_args(argv)
    codecs = [c for c in options.codecs.split(",") if c]
    asyncio.run(run(options.records, options.queues, options.rounds, codecs))


if __name__ == "__main__":
    main(sys.argv[1:])
