"""The workers' status on Kafka: each worker's snapshot on a compacted status topic, and a Kafka
cluster's status read from the cluster itself for ``headrace status``.

A Kafka cluster's status, read from the cluster itself: what ``headrace status --config``
shows for a Kafka adapter, in the same :class:`~streams.adapters.status.ClusterStatus` as the embedded
store's.

- **Workers**: each worker's last snapshot in the status topic (:mod:`streams.backends.kafka.status`):
``live`` while it is current (published within three ``status_interval``), ``suspected``
after; a worker that left has none. The consumer group's member count comes from Kafka.
- **Queues**: each partition's oldest retained and end offsets, the offset committed under
``group_id`` (``checkpoint`` is the last offset acknowledged) and the lag between; its
owner, cache and watermarks from the current snapshot that names it. Several topics read
together (``topics=``) are summed per queue. ``lag_events``: on a topic of one event per
record, the lag; on headrace's own (containers of many events) not counted (``None``).
``lag_seconds``: how long ago the oldest record past the committed offset was written (its
Kafka timestamp; 0 with none).
- **Dead letters** by reason, from the dead-letter topic; the **handoff log**'s streams and
end offsets, from its topics.

Reading creates the status and dead-letter topics if they do not exist yet (empty), and
writes nothing else.

Example (with a broker at 127.0.0.1:9092)::

status = await read_kafka_status(KafkaSettings("127.0.0.1:9092", "sensors"), suspicion_timeout=10)
[(q.queue, q.owner, q.checkpoint_lag) for q in status.queues]

The workers' status on Kafka: a compacted topic where each worker publishes its snapshot
every ``status_interval``, for ``headrace status`` to read from any machine.

The topic is ``<group_id>.status.<topic>`` (one partition, compacted), one record per worker:

- key: the worker's name;
- value: msgpack ``{"format": 1, "worker", "instance", "started_at", "updated",
  "fresh_until", "agents": [...]}``, each agent every field of its
  :class:`~streams.adapters.status.AgentStatus` (fields this version does not know, a newer
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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import anyio
import msgpack
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from streams.adapters.status import (
    GONE_AFTER_TIMEOUTS,
    AgentStatus,
    CheckpointHolder,
    ClusterStatus,
    CursorLag,
    DeadLetterCount,
    HandoffStatus,
    QueueStatus,
    WorkerStatus,
    observed_of,
)
from streams.backends.kafka import spark_commits
from streams.backends.kafka.assignor import MemberClaim
from streams.backends.kafka.balancer import membership_group_id
from streams.backends.kafka.clients import kafka_outage_log, retry_kafka, start_client, stop_client
from streams.backends.kafka.deadletters import KafkaDeadLetterStore
from streams.backends.kafka.ends import partition_ends
from streams.backends.kafka.pubsub import COMPACTED
from streams.backends.kafka.settings import KafkaSettings
from streams.backends.kafka.spark_commits import spark_group
from streams.backends.kafka.topic_log import LogRecord, TopicLog
from streams.core.clock import wall_time
from streams.core.ids import QueueId
from streams.core.retry import OutageLog

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
        known["observed"] = observed_of(known.get("observed", {}))
        known["checkpoint_holder"] = CheckpointHolder.of(known.get("checkpoint_holder"))
        agents.append(AgentStatus(**known))
    return WorkerReport(
        data["worker"], data["instance"], data["started_at"], data["updated"], data["fresh_until"], agents
    )


class KafkaStatusBoard:
    """A :class:`~streams.adapters.status.StatusBoard` in the cluster's status topic.

    Example (``headrace worker`` makes one for a provider on Kafka)::

        board = KafkaStatusBoard(settings)
        await tg.start(StatusReporter(provider, board, interval=5.0).run)
        reports = await read_reports(settings)  # {"worker-1": WorkerReport(...), ...}
    """

    def __init__(self, settings: KafkaSettings, outage: OutageLog | None = None) -> None:
        self.log = TopicLog(settings, status_topic(settings), COMPACTED, outage)
        self.instance = f"{socket.gethostname()}/{os.getpid()}"
        self.started_at = wall_time()

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


async def read_kafka_status(
    settings: KafkaSettings, *, suspicion_timeout: float, now: float | None = None, everyone: bool = False
) -> ClusterStatus:
    """The status of the workers of ``settings.topic`` under ``settings.group_id``. Workers
    silent for more than ``GONE_AFTER_TIMEOUTS`` suspicion timeouts are counted, not listed,
    unless ``everyone``. Retried while the cluster is unreachable (``give_up_after``)."""
    at = wall_time() if now is None else now
    outage = kafka_outage_log(settings)
    reports = await read_reports(settings)
    members = await retry_kafka(lambda: _group_members(settings), "describing the consumer group", settings, outage)
    offsets = await retry_kafka(lambda: _offsets(settings), "reading the queues' offsets", settings, outage)
    fresh = sorted((r for r in reports.values() if r.fresh_until >= at), key=lambda r: r.updated)
    agents = {a.queue: a for r in fresh for a in r.agents}  # the newest report naming a queue wins
    queues = [_queue(settings, q, bounds, agents.get(q), at) for q, bounds in enumerate(offsets)]
    workers = [_worker(r, at) for r in sorted(reports.values(), key=lambda r: r.worker)]
    horizon = at - GONE_AFTER_TIMEOUTS * suspicion_timeout
    shown = [w for w in workers if everyone or w.state == "live" or w.last_heartbeat > horizon]
    letters = KafkaDeadLetterStore(settings, outage)
    try:
        counts = await letters.counts()
    finally:
        await letters.close()
    return ClusterStatus(
        f"{settings.server}, topic {settings.topic!r}",
        at,
        suspicion_timeout,
        settings.queues,
        shown,
        queues,
        [DeadLetterCount(reason, n, replayed) for reason, (n, replayed) in counts.items()],
        await _handoff(settings),
        [],
        workers_not_shown=len(workers) - len(shown),
        kind="cluster",
        group_members=members,
    )


def _worker(report: WorkerReport, now: float) -> WorkerStatus:
    live = report.fresh_until >= now
    return WorkerStatus(
        report.worker,
        "live" if live else "suspected",
        report.started_at,
        report.updated,
        None,
        sorted(a.queue for a in report.agents) if live else [],
        report.instance,
    ).with_clock_steps(report.agents)


# A queue's offsets summed over its topics: oldest retained, end, committed (None: never),
# and when its oldest record not yet committed was written (POSIX s; None: there is none).
_Bounds = tuple[int, int, int | None, float | None]


def _queue(settings: KafkaSettings, number: int, bounds: _Bounds, agent: AgentStatus | None, now: float) -> QueueStatus:
    first, end, committed, oldest = bounds
    lag = end - (first if committed is None else committed)
    return QueueStatus(
        queue=number,
        owner=None if agent is None else agent.worker,
        epoch=None,
        lease_expires=None,
        first_retained=first,
        next_sequence=end,
        retained=end - first,
        checkpoint=None if committed is None else committed - 1,
        checkpoint_lag=lag,
        agent=agent,
        lag_events=lag if settings.record_format is not None else None,
        lag_seconds=0.0 if oldest is None else max(0.0, now - oldest),
    )


async def _offsets(settings: KafkaSettings) -> list[_Bounds]:
    """Per queue, the offsets of its partitions (summed over the topics it reads)."""
    consumer = AIOKafkaConsumer(
        **settings.consumer_kwargs(
            group_id=settings.group_id,
            enable_auto_commit=False,
            fetch_max_wait_ms=int(settings.poll_timeout * 1000),
        )
    )
    await start_client(consumer, settings)
    try:
        queues = [settings.partitions_of(QueueId(q)) for q in range(settings.queues)]
        every: Sequence[TopicPartition] = [tp for tps in queues for tp in tps]
        consumer.assign(list(every))
        first = await consumer.beginning_offsets(every)
        # The end from the records (a fetch's), not only the broker's listed one, which
        # can be short of them: the lag is what a reader at the committed offset has left.
        end = await partition_ends(consumer, every, settings.request_timeout)
        committed = {tp: await consumer.committed(tp) for tp in every}
        unread = {tp: max(first[tp], committed[tp] or 0) for tp in every}
        written = await _written_at(consumer, {tp: o for tp, o in unread.items() if o < end[tp]}, settings)
    finally:
        await stop_client(consumer)
    bounds: list[_Bounds] = []
    for tps in queues:
        marks = [committed[tp] for tp in tps if committed[tp] is not None]
        times = [written[tp] for tp in tps if tp in written]
        bounds.append(
            (
                sum(first[tp] for tp in tps),
                sum(end[tp] for tp in tps),
                sum(marks) if marks else None,
                min(times) if times else None,
            )
        )
    return bounds


async def _written_at(
    consumer: AIOKafkaConsumer, offsets: Mapping[TopicPartition, int], settings: KafkaSettings
) -> dict[TopicPartition, float]:
    """When the record at ``offsets[tp]`` was written (its Kafka timestamp, POSIX s): the
    oldest one not yet committed, how far behind a queue is in time (``lag_seconds``).
    Raises ``TimeoutError`` when a partition's fetch is not answered in time (retried)."""
    written: dict[TopicPartition, float] = {}
    for tp, offset in offsets.items():
        consumer.seek(tp, offset)
    with anyio.fail_after(settings.request_timeout):
        while pending := [tp for tp in offsets if tp not in written]:
            fetched = await consumer.getmany(*pending, timeout_ms=100, max_records=1)
            for tp, records in fetched.items():
                if records:
                    written[tp] = records[0].timestamp / 1000
    return written


async def _group_members(settings: KafkaSettings) -> list[str]:
    """The members of the workers' consumer group, by worker name where Kafka says (the
    join metadata carries it), else by member id."""
    admin = AIOKafkaAdminClient(**settings.client_kwargs())
    await start_client(admin, settings)
    try:
        [response] = await admin.describe_consumer_groups([membership_group_id(settings)])
    finally:
        await admin.close()
    names = []
    for group in response.groups:
        for member_id, _client, _host, metadata, _assignment in group[5]:
            try:
                names.append(MemberClaim.decode(_user_data(metadata), member_id).worker)
            except Exception:  # no metadata (some brokers leave it out): the member id
                names.append(member_id)
    return sorted(names)


def _user_data(metadata: bytes) -> bytes:
    data: bytes = ConsumerProtocolMemberMetadata.decode(metadata).user_data
    return data


async def _handoff(settings: KafkaSettings) -> list[HandoffStatus]:
    from streams.backends.kafka.handoff_log import KafkaHandoffLog  # pyarrow only when status is read

    prefix = settings.handoff_prefix
    async with KafkaHandoffLog(settings, prefix, request_timeout=settings.request_timeout) as log:
        streams = sorted((await log.streams()).items())
        if not streams:
            return []
        admin = AIOKafkaAdminClient(**settings.client_kwargs())  # for Spark's commits
        await start_client(admin, settings)
        try:
            result = []
            for stream, declared in streams:
                starts, ends = await log.offsets(stream, declared.partitions)
                topic = log.topics.data(stream)
                spark = await spark_commits.committed(admin, spark_group(prefix, stream), topic, declared.partitions)
                result.append(HandoffStatus.of(stream, starts, ends, *(spark or (None, None))))
            return result
        finally:
            await admin.close()
