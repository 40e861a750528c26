"""Quix Streams 3.x on the sensor topic, for ``bench/kafka.py sensors``: a tumbling 60 s count
per sensor (grace 5 s, the out-of-order tolerance headrace's worker is given), event time
from the record's ``ts`` field, with Quix's defaults otherwise (RocksDB state, changelog
topics).

It runs in a process of its own (Quix installs signal handlers and runs its own blocking
loop) and prints, as JSON, the run as bench/timing.py's ``Clock`` stamped it from Quix's own
``on_message_processed`` hook: from the first record processed to the last, wall-clock and
CPU seconds of its process (librdkafka's and RocksDB's threads included).

    python bench/quix_sensors.py BOOTSTRAP TOPIC RECORDS
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/streams.py would shadow the package

from bench.timing import Clock, Report  # noqa: E402


def quix_read(bootstrap: str, topic: str, expected: int) -> Report:
    from quixstreams import Application

    clock = Clock(expected)

    def processed(topic: str, partition: int, offset: int) -> None:
        # Called once a record went through the dataframe: the stamp is after it, so the
        # first record is outside the span (199,999 of 200,000 are in).
        clock.result(1)
        if clock.complete:
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
    if not clock.complete:
        raise RuntimeError(f"Quix stopped after {clock.done} of {expected} records")
    return clock.report()


if __name__ == "__main__":
    print(json.dumps(dataclasses.asdict(quix_read(sys.argv[1], sys.argv[2], int(sys.argv[3])))))
