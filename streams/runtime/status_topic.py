"""The workers' status on Kafka: a compacted topic where each worker publishes its snapshot
every ``status_interval``, for ``headrace status`` to read from any machine.

The topic is ``<group_id>.status.<topic>`` (one partition, compacted), one record per worker:

- key: the worker's name;
- value: msgpack ``{"format": 1, "worker", "instance", "started_at", "updated",
  "fresh_until", "agents": [...]}``, each agent every field of its
  :class:`~streams.runtime.status_reporter.AgentStatus` (fields this version does not know, a newer
  worker's, are left out when read);
- no value (a tombstone) once the worker has left, so compaction drops it.

A snapshot is current until its ``fresh_until`` (three intervals): a worker that stopped
publishing without leaving (killed) shows as no longer live.

>>> report = WorkerReport("w1", "host/42", 10.0, 12.0, 27.0, [])
>>> decode_report(encode_report(report)) == report
True
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import msgpack

from streams.core.outage import OutageLog
from streams.kafka.pubsub import COMPACTED
from streams.kafka.settings import KafkaSettings
from streams.kafka.topic_log import LogRecord, TopicLog
from streams.runtime.snapshot import CursorLag
from streams.runtime.status_reporter import AgentStatus

FORMAT = 1


def status_topic(settings: KafkaSettings) -> str:
    """The status topic of the workers reading ``settings.topic`` under ``settings.group_id``.

    >>> status_topic(KafkaSettings("localhost:9092", "sensors"))
    'headrace.status.sensors'
    """
    return f"{settings.group_id}.status.{settings.topic}"


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """A worker's last published snapshot: who it is (``instance``: ``host/pid``), when it
    started and published, until when that is current, and its agents."""

    worker: str
    instance: str
    started_at: float
    updated: float
    fresh_until: float
    agents: list[AgentStatus] = field(default_factory=list)


_AGENT_FIELDS = {f.name for f in fields(AgentStatus)}


def encode_report(report: WorkerReport) -> bytes:
    value: bytes = msgpack.packb({"format": FORMAT, **asdict(report)})
    return value


def decode_report(value: bytes) -> WorkerReport:
    data: Any = msgpack.unpackb(value)
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ValueError("not a headrace worker status")
    agents = []
    for agent in data["agents"]:
        known = {name: v for name, v in agent.items() if name in _AGENT_FIELDS}
        known["slowest"] = [CursorLag(**lag) for lag in known.get("slowest", [])]
        agents.append(AgentStatus(**known))
    return WorkerReport(
        data["worker"], data["instance"], data["started_at"], data["updated"], data["fresh_until"], agents
    )


class KafkaStatusBoard:
    """A :class:`~streams.runtime.status_reporter.StatusBoard` in the cluster's status topic.

    Example (``headrace worker`` makes one for a provider on Kafka)::

        board = KafkaStatusBoard(settings)
        await tg.start(StatusReporter(provider, board, interval=5.0).run)
        reports = await read_reports(settings)  # {"worker-1": WorkerReport(...), ...}
    """

    def __init__(self, settings: KafkaSettings, outage: OutageLog | None = None) -> None:
        self.log = TopicLog(settings, status_topic(settings), COMPACTED, outage)
        self.instance = f"{socket.gethostname()}/{os.getpid()}"
        self.started_at = time.time()

    async def publish(self, worker: str, statuses: list[AgentStatus], taken_at: float, fresh_until: float) -> None:
        report = WorkerReport(worker, self.instance, self.started_at, taken_at, fresh_until, statuses)
        await self.log.append([LogRecord(worker.encode(), encode_report(report))])

    async def clear(self, worker: str) -> None:
        await self.log.append([LogRecord(worker.encode(), None)])

    async def close(self) -> None:
        await self.log.close()


async def read_reports(settings: KafkaSettings) -> dict[str, WorkerReport]:
    """Each worker's newest snapshot (a worker that left has none), by name."""
    log = TopicLog(settings, status_topic(settings), COMPACTED)
    try:
        records = await log.read(0)
    finally:
        await log.close()
    reports: dict[str, WorkerReport] = {}
    for record in records:
        if record.key is None:
            continue
        name = record.key.decode(errors="replace")
        if record.value is None:
            reports.pop(name, None)
            continue
        try:
            reports[name] = decode_report(record.value)
        except (ValueError, KeyError, TypeError):  # another program's record, or a newer format
            continue
    return reports
