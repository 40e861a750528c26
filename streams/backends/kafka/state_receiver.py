"""The Kafka receiver that saves event-time state: the reads of a
:class:`~streams.backends.kafka.receiver.KafkaQueueReceiver`, whose offset commits first write
the states they rely on through a
:class:`~streams.backends.kafka.changelog.KafkaCheckpointer` (see
:mod:`~streams.backends.kafka.changelog` for why that order keeps a restart correct)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Self

from streams.adapters.protocols import CheckpointedState, ReceiverDefaults
from streams.backends.kafka.changelog import KafkaChangelog, KafkaCheckpointer
from streams.backends.kafka.receiver import KafkaQueueReceiver
from streams.backends.kafka.settings import KafkaSettings
from streams.core.batch import QueueMessage
from streams.core.ids import QueueId, SequenceToken
from streams.core.retry import OutageLog


class KafkaStateReceiver(CheckpointedState, ReceiverDefaults):
    """Reads one queue (``reads``) and saves its activations' event-time state in the changelog
    (``checkpointer``) before each offset commit (a
    :class:`~streams.adapters.protocols.StatefulReceiver`).

    Example (``adapter.create_receiver`` makes it for a topic of headrace's records)::

        receiver = KafkaStateReceiver.of(settings, QueueId(0), outage, adapter.changelog)
        await receiver.initialize()
        saved = await receiver.load_states()  # the pulling agent restores its activations
        receiver.state_source = states  # agents.checkpoint.ActivationStates: written at each commit
    """

    def __init__(self, reads: KafkaQueueReceiver, checkpointer: KafkaCheckpointer) -> None:
        self.reads = reads
        self.checkpointer: KafkaCheckpointer = checkpointer
        self.changelog: KafkaChangelog = checkpointer.changelog
        reads.saved = checkpointer  # its commits wait for the states they rely on
        self.queue = reads.queue
        self.gathers_containers = reads.gathers_containers

    @classmethod
    def of(
        cls,
        settings: KafkaSettings,
        queue: QueueId,
        outage: OutageLog,
        changelog: KafkaChangelog,
        max_record_size: int = 1 << 20,
    ) -> Self:
        """The receiver of ``queue``, saving its states in ``changelog``."""
        return cls(KafkaQueueReceiver(settings, queue, outage, max_record_size), KafkaCheckpointer(changelog, queue))

    @property
    def caught_up(self) -> bool:
        """Whether the last read left the read position at every partition's high-water mark."""
        return self.reads.caught_up

    async def initialize(self) -> None:
        await self.reads.initialize()

    async def get_queue_messages(self, max_count: int) -> Sequence[QueueMessage]:
        await self.changelog.mend(self.queue)  # a copy that went with a damaged file, rebuilt first
        messages = await self._read(max_count)
        # A queue with no writes keeps its local copy trusted (at most a row a minute).
        await self.changelog.keep_own_synced(self.queue)
        return messages

    async def _read(self, max_count: int) -> Sequence[QueueMessage]:
        return await self.reads.get_queue_messages(max_count)

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        return await self.reads.read_range(start_sequence, max_count)

    def positions(self, messages: Sequence[QueueMessage]) -> Iterable[int]:
        return self.reads.positions(messages)

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        await self.reads.messages_delivered(tokens)

    async def shutdown(self) -> None:
        """Commit the last acknowledged position (its states first) and disconnect; the queue's
        local copy is left marked in step with the changelog's end."""
        await self.reads.shutdown()
        await self.changelog.let_go(self.queue)
