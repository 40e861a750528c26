"""Standby replicas: warm copies of other workers' queues in this worker's local state store
(Kafka Streams' standby tasks and ``num.standby.replicas``).

With ``standby_replicas`` N > 0 the group leader gives each queue to up to N workers besides
its owner as a standby (:mod:`~streams.backends.kafka.assignor`), and each worker follows its
standby queues' changelog partitions into its local state store (:class:`StandbyReplicas`,
run beside the group balancer): one consumer of no group (nothing committed), each fetch
applied as a load applies it (:func:`~streams.backends.kafka.changelog.apply_records`), with
the changelog offset after it. A copy starts from the local store under a load's rules
(:meth:`~streams.backends.kafka.changelog.KafkaChangelog.start_of`): a copy that is missing,
damaged, behind the oldest record, past the end or too old is rebuilt from the oldest record.

**The hand-over.** A queue that becomes this worker's is loaded as any other, and the load
first stops following it, then waits for the queue's turn (a fetch being applied ends
first): it then reads only the records after the copy's offset. A fetch is applied only in
its queue's turn, only while the queue is a standby here, and only on top of the offset the
follower left the copy at, so a queue's rows never have two writers, and a copy its
receiver moved on is started again from the local store.

**Freshness.** A copy is trusted at a takeover only if it was brought to the changelog's end
within ``delete.retention.ms`` (compaction may since have dropped a deletion it never read). A
copy that is caught up (its offset at the end its last fetch reported) has its "synced" time
moved on at most every :data:`~streams.backends.kafka.own_copies.REFRESH` seconds, one row written, so a standby queue that gets
no writes for days is still read on from its offset at a takeover.

**A queue that stops being a standby here** (and is not this worker's own now) has its copy's
rows and offset deleted from the local store, in the queue's turn: no other worker keeps it in
step any more, so it would only grow stale on this disk. Should the queue come back here, it
is rebuilt from the changelog.

**Failures** (the cluster away, a fetch or a disk write that fails) never touch the worker's
own queues: the follower logs one line, and retries with back-off
(:func:`streams.core.retry.retry`), with a new consumer, from the local store's offsets.

**What it costs**: one consumer per worker, the standby queues' states on its disk, and
reading every changelog write of its standby queues; what it buys is a queue that moves to
its standby reading only the changelog records written after the copy's offset.

Example (``KafkaBackend.queue_balancer`` makes one; the balancer runs it and tells it its
standby queues at each assignment)::

    standby = StandbyReplicas(adapter.changelog)
    task_group.start_soon(standby.run)
    standby.follow([QueueId(2), QueueId(3)])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from functools import partial

import anyio
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from streams.adapters.protocols import LocalStates
from streams.backends.kafka.changelog import KafkaChangelog, apply_records
from streams.backends.kafka.clients import start_client, stop_client
from streams.core.clock import wall_time
from streams.core.ids import QueueId
from streams.core.retry import Backoff, reason_of, retry

log = logging.getLogger("headrace.kafka")

FETCH_WAIT = 0.5  # seconds a fetch of a caught-up copy waits for new records
FETCH_RECORDS = 500


class StandbyReplicas:
    """The standby copies one worker keeps (see the module): :meth:`follow` says which queues,
    :meth:`run` follows them until cancelled. ``records_read``: the changelog records applied.

    >>> import logging
    >>> from streams.backends.kafka.settings import KafkaSettings
    >>> from streams.core.retry import OutageLog
    >>> settings = KafkaSettings("127.0.0.1:9092", "sensors", standby_replicas=1)
    >>> standby = StandbyReplicas(KafkaChangelog(settings, OutageLog("Kafka", logging.getLogger("doc"))))
    >>> standby.follow([QueueId(1), QueueId(2)]); standby.stop_following(QueueId(1)); sorted(standby.wanted)
    [2]
    >>> standby.follow([], owned=[QueueId(1)]); sorted(standby.dropped)  # 2 is no longer kept here
    [2]
    """

    def __init__(self, changelog: KafkaChangelog, backoff: Backoff | None = None) -> None:
        self.changelog = changelog
        changelog.standby = self  # its loads stop following a queue that becomes this worker's
        self.wanted: frozenset[int] = frozenset()  # the queues to follow: the group's word
        self.positions: dict[int, int] = {}  # a followed queue -> the offset its copy is at
        self.owned: frozenset[int] = frozenset()  # this worker's own queues: their rows stay
        self.dropped: set[int] = set()  # queues no longer kept here: their copies to delete
        self.records_read = 0
        self._backoff = backoff if backoff is not None else Backoff(0.5, 30.0)
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: frozenset[int] = frozenset()  # the consumer's partitions
        self._changed = anyio.Event()
        self._stale = False  # a step failed: start over with a new consumer
        self._failing = False  # said once a streak of failures

    def follow(self, queues: Iterable[QueueId], owned: Iterable[QueueId] | None = None) -> None:
        """Keep standby copies of ``queues`` (and of no others) from now on; ``owned``: this
        worker's own queues now (by default, as they were). A queue no longer followed and not
        owned has its copy deleted from the local store."""
        wanted = frozenset(queue.number for queue in queues)
        if owned is not None:
            self.owned = frozenset(queue.number for queue in owned)
        self.dropped = (self.dropped | (self.wanted - wanted)) - wanted - self.owned
        if wanted != self.wanted or self.dropped:
            self.wanted = wanted
            self._changed.set()

    def stop_following(self, queue: QueueId) -> None:
        """``queue`` is this worker's now: its copy is no longer followed (a fetch being
        applied ends in the queue's turn, which its load waits for), and is the load's."""
        self.owned |= {queue.number}
        self.follow(QueueId(n) for n in self.wanted - {queue.number})

    async def run(self) -> None:
        """Follow the standby queues until cancelled; a failure is logged once and retried,
        never raised."""
        try:
            while True:
                await retry(
                    self._step, what="following the standby copies", backoff=self._backoff, on_failure=self._failed
                )
        finally:
            await self._drop()

    async def _step(self) -> None:
        """One fetch of the standby queues, applied; or a wait while there are none."""
        if self._stale:
            await self._drop()
        local = await self.changelog.local_states()
        if local is not None:
            await self._delete_dropped(local)
        if not self.wanted or local is None:
            await self._drop()  # nothing to follow: no consumer
            changed = self._changed = anyio.Event()
            if local is None or not self.wanted:
                await changed.wait()
            return
        consumer = await self._consumer_started()
        await self._realign(consumer, local)
        asked = wall_time()  # the copies caught up after this fetch were at the end then, at the latest
        fetched = await consumer.getmany(timeout_ms=int(FETCH_WAIT * 1000), max_records=FETCH_RECORDS)
        for tp, records in sorted(fetched.items()):
            if records:
                await self._apply(local, tp.partition, records)
        await self._refresh(consumer, asked)
        if self._failing:
            self._failing = False
            self._backoff.reset()
            log.info("standby copies of queues %s: following the changelog again", sorted(self.wanted))

    async def _realign(self, consumer: AIOKafkaConsumer, local: LocalStates) -> None:
        """Assign the consumer the standby queues' partitions, and start those not followed."""
        wanted = self.wanted
        if wanted != self._assigned:
            consumer.assign([self._partition(n) for n in sorted(wanted)])  # every position reset
            self._assigned = wanted
            self.positions = {n: offset for n, offset in self.positions.items() if n in wanted}
            for n, offset in self.positions.items():
                consumer.seek(self._partition(n), offset)
        for n in sorted(wanted - self.positions.keys()):
            await self._start(consumer, local, n)

    async def _start(self, consumer: AIOKafkaConsumer, local: LocalStates, number: int) -> None:
        """Follow queue ``number`` from where its copy is, or rebuild it (a load's rules)."""
        queue, tp = QueueId(number), self._partition(number)
        async with self.changelog.turn(queue):
            if number not in self.wanted:
                return
            start, end, why = await self.changelog.start_of(consumer, tp, local, queue)
            if why is not None:  # an empty copy of what precedes the oldest record: rebuilt from there
                await local.apply(number, ([], []), next_offset=start)
        consumer.seek(tp, start)
        self.positions[number] = start
        log.info(
            "%s: standby copy %s; following the changelog from offset %d (its end now %d)",
            queue,
            "read on from its local offset" if why is None else f"rebuilt ({why})",
            start,
            end,
        )

    async def _apply(self, local: LocalStates, number: int, records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        """Apply a fetch of queue ``number`` in its turn, if it is still a standby here and
        its copy is where this follower left it (else it is started again from there)."""
        queue = QueueId(number)
        async with self.changelog.turn(queue):
            position = self.positions.get(number)
            if number not in self.wanted or position is None:
                return
            if local.offset(number) != position:  # another writer moved it: start again from there
                del self.positions[number]
                return
            self.positions[number] = await apply_records(local, queue, records)
            self.changelog.copies.synced_at[number] = wall_time()  # the apply set its "synced" time
        self.records_read += len(records)

    async def _refresh(self, consumer: AIOKafkaConsumer, asked: float) -> None:
        """Move the "synced" time of each copy at the end its last fetch reported on
        (:meth:`~streams.backends.kafka.changelog.KafkaChangelog.keep_synced`)."""
        for number, position in sorted(self.positions.items()):
            end = consumer.highwater(self._partition(number))
            if end is not None and position >= end:
                await self.changelog.keep_synced(QueueId(number), position, asked, partial(self._at, number, position))

    def _at(self, number: int, position: int) -> bool:
        """Queue ``number`` is still followed, its copy where this follower left it at ``position``."""
        return number in self.wanted and self.positions.get(number) == position

    async def _delete_dropped(self, local: LocalStates) -> None:
        """Delete the copies of the queues no longer kept here (see the module), each in its
        turn, unless it is followed or owned again by then."""
        for number in sorted(self.dropped):
            async with self.changelog.turn(QueueId(number)):
                if number not in self.dropped:
                    continue
                self.dropped.discard(number)
                self.changelog.copies.synced_at.pop(number, None)
                deleted = await local.forget(number)
            log.info(
                "%s: no longer a standby here: its copy's %d state(s) deleted from the local store",
                QueueId(number),
                deleted,
            )

    def _failed(self, exc: BaseException, attempt: int) -> None:
        self._stale = True
        if not self._failing:
            self._failing = True
            log.warning(
                "standby copies of queues %s: following the changelog failed (%s); retried with back-off "
                "from the local store's offsets (this worker's own queues go on)",
                sorted(self.wanted),
                reason_of(exc),
            )

    def _partition(self, number: int) -> TopicPartition:
        return TopicPartition(self.changelog.topic, number)

    async def _consumer_started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = self.changelog.reader(FETCH_WAIT)
            await start_client(consumer, self.changelog.settings)
            self._consumer, self._assigned, self.positions = consumer, frozenset(), {}
        return self._consumer

    async def _drop(self) -> None:
        """Stop the consumer; the next one starts each copy from the local store."""
        consumer, self._consumer = self._consumer, None
        self._stale, self._assigned, self.positions = False, frozenset(), {}
        if consumer is not None:
            with anyio.move_on_after(self.changelog.settings.request_timeout, shield=True):
                await stop_client(consumer)
