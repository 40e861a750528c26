"""The dead letters the agents write: a record that does not decode, and the events of a
delivery that never succeeded (with the traceback, so the failure stays findable).

>>> failure_detail("sub-1", ValueError("boom"))
'sub-1: ValueError: boom'
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence

from streams.core.batch import Event, QueueMessage
from streams.core.deadletters import DeadLetter


def failure_detail(subscription_id: str, error: BaseException) -> str:
    """A failed delivery's dead-letter detail: the subscription, then the error with its
    traceback, as Python prints it (just the error when it was never raised, a timeout)."""
    return f"{subscription_id}: " + "".join(traceback.format_exception(error)).rstrip()


def failed_letters(
    subscription_id: str, stream: str, queue: int, events: Sequence[Event], error: BaseException
) -> list[DeadLetter]:
    """One ``delivery_failed`` letter per event of a batch no delivery attempt took."""
    detail = failure_detail(subscription_id, error)
    return [
        DeadLetter(
            "delivery_failed",
            stream=stream,
            queue=queue,
            sequence_number=e.token.sequence_number,
            event_index=e.token.event_index,
            value=e.value,
            event_time=e.event_time,
            detail=detail,
        )
        for e in events
    ]


def undecodable_letter(message: QueueMessage, error: BaseException, stream: str | None = None) -> DeadLetter:
    """The raw record whose batch (or, with ``stream``, whose values) does not decode."""
    return DeadLetter(
        "undecodable",
        stream=stream,
        queue=message.queue.number,
        sequence_number=message.sequence_number,
        payload=message.payload,
        detail=str(error),
    )
