"""The queue-adapter layer: the only code that knows which durable queue lies below.

The shapes follow Orleans' ``IQueueAdapterFactory``, ``IQueueAdapter`` and
``IQueueAdapterReceiver``. Everything above (agents, caches, consumers) talks to these
protocols only, so the memory, generator, embedded and Kafka adapters are interchangeable.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from streams.core.batch import BatchKind, QueueMessage
from streams.core.ids import QueueId, SequenceToken, StreamId


class QueueMapper(Protocol):
    """Maps stream ids to queues; lists every queue; says which namespaces it places together."""

    def get_all_queues(self) -> list[QueueId]: ...

    def get_queue_for_stream(self, stream_id: StreamId) -> QueueId: ...

    def co_partitioned(self, namespaces: Sequence[str]) -> bool:
        """Whether every stream of one key in ``namespaces`` goes to one queue (so one
        activation per key can take them all): a mapper grouping them, or one that places
        by key alone, as Kafka's partitioner on a foreign topic does."""
        ...


@runtime_checkable
class QueueAdapterReceiver(Protocol):
    """Reads one queue for the pulling agent that owns it."""

    queue: QueueId
    gathers_containers: bool
    """Whether a read holds one-event records of headrace's own format, a batch container
    each, that the pulling agent gathers by stream (:class:`ReceiverDefaults`: False)."""

    async def initialize(self) -> None:
        """Prepare to read from the queue's checkpoint (or the configured start)."""

    def positions(self, messages: Sequence[QueueMessage]) -> Iterable[int]:
        """The queue position of every record of a read (what :meth:`get_queue_messages`
        returned), in order: a receiver whose messages are made as they are looked at gives
        them without making any (:class:`ReceiverDefaults` reads each message's)."""
        ...

    async def get_queue_messages(self, max_count: int) -> Sequence[QueueMessage]:
        """Up to ``max_count`` records in queue order, or an empty sequence when there are
        none now (a receiver may make each message as it is looked at)."""
        ...

    @property
    def caught_up(self) -> bool:
        """Whether the last :meth:`get_queue_messages` found the queue caught up: it returned
        every record the queue held when it read (fewer than asked, or none), so nothing
        older than the wall clock waits unread. False before the first read, after a read
        that may have left records behind, and while the queue cannot be read.

        The pulling agent's processing clock follows it (docs/event-time.md, backlogs):
        while a queue has unread records, its clock is the arrival time of the newest
        record read; the wall clock ticks its streams only once a read found it caught up.
        """
        ...

    async def messages_delivered(self, tokens: Sequence[SequenceToken]) -> None:
        """Acknowledge records every consumer has finished with.

        ``tokens`` are a contiguous run in queue order, following the previous call's; a
        durable adapter checkpoints the last one (Orleans' ``MessagesDeliveredAsync``).
        """

    async def shutdown(self) -> None:
        """Flush the checkpoint and release the queue's resources."""


class ReceiverDefaults:
    """The plain answers to what a :class:`QueueAdapterReceiver` declares, for receivers with
    nothing better (as :class:`ContainerQueueAdapter` is for adapters).

    >>> from streams.core.batch import QueueMessage
    >>> read = [QueueMessage(QueueId(0), n, b"", 0.0) for n in (4, 5)]
    >>> ReceiverDefaults.gathers_containers, list(ReceiverDefaults().positions(read))
    (False, [4, 5])
    """

    gathers_containers: bool = False

    def positions(self, messages: Sequence[QueueMessage]) -> Iterable[int]:
        return (m.sequence_number for m in messages)


@runtime_checkable
class RewindableReceiver(QueueAdapterReceiver, Protocol):
    """A receiver that can re-read retained history (rewind, detached-cursor catch-up)."""

    async def read_range(self, start_sequence: int, max_count: int) -> list[QueueMessage]:
        """Up to ``max_count`` records from ``start_sequence`` (or the oldest retained)."""
        ...


@runtime_checkable
class ForwardingReceiver(QueueAdapterReceiver, Protocol):
    """A receiver that sends some of what it reads on to other queues instead of returning
    it (Kafka's re-keying hop, :mod:`streams.backends.kafka.repartition`).

    The pulling agent counts those records as read: a read that sent everything on still
    made progress (read again at once: :attr:`forwarded`), and a worker's ``drain`` goes on
    until the queues they went to have read them (:attr:`arrived`: a record sent on before a
    drain began but not there yet arrives during it, and counts in it).
    """

    @property
    def forwarded(self) -> int:
        """Records read and handed on to another queue, since the receiver was made."""
        ...

    @property
    def arrived(self) -> int:
        """Of :attr:`forwarded`, the records the queue they went to holds (its write
        acknowledged), counted by the reads that learn it: a read of the other queue that
        begins after this count grew finds them."""
        ...


Times = list[float | None] | None  # each event's own arrival time, or None: the write's


class EventWriter(Protocol):
    """How an adapter takes events when it does not take batch containers: ``encode`` a run of
    one stream's events into the items it writes (raising
    :class:`~streams.core.errors.EncodeError` for a value it cannot encode), ``write`` many
    items durably, in order. The Kafka adapter has one for topics of one record per event."""

    def encode(
        self, queue: QueueId, stream_id: StreamId, kind: BatchKind, values: list[Any], times: Times
    ) -> list[Any]: ...

    async def write(self, items: list[Any]) -> None: ...


@runtime_checkable
class QueueAdapter(Protocol):
    """The producer side of the queues, and the maker of receivers.

    Adapters declare what they can do instead of being probed for it: every adapter writes
    several containers in one call (:meth:`queue_message_batches`) and says whether it takes
    events its own way (:meth:`event_writer`). :class:`ContainerQueueAdapter` gives the plain
    answers, for adapters with nothing better.
    """

    name: str
    is_rewindable: bool

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
        """Durably enqueue one encoded batch container; return once it is accepted."""

    async def queue_message_batches(self, items: Sequence[tuple[QueueId, StreamId, bytes]]) -> None:
        """Durably enqueue several containers, in order; return once all are accepted."""

    def event_writer(self, max_event_size: int) -> EventWriter | None:
        """The adapter's own way to take events, writing no record over ``max_event_size``
        bytes, or ``None``: it takes batch containers."""

    def create_receiver(self, queue: QueueId, max_record_size: int = 1 << 20) -> QueueAdapterReceiver:
        """The receiver of ``queue``; one that decodes records itself refuses any over
        ``max_record_size`` bytes (:class:`~streams.core.errors.RecordTooLargeError`)."""
        ...

    async def close(self) -> None: ...


class ContainerQueueAdapter:
    """The plain capabilities of an adapter that takes batch containers one call at a time:
    several are written one by one, and events are encoded into containers by the publisher.

    >>> import anyio
    >>> class Printing(ContainerQueueAdapter):
    ...     async def queue_message_batch(self, queue, stream_id, payload):
    ...         print(queue, payload)
    >>> anyio.run(Printing().queue_message_batches, [(0, "s", b"a"), (1, "s", b"b")])
    0 b'a'
    1 b'b'
    >>> Printing().event_writer(1 << 20) is None
    True
    """

    async def queue_message_batch(self, queue: QueueId, stream_id: StreamId, payload: bytes) -> None:
        raise NotImplementedError

    async def queue_message_batches(self, items: Sequence[tuple[QueueId, StreamId, bytes]]) -> None:
        for queue, stream_id, payload in items:
            await self.queue_message_batch(queue, stream_id, payload)

    def event_writer(self, max_event_size: int) -> EventWriter | None:
        return None


class QueueAdapterFactory(Protocol):
    """Builds the adapter and names the queue layout (Orleans' ``IQueueAdapterFactory``)."""

    async def create_adapter(self) -> QueueAdapter: ...

    def get_queue_mapper(self) -> QueueMapper: ...


# Event-time state a receiver saves beside its checkpoints (the embedded and Kafka receivers).
StateKey = tuple[str, str]  # (consumer type name, stream id)
StateRows = tuple[list[tuple[str, str, int, int, bytes]], list[StateKey]]  # upserts, deletes
# One activation's saved unit as ``headrace state`` lists it: (queue, consumer type, stream, position, unit).
SavedStateRow = tuple[int, str, str, SequenceToken, bytes]


class StateSource(Protocol):
    """What a receiver saves with its checkpoint (the pulling agent's activation states)."""

    def pending(self) -> bool: ...

    def collect(self) -> StateRows: ...

    def written(self, ok: bool) -> None: ...


@runtime_checkable
class StateLookup(Protocol):
    """A stateful receiver that reads one activation's durable state when it is needed,
    rather than every one at start (the embedded store): a worker then keeps none of the
    durable state of streams it does not serve now."""

    def saved_state(self, key: StateKey) -> tuple[SequenceToken, bytes] | None: ...

    def saved_states(self, keys: Collection[StateKey]) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The saved states of ``keys`` in one read (a key without one is left out): the
        streams one queue read activates first are looked up together."""
        ...

    async def expire_states(self, consumer: str, before: float) -> int: ...


@runtime_checkable
class StatefulReceiver(Protocol):
    """A receiver that saves activation states with its checkpoints."""

    state_source: StateSource | None

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]: ...


class QueueCheckpointer(Protocol):
    """What persists a queue's checkpoint with the activation states it relies on (Orleans'
    ``IStreamQueueCheckpointer``): the embedded store's, the Kafka changelog's."""

    state_source: StateSource | None

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]: ...


class LocalStates(Protocol):
    """A worker's local copy of its queues' saved states, each queue's up to the changelog
    offset it records (the Kafka backend's local state store: an embedded-store file,
    :class:`~streams.backends.embedded.changelog_copy.ChangelogCopy`). A call that finds the
    file damaged sets it aside, starts an empty one (counted in ``set_aside``) and raises
    :class:`~streams.core.errors.LocalStoreDamagedError`."""

    set_aside: int

    def offset(self, queue: int) -> int | None: ...

    def synced(self, queue: int) -> tuple[int, float] | None: ...

    async def apply(
        self,
        queue: int,
        rows: StateRows,
        *,
        next_offset: int,
        after: int | None = None,
        written_at: float | None = None,
    ) -> None: ...

    async def forget(self, queue: int) -> int: ...

    async def read_states(self, queue: int) -> dict[StateKey, tuple[SequenceToken, bytes]]: ...

    def saved_state(self, queue: int, key: StateKey) -> tuple[SequenceToken, bytes] | None: ...

    def saved_states(self, queue: int, keys: Collection[StateKey]) -> dict[StateKey, tuple[SequenceToken, bytes]]: ...

    async def idle_keys(self, queue: int, consumer: str, before: float) -> list[StateKey]: ...

    def count(self, queue: int) -> int: ...

    def read_note(self, name: str) -> bytes | None: ...

    def write_note(self, name: str, data: bytes | None) -> None: ...

    def close(self) -> None: ...


class CheckpointedState:
    """A :class:`StatefulReceiver`'s face for a receiver that holds its ``checkpointer``: the
    states to save and those saved are the checkpointer's."""

    checkpointer: QueueCheckpointer

    @property
    def state_source(self) -> StateSource | None:
        """The activations' states, saved with each checkpoint (set by the pulling agent)."""
        return self.checkpointer.state_source

    @state_source.setter
    def state_source(self, source: StateSource | None) -> None:
        self.checkpointer.state_source = source

    async def load_states(self) -> dict[StateKey, tuple[SequenceToken, bytes]]:
        """The states saved with this queue's checkpoint, by whichever worker read it before."""
        return await self.checkpointer.load_states()
