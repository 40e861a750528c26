"""Stream identities, queue identities and sequence tokens: what an event is about, and where it
stands in its queue.

Stream identities and queue identities, with hashes that are stable across processes.

Sequence tokens: where an event stands in its queue, totally ordered within the queue (the
lower of two, :func:`lowest`, is what a checkpoint holds to).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field

StreamKey = str | int | uuid.UUID


def stable_hash(data: bytes) -> int:
    """A 32-bit hash that is the same in every process and run (unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "big")


@dataclass(frozen=True, slots=True, order=True)
class StreamId:
    """A stream's identity: a namespace and a key within it.

    >>> StreamId("sensors", "s-1")
    StreamId('sensors', 's-1')
    >>> StreamId("sensors", "s-1").uniform_hash == StreamId("sensors", "s-1").uniform_hash
    True
    """

    namespace: str
    key: str
    uniform_hash: int = field(init=False, compare=False, repr=False)

    def __init__(self, namespace: str, key: StreamKey) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise TypeError(f"a stream namespace is a non-empty str, not {namespace!r}")
        if not isinstance(key, (str, int, uuid.UUID)) or isinstance(key, bool):
            raise TypeError(f"a stream key is a str, int or UUID, not {type(key).__name__}")
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "key", str(key))
        object.__setattr__(self, "uniform_hash", stable_hash(f"{namespace}\x00{key}".encode()))

    def __hash__(self) -> int:
        # The stable hash is already computed; stream ids are dict keys on every hot path.
        return self.uniform_hash

    def __repr__(self) -> str:
        return f"StreamId({self.namespace!r}, {self.key!r})"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.key}"

    @classmethod
    def parse(cls, text: str) -> StreamId:
        """Read the ``namespace/key`` form that ``str()`` writes."""
        namespace, sep, key = text.partition("/")
        if not sep or not namespace:
            raise ValueError(f"a stream id reads 'namespace/key', not {text!r}")
        return cls(namespace, key)


@dataclass(frozen=True, slots=True, order=True)
class QueueId:
    """One partition of the durable queues (Kafka partition ``number`` at scale).

    >>> str(QueueId(3))
    'queue-3'
    """

    number: int

    def __str__(self) -> str:
        return f"queue-{self.number}"


@dataclass(frozen=True, slots=True, order=True)
class SequenceToken:
    """The position of one event: its batch container's sequence number in the queue
    (an offset: row id in the embedded store, Kafka offset) and its index in that batch.

    A consumer tells a redelivery after a crash by a token it has already seen.

    >>> SequenceToken(10, 2) < SequenceToken(11, 0)
    True
    >>> SequenceToken.parse(str(SequenceToken(10, 2)))
    SequenceToken(sequence_number=10, event_index=2)
    """

    sequence_number: int
    event_index: int = 0

    def __str__(self) -> str:
        return f"{self.sequence_number}:{self.event_index}"

    @classmethod
    def parse(cls, text: str) -> SequenceToken:
        seq, _, index = text.partition(":")
        try:
            return cls(int(seq), int(index or 0))
        except ValueError:
            raise ValueError(f"a sequence token reads 'SEQ:INDEX', not {text!r}") from None


def lowest(a: SequenceToken | None, b: SequenceToken | None) -> SequenceToken | None:
    """The lower of two queue positions, either of which may be None (none).

    >>> lowest(SequenceToken(3), None), lowest(SequenceToken(3), SequenceToken(2))
    (SequenceToken(sequence_number=3, event_index=0), SequenceToken(sequence_number=2, event_index=0))
    """
    if a is None:
        return b
    return a if b is None or a <= b else b
