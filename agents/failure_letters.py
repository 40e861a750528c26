"""The dead letters the agents write: a record that does not decode, and the events of a
delivery that never succeeded (with the traceback, so the failure stays findable): reason
``activation_failed`` when the consumer's constructor raised, else ``delivery_failed``.

>>> failure_detail("sub-1", ValueError("boom"))
'sub-1: ValueError: boom'
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence

from streams.core.batch import BatchContainer, Event, QueueMessage
from streams.core.deadletters import LETTER_PREFIX, DeadLetter, event_position
from streams.core.errors import (
    ActivationError,
    DecodeError,
    user_error,
)


def failure_reason(error: BaseException) -> str:
    """``activation_failed`` for a constructor's error, else ``delivery_failed``."""
    return "activation_failed" if isinstance(error, ActivationError) else "delivery_failed"


def failure_detail(subscription_id: str, error: BaseException) -> str:
    """A failed delivery's dead-letter detail: the subscription, then the error with its
    traceback, as Python prints it (just the error when it was never raised, a timeout)."""
    return f"{subscription_id}: " + "".join(traceback.format_exception(user_error(error))).rstrip()


def failed_letters(
    subscription_id: str,
    stream: str,
    queue: int | None,
    events: Sequence[Event],
    error: BaseException,
    given: BatchContainer | None = None,
) -> list[DeadLetter]:
    """One letter per event of a batch no delivery attempt took (:func:`failure_reason`).
    Its event time is the one the producer gave (``given``: the container the events came
    in; None: none given), never the arrival time an event without one is delivered with: a letter
    says what is known of the event, and ``dlq list`` shows ``-`` for what is not."""
    detail = failure_detail(subscription_id, error)
    reason = failure_reason(error)
    letters = []
    for e in events:
        sequence_number, event_index = event_position(e)  # the same on every read
        letters.append(
            DeadLetter(
                reason,
                stream=stream,
                queue=queue,
                sequence_number=sequence_number,
                event_index=event_index,
                value=e.value,
                event_time=None if given is None else given.given_time(e),
                detail=detail,
            )
        )
    return letters


def undecodable_letter(message: QueueMessage, error: BaseException, stream: str | None = None) -> DeadLetter:
    """The raw record whose batch (or, with ``stream``, whose values) does not decode, or
    that is too large to (``too_large``: its first bytes only)."""
    offset = error.offset if isinstance(error, DecodeError) else None
    reason = error.reason if isinstance(error, DecodeError) else "undecodable"
    return DeadLetter(
        reason,
        stream=stream,
        queue=message.queue.number,
        # a foreign record's offset (the same on every read), else the message's position
        sequence_number=message.sequence_number if offset is None else offset,
        payload=message.payload[:LETTER_PREFIX] if reason == "too_large" else message.payload,
        detail=str(error),
    )
