"""The Kafka handoff log as the Spark DataSource sees it: offsets, admission, splits.

An offset here is a Kafka offset of ``<prefix>.handoff.<stream>``: one record per append,
several rows each. The DataSource's methods are synchronous and run in Spark's Python
processes: :class:`KafkaStorage` connects at its first call, on an event loop of its own in a
daemon thread, and stays connected until ``close()`` (the batch reader closes it once planned,
the stream reader when Spark stops it; a process Spark ends takes the thread with it), and a
:class:`KafkaSplit` reads in the executor with a started consumer that the Python process
keeps for its next split (:class:`_Readers`), on one event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import pyarrow as pa
from aiokafka import AIOKafkaConsumer, TopicPartition

from spark_sink.offsets import OffsetRange, Offsets, admit_records
from spark_sink.options import ReadOptions
from spark_sink.schema import HandoffSchema
from spark_sink.storage import BATCH_ROWS, HandoffSplit, rebatch
from streams.backends.kafka.clients import start_client, stop_client
from streams.backends.kafka.connection import KafkaConnection
from streams.backends.kafka.handoff_log import KafkaHandoffLog, fetch_answers, open_reader
from streams.backends.kafka.handoff_records import Declaration, HandoffRecord, HandoffTopics
from streams.backends.kafka.spark_commits import SparkCommits, spark_group
from streams.backends.kafka.spark_options import connection_from_spark
from streams.core.clock import wall_time

T = TypeVar("T")
_SIZE_CHUNK = 500  # records read at a time while sizing a limited batch
READER_IDLE = 60.0  # seconds a kept reader waits for the process's next split before it closes


class _LoopThread:
    """An asyncio event loop in a daemon thread, for synchronous callers to run coroutines on."""

    def __init__(self, name: str = "headrace-kafka") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class KafkaStorage:
    """The handoff streams under ``prefix`` on the Kafka cluster of ``connection``."""

    # A stream's first declaration stands (KafkaHandoffLog.declare): read once in a process,
    # kept for its later storages of the same cluster and prefix. Spark plans each query in
    # Python processes it reuses (the schema in one, the partitions in another), each call
    # with a storage of its own: after the first, the schema costs no connection.
    _declared: ClassVar[list[tuple[KafkaConnection, str, str, Declaration]]] = []

    def __init__(self, connection: KafkaConnection, prefix: str = "headrace") -> None:
        self.connection = connection
        self.prefix = prefix
        self._loop: _LoopThread | None = None  # the connection's event loop, in a daemon thread
        self._log: KafkaHandoffLog | None = None
        self._commits: dict[str, SparkCommits] = {}  # Spark's commits per stream, for headrace status

    def schema(self, stream: str) -> HandoffSchema:
        return self._declaration(stream).schema

    def start_offsets(self, stream: str) -> dict[int, int]:
        return self.offsets(stream)[0]

    def end_offsets(self, stream: str) -> dict[int, int]:
        return self.offsets(stream)[1]

    def offsets(self, stream: str) -> tuple[dict[int, int], dict[int, int]]:
        partitions = self._declaration(stream).partitions
        return self._call(lambda log: log.listed_offsets(stream, partitions))

    def _declaration(self, stream: str) -> Declaration:
        for connection, prefix, name, declaration in self._declared:
            if (name, prefix, connection) == (stream, self.prefix, self.connection):
                return declaration
        declaration = self._call(lambda log: log.declaration(stream))
        self._declared.append((self.connection, self.prefix, stream, declaration))
        return declaration

    def admit(self, stream: str, start: Offsets, end: Offsets, max_rows: int) -> Offsets:
        """Whole appends, at most ``max_rows`` rows that count: their sizes are read from
        the records themselves, as far as the limit reaches."""
        sizes = self._call(lambda log: _sizes(log, stream, start, end, max_rows))
        return admit_records(start, end, max_rows, sizes)

    def plan(self, stream: str, ranges: Sequence[OffsetRange]) -> list[HandoffSplit]:
        topic = HandoffTopics(self.prefix).data(stream)
        return [KafkaSplit(self.connection, topic, r) for r in ranges]

    def trim(self, stream: str, offsets: Mapping[int, int]) -> None:
        """Nothing: a Kafka topic is trimmed by its retention, not by one of its readers."""

    def record_commit(self, stream: str, offsets: Mapping[int, int]) -> None:
        """Commit ``offsets`` to the consumer group ``<prefix>.spark.<stream>`` (see
        :mod:`streams.backends.kafka.spark_commits`)."""
        topic, partitions = HandoffTopics(self.prefix).data(stream), self._declaration(stream).partitions
        commits = self._commits.setdefault(stream, SparkCommits(self.connection, spark_group(self.prefix, stream)))
        self._call(lambda _: commits.commit(topic, partitions, offsets, wall_time()))

    def close(self) -> None:
        loop, log, self._loop, self._log = self._loop, self._log, None, None
        commits, self._commits = list(self._commits.values()), {}
        if loop is not None:
            for closing in (log, *commits):
                if closing is not None:
                    with contextlib.suppress(Exception):  # closing: a broken connection is closed too
                        loop.call(closing.close)
            loop.close()

    def _call(self, fn: Callable[[KafkaHandoffLog], Awaitable[T]]) -> T:
        """``fn`` on the log, connected at the first call and kept until :meth:`close` (a
        streaming query's ``latestOffset``, each trigger, then costs a request, not a
        connection). A call that fails closes it: the next connects anew."""
        if self._loop is None:
            self._loop = _LoopThread()

        async def connected() -> T:
            if self._log is None:
                self._log = KafkaHandoffLog(self.connection, self.prefix)
            return await fn(self._log)

        try:
            return self._loop.call(connected)
        except BaseException:
            self.close()
            raise


async def _sizes(
    log: KafkaHandoffLog, stream: str, start: Offsets, end: Offsets, max_rows: int
) -> dict[int, list[tuple[int, int]]]:
    """``(offset, rows that count)`` of each partition's records from ``start``, as far as
    ``max_rows`` rows reach."""
    sizes: dict[int, list[tuple[int, int]]] = {}
    for partition, stop in end.items():
        found: list[tuple[int, int]] = []
        rows, offset = 0, start.get(partition, 0)
        while rows < max_rows and offset < stop:
            chunk = await log.records(stream, partition, offset, min(offset + _SIZE_CHUNK, stop))
            for record in chunk:
                counted = record.rows if record.valid else 0
                found.append((record.offset, counted))
                rows += counted
            offset = chunk[-1].offset + 1 if chunk else stop
        sizes[partition] = found
    return sizes


@dataclass(frozen=True, slots=True)
class KafkaSplit:
    """Offsets ``range`` of a handoff topic, read by a Spark executor straight from Kafka."""

    connection: KafkaConnection
    topic: str
    range: OffsetRange

    def batches(self) -> Iterator[pa.RecordBatch]:
        return rebatch(self._record_batches(), BATCH_ROWS)

    def _record_batches(self) -> Iterator[pa.RecordBatch]:
        readers = _Readers.of_process()
        records = self._records(readers)
        try:
            while True:
                try:
                    chunk = readers.loop.call(records.__anext__)
                except StopAsyncIteration:
                    return
                for record in chunk:
                    yield from record.batches()
        finally:
            readers.loop.call(records.aclose)

    async def _records(self, readers: _Readers) -> AsyncGenerator[list[HandoffRecord], None]:
        """The valid records of the range, a broker's answer at a time."""
        consumer = await readers.take(self.connection)
        kept = False
        try:
            tp = TopicPartition(self.topic, self.range.partition)
            async for answer in fetch_answers(consumer, tp, self.range.start, self.range.end, 30.0):
                yield [record for record in map(HandoffRecord.decode, answer) if record.valid]
            kept = True
        finally:
            # A read that failed or was left part-way closes its consumer; one that read its
            # range whole is kept for the process's next split.
            await (readers.give_back(self.connection, consumer) if kept else stop_client(consumer))


class _Readers:
    """Started consumers kept between the splits a Spark Python process reads, one a cluster
    connection, on one event loop in a daemon thread: Spark reuses its Python workers, so a
    task's read begins with its fetch, not a client's start (Spark's own Kafka source keeps
    its executors' consumers alike). Each is lent to one split at a time; one unused for
    :data:`READER_IDLE` seconds is closed."""

    _process: _Readers | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = _LoopThread("headrace-kafka-readers")
        self._idle: list[tuple[KafkaConnection, AIOKafkaConsumer, asyncio.TimerHandle]] = []
        self._closing: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak references)

    @classmethod
    def of_process(cls) -> _Readers:
        with cls._lock:
            if cls._process is None:
                cls._process = cls()
            return cls._process

    async def take(self, connection: KafkaConnection) -> AIOKafkaConsumer:
        """A started consumer of ``connection``'s cluster: a kept one, else a new one."""
        for i, (kept, consumer, closing) in enumerate(self._idle):
            if kept == connection:
                del self._idle[i]
                closing.cancel()
                return consumer
        consumer = open_reader(connection)
        await start_client(consumer, connection)
        return consumer

    async def give_back(self, connection: KafkaConnection, consumer: AIOKafkaConsumer) -> None:
        """Keep ``consumer`` for the next split of ``connection``'s cluster (one a
        connection: a second is closed)."""
        if any(kept == connection for kept, _, _ in self._idle):
            await stop_client(consumer)
            return
        closing = asyncio.get_running_loop().call_later(READER_IDLE, self._expire, consumer)
        self._idle.append((connection, consumer, closing))

    def _expire(self, consumer: AIOKafkaConsumer) -> None:
        self._idle = [entry for entry in self._idle if entry[1] is not consumer]
        task = asyncio.ensure_future(stop_client(consumer))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def open_storage(options: ReadOptions) -> KafkaStorage:
    """The Kafka cluster ``options.kafka`` names (``kafka`` in
    :data:`spark_sink.options.STORAGES`)."""
    assert options.kafka is not None
    return KafkaStorage(connection_from_spark(options.kafka), options.topic_prefix)
