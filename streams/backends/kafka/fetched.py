"""Taking the records of a partition's fetch a record batch at a time, without a Python
object made for each record.

aiokafka's ``getmany`` turns every record into a ``ConsumerRecord``: three Python calls and
a dataclass a record on top of iterating the record batch, which aiokafka does in C (on the
development machine 1.55 µs a record in all, 0.45 µs of it the iteration). On a topic of one
event a record, the difference was more than the rest of a worker's work for the event. :class:`BatchTaker` takes what
a partition's last fetch brought straight from its record batches. Its records
(:class:`KafkaRecord`) have the fields headrace reads: ``offset``, ``timestamp``, ``key``,
``value`` and ``headers`` (a list, where a ``ConsumerRecord``'s is a tuple).

It waits for a fetch as ``getmany`` does, and leaves to ``getmany`` everything it does not
handle itself: a fetch that failed (``getmany`` raises its error), a topic read
``read_committed``, a fetch that ``getmany`` began taking, a rebalance under way, and a
read of one record at a time (:class:`~streams.backends.kafka.receiver.KafkaQueueReceiver`
narrows its reads that way up to a batch that cannot be read).

It reads the consumer's fetcher, which aiokafka does not publish: pyproject.toml pins
aiokafka to the versions whose fetcher it was written against (``>=0.11,<0.15``), and
tests/streams/kafka/test_fetched.py compares what it takes with ``getmany``'s records, on a
real broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from inspect import GEN_CREATED, getgeneratorstate
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.fetcher import READ_UNCOMMITTED, FetchResult, PartitionRecords
from aiokafka.errors import CorruptRecordException


class KafkaRecord(Protocol):
    """What headrace reads of a fetched record (aiokafka's ``ConsumerRecord`` has it too)."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


Fetched = Mapping[TopicPartition, Sequence[KafkaRecord]]

# A partition's fetch that a read may take from: the partition, its result and its records.
_Ready = tuple[TopicPartition, FetchResult, PartitionRecords]


class BatchTaker:
    """Takes one consumer's fetched records a record batch at a time (see the module's doc).

    A read that ends inside a batch keeps the batch's other records for the next read of
    that partition, which takes them first: a read never returns more than
    ``max_records``, and ``getmany`` (which would begin after that batch) is not called
    while such records wait.
    """

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer
        # Per partition: (its fetch, the records of the batch a read stopped inside, the
        # offset after that batch), while that fetch is the partition's buffered one.
        self._left: dict[TopicPartition, tuple[PartitionRecords, list[KafkaRecord], int]] = {}

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[KafkaRecord]]:
        """Up to ``max_records`` records of ``partitions``, waiting up to ``timeout_ms`` for
        a fetch when none is buffered: ``AIOKafkaConsumer.getmany``'s contract."""
        consumer = self._consumer
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            taken = self._take(partitions, max_records)
            if taken is None:
                left_ms = max(0, int((deadline - time.monotonic()) * 1000))
                fetched: dict[TopicPartition, list[KafkaRecord]]
                fetched = await consumer.getmany(*partitions, timeout_ms=left_ms, max_records=max_records)
                return fetched
            remaining = deadline - time.monotonic()
            if taken or remaining <= 0:
                return taken
            waiter = consumer._fetcher._create_fetch_waiter()
            done, _ = await asyncio.wait([waiter], timeout=remaining)
            if not done:
                waiter.cancel()
                return {}
            waiter.result()  # a fetch refused authorization raises here, as in getmany

    def _take(self, partitions: Sequence[TopicPartition], room: int) -> dict[TopicPartition, list[KafkaRecord]] | None:
        """Up to ``room`` records of what is buffered for ``partitions`` (nothing: ``{}``),
        or None: ``getmany`` is to take it. Records a read stopped inside a batch before
        are taken first; else nothing is taken unless every partition's fetch can be."""
        ready = self._left_ready(partitions) or self._fetched_ready(partitions, room)
        if ready is None:
            return None
        takes = []
        for tp, result, records in ready:
            if room <= 0:
                break
            taken = self._batches(tp, records, room)
            takes.append((tp, result, records, taken))
            room -= len(taken)
        # Positions move once every batch read (a batch that cannot be read raises first).
        out: dict[TopicPartition, list[KafkaRecord]] = {}
        for tp, result, records, taken in takes:
            result._assignment.state_value(tp).consumed_to(records.next_fetch_offset)
            if tp not in self._left and not records._records.has_next():
                self._release(tp, result, records)
            if taken:
                out[tp] = taken
        return out

    def _left_ready(self, partitions: Sequence[TopicPartition]) -> list[_Ready]:
        """The fetches of ``partitions`` that a read stopped inside and that are still theirs."""
        buffered = self._consumer._fetcher._records
        ready: list[_Ready] = []
        for tp in [tp for tp in partitions if tp in self._left]:
            records, _, _ = self._left[tp]
            result = buffered.get(tp)
            if type(result) is FetchResult and result._partition_records is records and _readable(tp, result, records):
                ready.append((tp, result, records))
            else:  # its fetch was dropped (a seek, a pause): its records will be fetched again
                del self._left[tp]
        return ready

    def _fetched_ready(self, partitions: Sequence[TopicPartition], room: int) -> list[_Ready] | None:
        """The buffered fetches of ``partitions`` (none: ``[]``), or None if ``getmany`` is to
        take them: a read of one record, a rebalance, a failed or begun or unreadable fetch."""
        consumer = self._consumer
        if room <= 1 or consumer._subscription.reassignment_in_progress:
            return None
        consumer._coordinator.check_errors()  # as getmany: a coordination error raises
        buffered = consumer._fetcher._records
        ready: list[_Ready] = []
        for tp in partitions:
            result = buffered.get(tp)
            if result is None:
                continue
            if type(result) is not FetchResult:
                return None  # a failed fetch: getmany raises its error
            records = result._partition_records
            if records is None or not _fresh(records) or not _readable(tp, result, records):
                return None
            ready.append((tp, result, records))
        return ready

    def _release(self, tp: TopicPartition, result: FetchResult, records: PartitionRecords) -> None:
        """Every record of the fetch is taken: the fetcher may fetch the next. Its unstarted
        record generator holds it in a reference cycle (aiokafka breaks it when its own
        iteration ends, which this one bypasses): broken here, the fetch is freed now, not
        at a full collection, which a worker's frozen heap may never run over it."""
        fetcher = self._consumer._fetcher
        records._records_iterator = None
        result._partition_records = None
        del fetcher._records[tp]
        fetcher._notify(fetcher._wait_consume_future)

    def _batches(self, tp: TopicPartition, records: PartitionRecords, room: int) -> list[KafkaRecord]:
        """Up to ``room`` records of ``tp``'s fetch, beginning with those a read stopped
        inside a batch before; ``records.next_fetch_offset`` moves past them."""
        out: list[KafkaRecord] = []
        next_offset = records.next_fetch_offset
        left = self._left.pop(tp, None)
        if left is not None:
            _, out, next_offset = left
        memory = records._records
        while len(out) < room and memory.has_next():
            batch = memory.next_batch()
            if records._check_crcs and not batch.validate_crc():
                # The receiver reads again one record at a time up to this batch (through
                # getmany); the position has not moved, so nothing of this read is lost.
                raise CorruptRecordException(f"Invalid CRC - {tp}")
            if not batch.is_control_batch:  # a transaction's marker: no record to read
                read: list[KafkaRecord] = list(batch)
                if read and read[0].offset < next_offset:  # an old-format message set, re-sent whole
                    read = [r for r in read if r.offset >= next_offset]
                out += read
            next_offset = batch.next_offset
        if len(out) > room:
            self._left[tp] = (records, out[room:], next_offset)
            del out[room:]
            next_offset = out[-1].offset + 1
        records.next_fetch_offset = next_offset
        return out


def _fresh(records: PartitionRecords) -> bool:
    """Whether ``getmany`` has not begun taking this fetch (it takes through an iterator)."""
    iterator = records._records_iterator
    return iterator is not None and getgeneratorstate(iterator) == GEN_CREATED


def _readable(tp: TopicPartition, result: FetchResult, records: PartitionRecords) -> bool:
    """Whether ``result`` may be taken: read uncommitted, of a partition still assigned, not
    paused, and not moved since (``FetchResult.check_assignment``'s test, without its
    dropping the fetch, which ``getmany`` does)."""
    if records._isolation_level != READ_UNCOMMITTED or records._aborted_transactions:
        return False
    assignment = result._assignment
    if not assignment.active:
        return False
    state = assignment.state_value(tp)
    return not state.paused and state.position == records.next_fetch_offset
