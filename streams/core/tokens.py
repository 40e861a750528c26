"""Sequence tokens: where an event stands in its queue, totally ordered within the queue."""

from __future__ import annotations

from dataclasses import dataclass


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
