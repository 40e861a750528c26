"""The demo's settings, apart from the pipeline so that ``headrace --help`` stays light."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.runtime.logs import LogFormat


@dataclass(frozen=True)
class DemoSettings:
    """The demo's knobs (``headrace demo --help``)."""

    duration: float = 60.0  # seconds of publishing
    rate: float = 1000.0  # toll reports per second, all plazas together
    streams: int = 40  # toll plazas: one stream each
    booths: int = 4  # per plaza
    queues: int = 8
    window: float = 10.0  # tumbling window, seconds
    path: Path | None = None  # the embedded store (default: a temporary directory)
    kafka: str | None = None  # bootstrap servers: queues on Kafka instead
    kafka_options: Mapping[str, Any] = field(default_factory=dict)  # KafkaSettings fields
    spark: bool = True
    metrics_port: int | None = None
    log_format: LogFormat = "text"
    trigger: float = 2.0  # seconds between two micro-batches
    drain_timeout: float = 120.0  # for the worker, and then for the reader, at the end
    kafka_reach_timeout: float = 5.0  # a broker that does not answer by then: the address is wrong
    seed: int = 7

    @property
    def corrupt_records(self) -> int:
        return max(3, int(self.duration // 20))
