"""The Kafka receiver of topics of one event per record (``records="json"``, ...), and its
re-keying part.

It hands the pulling agent one batch per stream and read (see
:mod:`~streams.backends.kafka.records`), and saves states as
:class:`~streams.backends.kafka.state_receiver.KafkaStateReceiver` does. With a re-keying hop
(``repartition_topic``), a :class:`RekeyingHop` takes each read first: it sends the records
that need a key on through the hop, holds the source's offset back until Kafka has them, and
saves its memory of the source records it took before the states at each commit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import anyio
from aiokafka import TopicPartition

from streams.backends.kafka.changelog import KafkaCheckpointer
from streams.backends.kafka.clients import is_transient, log
from streams.backends.kafka.fetched import Fetched
from streams.backends.kafka.own_copies import SavedStates
from streams.backends.kafka.receiver import KafkaQueueReceiver
from streams.backends.kafka.repartition import SEEN, SENDS_IN_FLIGHT, Forward, Rekeying, Sends
from streams.backends.kafka.state_receiver import KafkaStateReceiver
from streams.core.batch import QueueMessage
from streams.core.retry import reason_of


class RekeyingHop:
    """What a record receiver's reads (``reads``) take through the re-keying hop: the
    :class:`~streams.backends.kafka.receiver.Intake` of their fetches, and what their commits
    save first (the hop's memory of the source records it took, then ``checkpointer``'s
    states)."""

    def __init__(self, reads: KafkaQueueReceiver, rekeying: Rekeying, checkpointer: KafkaCheckpointer) -> None:
        self.reads = reads
        self.rekeying = rekeying
        self.checkpointer = checkpointer
        self._sends = Sends(self._send_on)  # reads sent on through the hop, until acknowledged
        reads.intake = reads.saved = self

    @property
    def forwarded(self) -> int:
        """Records sent on through the hop."""
        return self._sends.handed_on

    @property
    def arrived(self) -> int:
        """Records sent on through the hop that Kafka has (their acknowledgement taken in by
        a read, or by :meth:`settled`)."""
        return self._sends.arrived

    async def read(self, max_count: int) -> Sequence[QueueMessage]:
        """A read of the receiver's; :attr:`caught_up` stays false until Kafka has what was
        sent on."""
        reads = self.reads
        handed_on = self._sends.handed_on
        messages = await reads.get_queue_messages(max_count)
        if self._sends:
            if not messages and self._sends.handed_on == handed_on:  # nothing read: wait for them here
                await self.settled(keep=0)
            reads.caught_up = reads.caught_up and not self._sends
        return messages

    async def take(self, fetched: Fetched) -> Sequence[QueueMessage]:
        """Send the records to re-key through the hop, and make the messages of the rest
        (the hop's duplicates left out). Kafka acknowledges the records sent on while the
        agent delivers (:class:`~streams.backends.kafka.repartition.Sends`); the source's
        offset is acknowledged up to the oldest record sent on that Kafka does not have yet.
        Should a send fail, nothing of the next read is taken (the consumer goes back to its
        first records) until the failed records are sent again, after a back-off."""
        reads, rekeying = self.reads, self.rekeying
        if not await self.settled(keep=SENDS_IN_FLIGHT - 1):
            consumer = reads.require_consumer()
            for tp, records in fetched.items():
                if records:
                    consumer.seek(tp, records[0].offset)
            return []
        forwards = rekeying.to_forward(fetched)
        if forwards:
            self._sends.add(forwards)
        ends = {tp: records[-1].offset + 1 for tp, records in fetched.items() if records}
        messages = reads.reader.messages(rekeying.kept(fetched, forwards), ends)
        # No message stands for the records sent on or skipped as copies: what they leave
        # behind (up to the oldest message not yet acknowledged) is done with now.
        reads.acknowledge(reads.reader.acknowledged(-1))
        return messages

    async def _send_on(self, forwards: Sequence[Forward]) -> None:
        changelog = self.checkpointer.changelog
        with anyio.fail_after(self.reads.settings.request_timeout):
            producer = await changelog._producer_started()
            await self.rekeying.forward(producer, forwards, changelog.enqueueing)

    async def settled(self, keep: int) -> bool:
        """Take in Kafka's acknowledgements of the reads sent on, waiting until at most
        ``keep`` are pending; ``False`` once a send failed (and the receiver backed off:
        the failed records are sent again first by the next call)."""
        reads = self.reads
        began = time.monotonic()
        try:
            await self._sends.settle(keep)
        except Exception as exc:  # sorted into transient and not just below
            if not (isinstance(exc, TimeoutError) or is_transient(exc)):
                raise await reads.failed(exc, "cannot re-key (send to the repartition topic)") from exc
            await reads.retries.failed(f"re-keying {reads.queue}: {reason_of(exc)}", since=began)
            return False
        finally:
            reads.acknowledge(reads.reader.acknowledged(-1))  # what the acknowledged sends held back
        return True

    def held(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """The source's offset never past a record Kafka does not have through the hop yet."""
        oldest = self._sends.oldest
        source = self.rekeying.source
        if oldest is not None and offsets.get(source, -1) > oldest:
            return {**offsets, source: oldest}
        return offsets

    async def let_go(self) -> None:
        """Wait for the reads sent on (within ``request_timeout``): a source offset they still
        hold back is read again by whoever reads the queue next."""
        try:
            with anyio.move_on_after(self.reads.settings.request_timeout):
                await self._sends.settle(keep=0)
        except Exception as exc:  # logged: the queue is let go either way
            log.warning("%s: records sent on through the re-keying hop not acknowledged: %r", self.reads.queue, exc)

    def restored(self, saved: SavedStates) -> SavedStates:
        """The hop's memory of the source records it took, restored from ``saved``; the rest."""
        seen = {stream: state for (consumer, stream), (_, state) in saved.items() if consumer == SEEN}
        self.rekeying.seen.restore_rows(seen)
        return {key: value for key, value in saved.items() if key[0] != SEEN}

    def pending(self) -> bool:
        return self.checkpointer.pending()

    async def save(self) -> bool:
        """Save the hop's memory as of the offset about to be committed, then the states."""
        rekeying = self.rekeying
        offset = self.reads.acknowledged_offset(rekeying.repartition)
        rows = [] if offset is None else rekeying.seen.committed_rows(offset)
        if rows:
            if not await self.checkpointer.changelog.write(self.reads.queue, (rows, [])):
                return False
            rekeying.seen.saved(rows)
        return await self.checkpointer.save()


class KafkaRecordReceiver(KafkaStateReceiver):
    """The receiver of topics of one event per record: its reads, its checkpointer, and (with
    a re-keying hop) its :attr:`hop`. Its queue positions are those of its reads' groupings,
    which a re-read would not reproduce: it does not rewind (so it is no
    :class:`~streams.adapters.protocols.RewindableReceiver`). A saved state's position is a
    record's offset, which every read gives its event
    (:meth:`~streams.core.record_batch.RecordEventBatch.last_position`)."""

    read_range = None  # type: ignore[assignment]

    def __init__(self, reads: KafkaQueueReceiver, checkpointer: KafkaCheckpointer) -> None:
        super().__init__(reads, checkpointer)
        settings = reads.settings
        hop, fmt, key_field = settings.repartition_topic, settings.record_format, settings.key_field
        self.hop: RekeyingHop | None = None  # records without a key re-keyed through the hop
        if hop is not None and fmt is not None and key_field is not None:
            source, repartition = settings.partitions_of(reads.queue)  # partition i of the topic and of the hop's
            self.hop = RekeyingHop(reads, Rekeying(settings, source, repartition, fmt, key_field), checkpointer)

    @property
    def forwarded(self) -> int:
        """Records sent on through the re-keying hop (the agent counts them as read:
        :class:`~streams.adapters.protocols.ForwardingReceiver`); :attr:`caught_up` stays
        false until Kafka has them."""
        return 0 if self.hop is None else self.hop.forwarded

    @property
    def arrived(self) -> int:
        """Of :attr:`forwarded`, the records Kafka has (a drain counts these)."""
        return 0 if self.hop is None else self.hop.arrived

    async def _read(self, max_count: int) -> Sequence[QueueMessage]:
        if self.hop is None:
            return await self.reads.get_queue_messages(max_count)
        return await self.hop.read(max_count)

    async def load_states(self) -> SavedStates:
        """The saved states, and the hop's memory of the source records it took."""
        saved = await self.checkpointer.load_states()
        return saved if self.hop is None else self.hop.restored(saved)

    async def shutdown(self) -> None:
        """Wait for the reads sent on through the hop, then as the receiver's."""
        if self.hop is not None:
            await self.hop.let_go()
        await super().shutdown()
