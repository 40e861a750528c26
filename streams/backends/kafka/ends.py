"""The end of a Kafka partition (the offset its next record will get), as its records show it.

A broker's ListOffsets answer is not always the end: Tansu reports the last record batch's
first offset + 1, inside the batch. Every fetch answer carries the partition's high-water
mark too, and that one comes with the records: it is the end a reader reaches. So wherever
an end decides something (where a restart resumes, the lag ``headrace status`` shows, how
far a read of a whole partition goes) the end is the high-water mark of a fetch:

- :func:`partition_ends`: the ends of partitions, from a fetch at the end ListOffsets
  reports (on Kafka an empty answer at the end; on Tansu the last batch, or part of it);
- :func:`records_to_end`: a small partition read whole, to the end its fetch answers give;
- :func:`ends_at`: the ends as a fetch at given offsets answers, or ``None`` where an
  offset is past the end (Kafka's ``OFFSET_OUT_OF_RANGE``, or a high-water mark below it):
  a committed offset past the end means the partition was truncated or recreated only if
  a fetch there says so.

The consumer passed must have the partitions assigned, not paused; its positions are left
wherever the fetches took them (the caller seeks where it reads next).

Example (with a broker at 127.0.0.1:9092)::

    consumer.assign([tp])
    ends = await partition_ends(consumer, [tp], timeout=5.0)   # {tp: 500}
    resume = await ends_at(consumer, {tp: 500}, timeout=5.0)   # {tp: 500}: resume at 500
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import anyio
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from streams.core.clock import wall_time

_WAIT_MS = 100  # one wait for fetch answers; the broker's long poll is the consumer's fetch_max_wait_ms


def fetched_end(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The end of ``tp`` as the consumer's last fetch answer for it gave it (``None``: no
    answer yet): what a reader that has read to it has caught up with."""
    highwater: int | None = consumer.highwater(tp)
    return highwater


async def ends_at(
    consumer: AIOKafkaConsumer, offsets: Mapping[TopicPartition, int], timeout: float
) -> dict[TopicPartition, int | None]:
    """Per partition, its end as a fetch at ``offsets[tp]`` answers it; ``None`` when that
    offset is past the end. Raises ``TimeoutError`` when a partition's fetch is not answered
    within ``timeout`` seconds (an outage: the caller retries)."""
    began = int(wall_time() * 1000)  # the fetcher stamps its answers in wall-clock ms
    for tp, offset in offsets.items():
        consumer.seek(tp, offset)
    found: dict[TopicPartition, int | None] = {}
    with anyio.fail_after(timeout):
        while pending := [tp for tp in offsets if tp not in found]:
            try:
                await consumer.getmany(*pending, timeout_ms=_WAIT_MS, max_records=1)
            except OffsetOutOfRangeError as exc:  # a consumer that does not reset: Kafka's answer
                for tp in exc.args[0] if exc.args and isinstance(exc.args[0], dict) else ():
                    found[tp] = None
            for tp in pending:
                answered = consumer.last_poll_timestamp(tp)
                highwater = fetched_end(consumer, tp)
                if tp in found or answered is None or answered < began or highwater is None:
                    continue
                # A consumer that resets out-of-range offsets moved its position back before
                # this answer; Tansu answers a fetch past the end empty, with the true end.
                moved = await consumer.position(tp) < offsets[tp]
                found[tp] = None if moved or highwater < offsets[tp] else highwater
    return found


async def partition_ends(
    consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition], timeout: float
) -> dict[TopicPartition, int]:
    """The end of each of ``tps``: the high-water mark of a fetch at the end the broker
    reports (never below that report)."""
    reported: dict[TopicPartition, int] = await consumer.end_offsets(list(tps))
    fetched = await ends_at(consumer, reported, timeout)
    return {tp: max(end, fetched.get(tp) or end) for tp, end in reported.items()}


async def offset_bounds(consumer: AIOKafkaConsumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    """The oldest retained offset of ``tp`` and its end (:func:`partition_ends`)."""
    first = await consumer.beginning_offsets([tp])
    ends = await partition_ends(consumer, [tp], timeout)
    return first[tp], ends[tp]


async def records_to_end(
    consumer: AIOKafkaConsumer, tp: TopicPartition, timeout: float
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every retained record of ``tp``, up to the end its fetch answers give (the high-water
    mark that comes with the records): one fetch for a small topic, with no wait at the end
    for a long poll. Raises ``TimeoutError`` when no answer comes within ``timeout`` seconds."""
    consumer.assign([tp])
    first = await consumer.beginning_offsets([tp])
    consumer.seek(tp, first[tp])
    records: list[ConsumerRecord[bytes, bytes]] = []
    with anyio.fail_after(timeout):
        while True:
            fetched = await consumer.getmany(tp, timeout_ms=_WAIT_MS)
            records.extend(fetched.get(tp, ()))
            highwater = fetched_end(consumer, tp)
            if highwater is not None and await consumer.position(tp) >= highwater:
                return records


async def listed_bounds(consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int]:
    """The oldest retained offset of ``tp`` and its end as the broker lists it, possibly
    short of the records (a receiver checks a committed offset past it with :func:`ends_at`)."""
    first = await consumer.beginning_offsets([tp])
    end = await consumer.end_offsets([tp])
    return first[tp], end[tp]


async def missing_topic(consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition], timeout: float) -> str | None:
    """The first topic of ``partitions`` the cluster no longer lists (None: all listed, or no
    answer, which the fetches will tell as an outage). A deleted topic's fetches answer empty,
    as a caught-up partition's do: only the cluster's list of topics tells them apart."""
    try:
        with anyio.fail_after(timeout):
            topics = await consumer.topics()
    except (KafkaError, TimeoutError):
        return None
    return next((tp.topic for tp in partitions if tp.topic not in topics), None)


def offsets_text(partitions: Sequence[TopicPartition], offsets: Mapping[TopicPartition, int]) -> str:
    """How log lines name a queue's offsets: one number, or one per topic.

    >>> offsets_text([TopicPartition("a", 0)], {TopicPartition("a", 0): 7})
    '7'
    """
    if len(partitions) == 1:
        return str(offsets.get(partitions[0]))
    return ", ".join(f"{tp.topic}: {offsets.get(tp)}" for tp in partitions)
