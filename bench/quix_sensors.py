"""Quix Streams 3.x on issue 12's topic, for ``bench/kafka.py sensors``: a tumbling 60 s count
per sensor (grace 5 s, the out-of-order tolerance headrace's worker is given), event time
from the record's ``ts`` field, with Quix's defaults otherwise (RocksDB state, changelog
topics).

It runs in a process of its own (Quix installs signal handlers and runs its own blocking
loop) and prints the seconds its consumer took from the first tenth of the records to the
last, scaled to all of them, as the other rows of the table are timed: wall-clock, then
CPU seconds of its process (librdkafka's and RocksDB's threads included).

    python bench/quix_sensors.py BOOTSTRAP TOPIC RECORDS
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
import uuid


def quix_read(bootstrap: str, topic: str, expected: int) -> tuple[float, float]:
    from quixstreams import Application

    began: list[tuple[float, float]] = []
    done: list[tuple[float, float]] = []
    seen = 0

    def processed(topic: str, partition: int, offset: int) -> None:
        nonlocal seen
        seen += 1
        if seen == expected // 10:
            began.append((time.perf_counter(), time.process_time()))
        if seen == expected:
            done.append((time.perf_counter(), time.process_time()))
            app.stop()

    with tempfile.TemporaryDirectory(prefix="headrace-quix-") as state:
        app = Application(
            broker_address=bootstrap,
            consumer_group=f"quix-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            state_dir=state,
            loglevel=logging.WARNING,
            on_message_processed=processed,
        )
        readings = app.topic(
            topic,
            value_deserializer="json",
            timestamp_extractor=lambda value, headers, timestamp, kind: int(value["ts"]),
        )
        # Tansu describes a topic without retention.ms, which Quix reads to configure its
        # changelog topic: it gets Kafka's default (7 days), as a real broker would report.
        readings.broker_config.extra_config.setdefault("retention.ms", str(7 * 24 * 3600 * 1000))
        sdf = app.dataframe(readings)
        sdf.tumbling_window(duration_ms=60_000, grace_ms=5_000).count().final()
        app.run()
    if not done:
        raise RuntimeError(f"Quix stopped after {seen} of {expected} records")
    scale = expected / (expected - expected // 10)
    return (done[0][0] - began[0][0]) * scale, (done[0][1] - began[0][1]) * scale


if __name__ == "__main__":
    wall, cpu = quix_read(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print(wall, cpu)
