"""The records a Kafka topic's partitions retain, read back whole: what ``headrace export`` samples."""

from __future__ import annotations

from collections.abc import Iterator

from streams.backends.kafka.clients import kafka_outage_log
from streams.backends.kafka.receiver import KafkaQueueReceiver
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import BatchContainer, BatchKind
from streams.core.errors import ConfigurationError, DecodeError
from streams.core.ids import QueueId


class KafkaRecords:
    """The records a Kafka topic's partitions retain, read whole (:class:`~streams.adapters.retention.RetainedRecords`):
    headrace's own batch containers, or another program's records as the workers decode them."""

    def __init__(self, found: list[tuple[int, int, BatchContainer]]) -> None:
        self.found = found

    @classmethod
    async def read(cls, settings: KafkaSettings) -> KafkaRecords:
        if len(settings.namespaces) > 1:  # a queue's history is read one partition at a time
            raise ConfigurationError(
                f"headrace export reads one topic; this configuration reads {len(settings.namespaces)} together "
                f"({', '.join(sorted(settings.namespaces))}): give a configuration of the one to export"
            )
        found: list[tuple[int, int, BatchContainer]] = []
        outage = kafka_outage_log(settings)
        for number in range(settings.queues):
            receiver = KafkaQueueReceiver(settings, QueueId(number), outage)
            try:
                start = 0
                while chunk := await receiver.read_range(start, _KAFKA_CHUNK):
                    for message in chunk:
                        try:
                            container = message.container()
                        except DecodeError:
                            continue
                        if container.kind is BatchKind.DATA:
                            found.append((number, message.sequence_number, container))
                    start = chunk[-1].sequence_number + 1
            finally:
                await receiver.shutdown()
        return cls(found)

    def containers(self, namespace: str, key: str | None) -> Iterator[tuple[int, int, BatchContainer]]:
        for queue, position, container in self.found:
            sid = container.stream_id
            if sid.namespace == namespace and (key is None or str(sid.key) == key):
                yield queue, position, container

    def namespaces(self) -> list[str]:
        return sorted({container.stream_id.namespace for _, _, container in self.found})


_KAFKA_CHUNK = 10_000  # records per read of a partition
