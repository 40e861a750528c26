"""Record batches filled for aiokafka's ``send_batch``: what a worker writes many records of
at once (the re-keying hop's records, the changelog's states) goes to Kafka in batches it
builds itself rather than a ``send`` per record, whose per-record future, partitioner call
and checks cost more than the record's encoding."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import BatchBuilder

# A record as a batch takes it: timestamp (ms, None for the producer's clock), key, value, headers.
Outgoing = tuple[int | None, bytes | None, bytes | None, Sequence[tuple[str, bytes]]]

# The record batches of the producer a worker's hops and changelog share: a read's records
# for a partition in one batch, and its batches for every partition in one request (aiokafka
# sends one batch a partition a request, one request at a time: at 16 KB, its default, a
# request took ~1,100 records and the hop's acknowledgements queued behind each other).
# A quarter of the largest batch a topic takes by default (1 MB).
BATCH_BYTES = 256 << 10


def filled(producer: AIOKafkaProducer, records: Iterable[Outgoing]) -> list[BatchBuilder]:
    """``producer``'s record batches holding ``records``, in order, each closed: a batch's
    records get consecutive offsets from the offset its send is acknowledged with.

    Appended through aiokafka's record batch builder itself (``BatchBuilder._builder``, with
    the batch's record count set once it is full): ``BatchBuilder.append``'s keyword call
    and per-record checks cost about as much as the record's encoding. The builder copies
    a record's headers in, so a caller may hand the same list each time."""
    batches = [producer.create_batch()]
    append, count = batches[0]._builder.append, 0
    for timestamp, key, value, headers in records:
        if append(count, timestamp, key, value, headers) is None:  # full
            batches[-1]._relative_offset = count
            batches.append(producer.create_batch())
            append, count = batches[-1]._builder.append, 0
            append(count, timestamp, key, value, headers)  # a first always fits
        count += 1
    batches[-1]._relative_offset = count
    for batch in batches:
        batch.close()
    return batches


def record_count(batch: BatchBuilder) -> int:
    """How many records :func:`filled` put in ``batch``."""
    count: int = batch._relative_offset
    return count
