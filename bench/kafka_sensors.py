"""Issue 12's workload: a topic of JSON events, one per record, written by plain aiokafka.

``--records`` readings of 100 sensors (10 ms apart, 5 % of them 3 s out of order, ``ts`` in
epoch milliseconds, key ``sensor-N``) on ``--queues`` partitions of a Tansu broker. Measured
in one run, on that topic:

- raw: one ``AIOKafkaConsumer`` over every partition, ``getmany`` + ``json.loads`` per record
  (it only decodes);
- headrace: a worker (``records="json"``) whose consumer counts each sensor's events in
  tumbling 60 s windows (out-of-order tolerance 5 s), timed from the worker being up to its
  processors having taken every event; its window counts are checked against a count made
  here;
- the same worker with ``tune_gc=True``, the garbage-collector policy ``headrace worker``
  applies (a library leaves it off: see agents/gc_policy.py);
- Quix Streams 3.x (``bench/quix_sensors.py``, a process of its own): the same tumbling 60 s
  count per sensor, grace 5 s, event time from ``ts``;
- the same readings written without a key (a producer that keys nothing spreads them over
  every partition), read by the JSON worker with ``key_field="sensor"``: each record goes
  through the re-keying hop (streams/kafka/repartition.py), so it is read twice and written
  once more; the total taken is checked (not the windows: a sensor's readings now come from
  every partition, each read at its own pace, so some are adjusted);
- headrace's own format with one event per record (what ``on_next`` makes), the same
  readings, the same consumer;
- the same readings written again with ``--codecs`` (lz4 and zstd record batches; the
  codecs every Kafka producer offers), each read by the raw loop and by the JSON worker:
  what decompression costs either, side by side.

Each read runs ``--rounds`` times, alternating; each row shows its best round. Rates are
timed from the first tenth of the events on (see ``steady``), in wall-clock seconds and in
CPU seconds of the reading process (the broker's are not counted for any row; the machine
is shared, and CPU time moves less with what else runs). Then one record's decoding, by
each JSON library, on the same records (ns a record, best of 7).

    python bench/kafka.py sensors [--records 200000] [--queues 8] [--rounds 3] [--codecs lz4,zstd]
    python bench/kafka_sensors.py [--records 200000] [--queues 8] [--rounds 3] [--codecs lz4,zstd]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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

from streams import StreamId, StreamProvider  # noqa: E402
from streams.core.batch import BatchContainer, BatchKind  # noqa: E402
from streams.core.records import JsonRecords  # noqa: E402
from streams.eventtime import Count, EventTime, OrderingPolicy, Tumbling  # noqa: E402
from streams.kafka.adapter import KafkaAdapterFactory  # noqa: E402
from streams.kafka.clients import ensure_topic  # noqa: E402
from tests.kafka_broker import TansuBroker  # noqa: E402
from tests.sensor_workload import closed_window_counts, readings, write_json  # noqa: E402

RAW = "raw aiokafka: getmany + json.loads"
JSON_WORKER = "headrace worker, records='json', 60 s windows"
TUNED = "the same, tune_gc=True (as `headrace worker` runs it)"
QUIX = "Quix Streams 3, tumbling 60 s count"
KEYLESS = "keyless records, re-keyed through the hop (key_field)"


def windowed_provider(provider: StreamProvider, counts: Counter[tuple[str, float]]) -> StreamProvider:
    @provider.implicit("sensors")
    class PerSensor:
        event_time = EventTime(
            OrderingPolicy(timestamp_by="ts", unit="ms", out_of_order=5),
            Tumbling(60),
            Count(),
        )

        def __init__(self, stream_id: StreamId) -> None:
            self.key = stream_id.key

        def on_window(self, result: Any) -> None:
            counts[(self.key, result.start)] += result.value

    return provider


def json_reader(
    bootstrap: str, topic: str, queues: int, group_id: str, kafka: dict[str, Any], **options: Any
) -> StreamProvider:
    """A worker reading ``topic``'s JSON records as the ``sensors`` namespace."""
    return StreamProvider.kafka(
        bootstrap, topic, queues, records="json", namespace="sensors", group_id=group_id, kafka=kafka, **options
    )


def steady(expected: int) -> int:
    """Rates are timed from this many events on to the last: the start (connections, first
    fetches, which both sides prefetch differently) is left out of both."""
    return expected // 10


# (wall-clock seconds, CPU seconds of the reading process) for all the records, as timed
# from the first ``steady`` ones: on a machine other work shares, the CPU time moves less.
Timing = tuple[float, float]


class Span:
    """Times a read from its ``steady`` point on, scaled to all ``expected`` records.

    Made before the read starts, it freezes what the set-up left alive (the readings, the
    counts to check against): no side's garbage collections walk them."""

    def __init__(self, expected: int) -> None:
        gc.collect()
        gc.freeze()
        self.expected = expected
        self.began: tuple[float, float, int] | None = None

    def at(self, done: int) -> None:
        if self.began is None and done >= steady(self.expected):
            self.began = (time.perf_counter(), time.process_time(), done)

    def timing(self, done: int) -> Timing:
        assert self.began is not None
        wall, cpu, at = self.began
        scale = self.expected / (done - at)
        return (time.perf_counter() - wall) * scale, (time.process_time() - cpu) * scale


async def worker_read(provider: StreamProvider, expected: int) -> Timing:
    """What its processors take from the first ``steady`` events to all ``expected``."""
    span = Span(expected)
    async with provider:
        while True:
            taken = sum(o.processor.counters.events for a in provider.agents for o in a.event_time_activations())
            span.at(taken)
            if taken >= expected:
                return span.timing(taken)
            await anyio.sleep(0.002)


async def raw_read(bootstrap: str, topic: str, queues: int, expected: int) -> Timing:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(queues)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    span = Span(expected)
    read = 0
    loads = json.loads
    while read < expected:
        for records in (await consumer.getmany(timeout_ms=500, max_records=1000)).values():
            for r in records:
                loads(r.value)  # type: ignore[arg-type]
            read += len(records)
        span.at(read)
    timing = span.timing(read)
    await consumer.stop()
    return timing


def quix_read(bootstrap: str, topic: str, expected: int) -> Timing:
    """What Quix Streams takes (bench/quix_sensors.py, in a process of its own)."""
    script = Path(__file__).with_name("quix_sensors.py")
    done = subprocess.run(
        [sys.executable, str(script), bootstrap, topic, str(expected)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"Quix Streams failed: {done.stderr.strip().splitlines()[-1:]}")
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


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
        await ensure_topic({"bootstrap_servers": bootstrap}, "sensors", queues)
        began = time.perf_counter()
        await write_json(bootstrap, "sensors", items)
        written = time.perf_counter() - began
        for codec in codecs:  # the same readings, compressed
            await ensure_topic({"bootstrap_servers": bootstrap}, topic_of(codec), queues)
            await write_json(bootstrap, topic_of(codec), items, compression=codec)
        await ensure_topic({"bootstrap_servers": bootstrap}, "sensors-keyless", queues)
        await write_json(bootstrap, "sensors-keyless", [(None, v) for _, v in items])
        # The same readings in headrace's own format, one event per record.
        own = KafkaAdapterFactory(bootstrap, "sensors-own", queues=queues, idempotent=False)
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
        best: dict[str, Timing] = {}
        checked = ""
        for round_no in range(rounds):
            times = {RAW: await raw_read(bootstrap, "sensors", queues, records)}
            counts: Counter[tuple[str, float]] = Counter()
            json_worker = json_reader(bootstrap, "sensors", queues, f"bench-json-{round_no}", kafka)
            times[JSON_WORKER] = await worker_read(windowed_provider(json_worker, counts), records)
            checked = "equal" if counts == expected else f"DIFFER ({sum(counts.values())} vs {sum(expected.values())})"
            tuned_counts: Counter[tuple[str, float]] = Counter()
            tuned = json_reader(bootstrap, "sensors", queues, f"bench-tuned-{round_no}", kafka, tune_gc=True)
            times[TUNED] = await worker_read(windowed_provider(tuned, tuned_counts), records)
            if tuned_counts != expected:
                checked += f"; tune_gc DIFFER ({sum(tuned_counts.values())} vs {sum(expected.values())})"
            if quix:
                times[QUIX] = await asyncio.to_thread(quix_read, bootstrap, "sensors", records)
            keyless = json_reader(
                bootstrap, "sensors-keyless", queues, f"bench-keyless-{round_no}", kafka, key_field="sensor"
            )
            times[KEYLESS] = await worker_read(windowed_provider(keyless, Counter()), records)
            own_worker = StreamProvider.kafka(
                bootstrap, "sensors-own", queues, group_id=f"bench-own-{round_no}", kafka=kafka
            )
            times["headrace worker, own format 1 event/record, 60 s windows"] = await worker_read(
                windowed_provider(own_worker, Counter()), records
            )
            for codec in codecs:
                topic = topic_of(codec)
                times[f"{codec}: {RAW}"] = await raw_read(bootstrap, topic, queues, records)
                compressed = json_reader(bootstrap, topic, queues, f"bench-{codec}-{round_no}", kafka)
                codec_counts: Counter[tuple[str, float]] = Counter()
                times[f"{codec}: headrace worker, records='json'"] = await worker_read(
                    windowed_provider(compressed, codec_counts), records
                )
                if codec_counts != expected:
                    checked += f"; {codec} DIFFER ({sum(codec_counts.values())} vs {sum(expected.values())})"
            for name, (wall, cpu) in times.items():
                was = best.get(name, (wall, cpu))
                best[name] = (min(was[0], wall), min(was[1], cpu))
    base, base_cpu = best[RAW]
    print(f"{'':58} {'events/s':>10} {'vs raw':>7} {'per CPU s':>10} {'vs raw':>7}")
    for name, (wall, cpu) in best.items():
        print(f"{name:58} {records / wall:10,.0f} {base / wall:6.2f}x {records / cpu:10,.0f} {base_cpu / cpu:6.2f}x")
    for name in (JSON_WORKER, TUNED):
        json_wall, json_cpu = best[name]
        print(
            f"\n{name}:\n  against the raw loop (aim 1.0x): {base / json_wall:.2f}x "
            f"({base_cpu / json_cpu:.2f}x per CPU second)"
        )
        if quix:
            quix_wall, quix_cpu = best[QUIX]
            print(
                f"  against Quix Streams (aim 5x): {quix_wall / json_wall:.2f}x "
                f"({quix_cpu / json_cpu:.2f}x per CPU second)"
            )
    if not quix:
        print("\nQuix Streams is not installed (pip install 'headrace[bench]'): its row is left out")
    print(f"\nwindow counts of the JSON workers (every codec) against a count made here: {checked}")
    print(f"\n{'record batches':16} {'raw events/s':>13} {'headrace events/s':>18} {'headrace/raw':>13}")
    rows = [("none", RAW, JSON_WORKER)]
    rows += [(c, f"{c}: {RAW}", f"{c}: headrace worker, records='json'") for c in codecs]
    for codec, raw, worker in rows:
        raw_rate, worker_rate = records / best[raw][0], records / best[worker][0]
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
